#!/usr/bin/env bash
# Endpoint churn in kube mode: DEPLOYMENTS (50) Services of PODS (20) Pods
# each (with EndpointSlices, as the endpointslice controller writes them)
# in a real kube-apiserver, PROXIES (2000) proxies, then rolling restarts at
# RATE (1000) pod replacements per minute for DURATION (60s). Reports EDS
# convergence p50/p99 (EndpointSlice write → new address healthy in each
# subscribed proxy's EDS), server cores, tool CPU, peak RSS, and full pushes
# (pilot_pushcontext_init_seconds_count delta).
#
#   TASKSET=1 hack/churn-bench.sh 1
#   PROXIES=200 RATE=300 DURATION=20s hack/churn-bench.sh 1
#   TOOLPROF=1 hack/churn-bench.sh 1   # pilot-load's CPU profile (JSON.tool.pprof)
#
# Target (issue 17): EDS p99 <= 1 s; server <= 0.5 core average; no full
# push caused by endpoints alone.
source "$(dirname "$0")/lib-bench.sh"
runs=${1:-1}
deployments=${DEPLOYMENTS:-50}
pods=${PODS:-20}
namespaces=${NAMESPACES:-10}
proxies=${PROXIES:-2000}
conns=${CONNS:-20}
rate=${RATE:-1000}
duration=${DURATION:-60s}
out=${OUT:-/tmp/meshpilot-load/results}
mkdir -p "$out"
for run in $(seq 1 "$runs"); do
  dir=$(mktemp -d -p "$work")
  start_kube "$dir"
  load gen --services "$deployments" --endpoints "$pods" --namespaces "$namespaces" --format kube --pods \
    ${HEADLESS:+--headless} --apply --kubeconfig "$kubeconfig" --log_output_level default:warn
  start_server "$dir" --kubeconfig "$kubeconfig"
  json="$out/churn${HEADLESS:+-headless}-d$deployments-p$proxies-r$rate-$run.json"
  load run --xds "$xds_addr" --proxies "$proxies" --conns "$conns" --delta --types "${TYPES:-cds,eds,lds,rds}" \
    --namespaces "$namespaces" --pid "$pid" --json "$json" --timeout "${TIMEOUT:-2m}" \
    --churn-deployments "$deployments" --churn-pods "$pods" --churn-rate "$rate" --churn-duration "$duration" \
    ${LIMIT:+--churn-limit "$LIMIT"} ${TOOLPROF:+--cpuprofile "$json.tool.pprof"} --metrics "$metrics_url" --kubeconfig "$kubeconfig" \
    --log_output_level default:warn || echo "run $run: not every proxy converged"
  stop "$pid"
  stop "$kpid"
  echo "run $run: $json"
done
