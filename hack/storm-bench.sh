#!/usr/bin/env bash
# Connection storm: PROXIES (5000) proxies open their streams all at once
# (--ramp 0) against a fresh server in file mode; reports time until every
# proxy has full config (CDS, EDS, LDS, RDS), the server's peak RSS during
# the phase, resets, server and tool CPU.
#
#   TASKSET=1 hack/storm-bench.sh 3         # 3 runs
#   PROXIES=1000 CONNS=10 hack/storm-bench.sh 1
#
# Target (issue 17): all ready within 20 s, memory bounded, no resets.
# JSON reports land in $OUT (default /tmp/meshpilot-load/results).
source "$(dirname "$0")/lib-bench.sh"
runs=${1:-1}
proxies=${PROXIES:-5000}
conns=${CONNS:-10}
services=${SERVICES:-500}
endpoints=${ENDPOINTS:-5}
types=${TYPES:-cds,eds,lds,rds}
mode=${MODE:-delta}
out=${OUT:-/tmp/meshpilot-load/results}
mkdir -p "$out"
for run in $(seq 1 "$runs"); do
  dir=$(mktemp -d -p "$work")
  load gen --services "$services" --endpoints "$endpoints" --format serviceentry --namespaces 10 --out "$dir/config" >/dev/null
  start_server "$dir" --configDir "$dir/config"
  json="$out/storm-$mode-p$proxies-$run.json"
  load run --xds "$xds_addr" --proxies "$proxies" --conns "$conns" --mode "$mode" --types "$types" --ramp 0 \
    --namespaces 10 --pid "$pid" --json "$json" --timeout "${TIMEOUT:-2m}" --log_output_level default:warn || echo "run $run: not every proxy converged"
  stop "$pid"
  echo "run $run: $json"
done
