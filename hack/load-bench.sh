#!/usr/bin/env bash
# Reproduces BENCHMARKS.md's pilot-load figures: the issue's workload
# (500 ServiceEntries x 5 endpoints, 500 proxies on CDS+EDS, 5 changes),
# a fresh discovery server per run, file mode.
#
#   hack/load-bench.sh delta 3      # 3 runs, Delta
#   hack/load-bench.sh sotw 3       # 3 runs, SotW
#   PROXIES=5000 SERVICES=1000 hack/load-bench.sh delta 1
#   KUBE=1 hack/load-bench.sh delta 3      # kube mode: the workload and the markers are ServiceEntries
#                                          # in a real kube-apiserver (internal/kubetest/cmd/kubeenv)
#   TASKSET=1 hack/load-bench.sh delta 3   # server on core 1, pilot-load on core 0
#   PROFILE=1 CHANGES=30 hack/load-bench.sh delta 1   # CPU profile (PROFILE_SECONDS, default 10) from PROFILE_DELAY (3) s after ready
#
# JSON reports land in $OUT (default /tmp/meshpilot-load/results).
set -euo pipefail
mode=${1:?usage: load-bench.sh delta|sotw RUNS}
runs=${2:-3}
services=${SERVICES:-500}
endpoints=${ENDPOINTS:-5}
proxies=${PROXIES:-500}
conns=${CONNS:-10}
changes=${CHANGES:-5}
out=${OUT:-/tmp/meshpilot-load/results}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/pilot-discovery ./cmd/pilot-load ./internal/kubetest/cmd/kubeenv
if [ -n "${KUBE:-}" ]; then
  eval "$(hack/testenv.sh env)"
fi
mkdir -p "$out"
server_pin=()
tool_pin=()
if [ -n "${TASKSET:-}" ]; then
  server_pin=(taskset -c 1)
  tool_pin=(taskset -c 0)
fi
case "$mode" in
  delta) flag=--delta ;;
  sotw) flag=--sotw ;;
  *) echo "mode must be delta or sotw" >&2; exit 2 ;;
esac
for run in $(seq 1 "$runs"); do
  work=$(mktemp -d)
  if [ -n "${KUBE:-}" ]; then
    "$bin/kubeenv" --crds charts/meshpilot/crds/customresourcedefinitions.gen.yaml \
      --kubeconfig-out "$work/kubeconfig" 2> "$work/kubeenv.log" &
    kpid=$!
    until [ -f "$work/kubeconfig" ]; do
      kill -0 "$kpid" || { cat "$work/kubeenv.log"; exit 1; }
      sleep 0.5
    done
    "$bin/pilot-load" gen --services "$services" --endpoints "$endpoints" --format serviceentry --namespaces 10 \
      --apply --kubeconfig "$work/kubeconfig"
    source_flags=(--kubeconfig "$work/kubeconfig")
    change_flags=(--change-kube --kubeconfig "$work/kubeconfig")
  else
    "$bin/pilot-load" gen --services "$services" --endpoints "$endpoints" --format serviceentry --namespaces 10 --out "$work/config"
    source_flags=(--configDir "$work/config")
    change_flags=(--change-dir "$work/config")
  fi
  "${server_pin[@]}" "$bin/pilot-discovery" discovery "${source_flags[@]}" --meshConfig "$work/none" \
    --grpcAddr 127.0.0.1:25010 --httpAddr 127.0.0.1:25080 --monitoringAddr 127.0.0.1:25014 \
    --log_output_level default:warn 2> "$work/discovery.log" &
  pid=$!
  until curl -sf 127.0.0.1:25080/ready >/dev/null; do
    kill -0 "$pid" || { cat "$work/discovery.log"; exit 1; }
    sleep 0.2
  done
  if [ -n "${PROFILE:-}" ]; then
    (sleep "${PROFILE_DELAY:-3}"; curl -s -o "$out/$mode-$run.cpu.pprof" "127.0.0.1:25080/debug/pprof/profile?seconds=${PROFILE_SECONDS:-10}") &
  fi
  json="$out/$mode${KUBE:+-kube}-p$proxies-s$services-$run.json"
  "${tool_pin[@]}" "$bin/pilot-load" run --xds 127.0.0.1:25010 --proxies "$proxies" --conns "$conns" $flag --types cds,eds \
    --namespaces 10 --changes "$changes" "${change_flags[@]}" --pid "$pid" --json "$json" --timeout 2m
  kill "$pid"; wait "$pid" || true
  if [ -n "${KUBE:-}" ]; then kill "$kpid"; wait "$kpid" || true; fi
  rm -rf "$work"
  echo "run $run: $json"
done
