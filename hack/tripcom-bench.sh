#!/usr/bin/env bash
# Trip.com's shape: SERVICES (30000) ServiceEntries with a workloadSelector
# and SERVICES×ENDPOINTS (30000) WorkloadEntries over NAMESPACES (100)
# namespaces, a Sidecar per namespace (egress: own namespace, istio-system,
# load-markers), PROXIES (1000) proxies. Prints server start to /ready, then
# initial config and CHANGES (5) one-entry changes (a marker ServiceEntry in
# load-markers, which every Sidecar exports).
#
#   TASKSET=1 hack/tripcom-bench.sh 1
#   KUBE=1 TASKSET=1 hack/tripcom-bench.sh 1   # objects in a real kube-apiserver (slow to apply: ~60k SSA calls)
#   SERVICES=3000 PROXIES=200 hack/tripcom-bench.sh 1
#   HEAP=1 hack/tripcom-bench.sh 1   # file mode: the server's heap (after a GC) before each change and at the end ($OUT/tripcom-RUN.heap-I.pprof, heap-end.pprof)
#
# Target (issue 17): start to ready <= 60 s; one-entry change p99 <= 2 s.
source "$(dirname "$0")/lib-bench.sh"
runs=${1:-1}
services=${SERVICES:-30000}
endpoints=${ENDPOINTS:-1}
namespaces=${NAMESPACES:-100}
proxies=${PROXIES:-1000}
conns=${CONNS:-10}
changes=${CHANGES:-5}
out=${OUT:-/tmp/meshpilot-load/results}
mkdir -p "$out"
gen=(gen --services "$services" --endpoints "$endpoints" --namespaces "$namespaces" --format serviceentry-workloadentry --sidecars)
for run in $(seq 1 "$runs"); do
  dir=$(mktemp -d -p "$work")
  if [ -n "${KUBE:-}" ]; then
    start_kube "$dir"
    load "${gen[@]}" --apply --kubeconfig "$kubeconfig" --log_output_level default:warn
    source_flags=(--kubeconfig "$kubeconfig")
    change_flags=(--change-kube --kubeconfig "$kubeconfig")
  else
    load "${gen[@]}" --out "$dir/config"
    source_flags=(--configDir "$dir/config")
    change_flags=(--change-dir "$dir/config")
  fi
  start_server "$dir" "${source_flags[@]}"
  if [ -n "${HEAP:-}" ] && [ -z "${KUBE:-}" ]; then
    m="$dir/config/marker-{i}.yaml"
    change_flags=(--change-cmd "curl -s -o $out/tripcom-$run.heap-{i}.pprof '$http_addr/debug/pprof/heap?gc=1';
      $bin/pilot-load marker {i} > $dir/config/.m{i}.tmp && mv $dir/config/.m{i}.tmp $m"
      --change-cleanup-cmd "rm -f $m")
  fi
  json="$out/tripcom${KUBE:+-kube}-s$services-p$proxies-$run.json"
  load run --xds "$xds_addr" --proxies "$proxies" --conns "$conns" --delta --types cds,eds,lds,rds \
    --namespaces "$namespaces" --changes "$changes" "${change_flags[@]}" --pid "$pid" --json "$json" \
    --timeout "${TIMEOUT:-2m}" --log_output_level default:warn || echo "run $run: not every proxy converged"
  if [ -n "${HEAP:-}" ]; then
    curl -s -o "$out/tripcom-$run.heap-end.pprof" "$http_addr/debug/pprof/heap?gc=1" || true
    grep -E '^(VmRSS|RssAnon|RssFile)' "/proc/$pid/status" || true
  fi
  [ -f "$json" ] && jq --argjson ready "$ready_s" '. + {server_start_to_ready_s: $ready}' "$json" > "$json.tmp" && mv "$json.tmp" "$json"
  stop "$pid"
  [ -n "${KUBE:-}" ] && stop "$kpid"
  echo "run $run: start to ready ${ready_s} s; $json"
done
