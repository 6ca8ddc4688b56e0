#!/usr/bin/env bash
# Reproduces BENCHMARKS.md's pilot-load figures: the issue's workload
# (500 ServiceEntries x 5 endpoints, 500 proxies on CDS+EDS, 5 changes),
# a fresh discovery server per run, file mode. Ports are free ones
# (hack/lib-bench.sh), so runs of other engineers do not collide.
#
#   hack/load-bench.sh delta 3      # 3 runs, Delta
#   hack/load-bench.sh sotw 3       # 3 runs, SotW
#   PROXIES=5000 SERVICES=1000 hack/load-bench.sh delta 1
#   KUBE=1 hack/load-bench.sh delta 3      # kube mode: the workload and the markers are ServiceEntries
#                                          # in a real kube-apiserver (internal/kubetest/cmd/kubeenv)
#   TASKSET=1 hack/load-bench.sh delta 3   # server on core 1, pilot-load on core 0
#   PROFILE=1 CHANGES=30 hack/load-bench.sh delta 1   # CPU profile (PROFILE_SECONDS, default 10) from PROFILE_DELAY (3) s after ready
#   TOOLPROF=1 hack/load-bench.sh delta 1  # pilot-load's own CPU profile ($OUT/MODE-RUN.tool.pprof)
#   HEAP=1 hack/load-bench.sh delta 1      # file mode: heap profile, /metrics and smaps after the initial fan-out ($OUT/MODE-RUN.heap.pprof, .metrics, .smaps)
#
# JSON reports land in $OUT (default /tmp/meshpilot-load/results), with the
# server's /metrics at the end of each run (MODE-RUN.end.metrics).
mode=${1:?usage: load-bench.sh delta|sotw RUNS}
source "$(dirname "$0")/lib-bench.sh"
runs=${2:-3}
services=${SERVICES:-500}
endpoints=${ENDPOINTS:-5}
proxies=${PROXIES:-500}
conns=${CONNS:-10}
changes=${CHANGES:-5}
out=${OUT:-/tmp/meshpilot-load/results}
mkdir -p "$out"
case "$mode" in
  delta) flag=--delta ;;
  sotw) flag=--sotw ;;
  *) echo "mode must be delta or sotw" >&2; exit 2 ;;
esac
gen=(gen --services "$services" --endpoints "$endpoints" --format serviceentry --namespaces 10)
for run in $(seq 1 "$runs"); do
  dir=$(mktemp -d -p "$work")
  if [ -n "${KUBE:-}" ]; then
    start_kube "$dir"
    load "${gen[@]}" --apply --kubeconfig "$kubeconfig"
    source_flags=(--kubeconfig "$kubeconfig")
    change_flags=(--change-kube --kubeconfig "$kubeconfig")
  else
    load "${gen[@]}" --out "$dir/config"
    source_flags=(--configDir "$dir/config")
    change_flags=(--change-dir "$dir/config")
  fi
  start_server "$dir" "${source_flags[@]}"
  if [ -n "${PROFILE:-}" ]; then
    (sleep "${PROFILE_DELAY:-3}"; curl -s -o "$out/$mode-$run.cpu.pprof" "$http_addr/debug/pprof/profile?seconds=${PROFILE_SECONDS:-10}") &
  fi
  if [ -n "${HEAP:-}" ] && [ -z "${KUBE:-}" ]; then
    # Change 0 first saves the heap as the initial fan-out left it, then
    # writes the marker as --change-dir would.
    m="$dir/config/marker-{i}.yaml"
    change_flags=(--change-cmd "if [ {i} = 0 ]; then curl -s -o $out/$mode-$run.heap.pprof "$http_addr/debug/pprof/heap?gc=1";
      curl -s -o $out/$mode-$run.metrics $metrics_url; cp /proc/$pid/smaps $out/$mode-$run.smaps; fi;
      $bin/pilot-load marker {i} > $dir/config/.m{i}.tmp && mv $dir/config/.m{i}.tmp $m"
      --change-cleanup-cmd "rm -f $m")
  fi
  json="$out/$mode${KUBE:+-kube}-p$proxies-s$services-$run.json"
  load run --xds "$xds_addr" --proxies "$proxies" --conns "$conns" $flag --types cds,eds \
    --namespaces 10 --changes "$changes" "${change_flags[@]}" --pid "$pid" --json "$json" --timeout 2m \
    ${TOOLPROF:+--cpuprofile "$out/$mode-$run.tool.pprof"}
  curl -s -o "$out/$mode-$run.end.metrics" "$metrics_url" || true
  stop "$pid"
  if [ -n "${KUBE:-}" ]; then stop "$kpid"; fi
  echo "run $run: $json"
done
