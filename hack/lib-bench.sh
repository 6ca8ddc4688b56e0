#!/usr/bin/env bash
# Shared by the *-bench.sh scripts (source it; not run on its own): builds
# the binaries, pins processes with TASKSET=1, starts a kube-apiserver and
# a discovery server, and stops them on exit.
#
#   PORT_BASE   the server listens on PORT_BASE+10 (xDS), +80 (HTTP), +14
#               (monitoring); default: the first of 31000, 31100, ... whose
#               three ports nobody listens on (others run benchmarks too).
#               The CA and webhooks are off (--secureGRPCAddr= --httpsAddr=):
#               the proxies speak plaintext xDS, and in kube mode the CA
#               would hold /ready until an istio-system namespace exists
#   TASKSET=1   server on core 1 (taskset -c 1), pilot-load on core 0, so the
#               server has a core of its own (kube-apiserver and etcd unpinned)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=$(mktemp -d)
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$bin" "$work"
}
trap cleanup EXIT
go build -o "$bin/" ./cmd/pilot-discovery ./cmd/pilot-load ./internal/kubetest/cmd/kubeenv
port_busy() { ss -ltn | awk '{print $4}' | grep -qE ":($(( $1 + 10 ))|$(( $1 + 80 ))|$(( $1 + 14 )))\$"; }
port_base=${PORT_BASE:-31000}
if [ -z "${PORT_BASE:-}" ]; then
  while port_busy "$port_base"; do port_base=$((port_base + 100)); done
fi
xds_addr=127.0.0.1:$((port_base + 10))
http_addr=127.0.0.1:$((port_base + 80))
metrics_url=http://127.0.0.1:$((port_base + 14))/metrics
server_pin=()
tool_pin=()
if [ -n "${TASKSET:-}" ]; then
  server_pin=(taskset -c 1)
  tool_pin=(taskset -c 0)
fi

# start_kube DIR: a kube-apiserver + etcd with the Istio CRDs; sets $kubeconfig.
start_kube() {
  local dir=$1
  eval "$(hack/testenv.sh env)"
  "$bin/kubeenv" --crds charts/meshpilot/crds/customresourcedefinitions.gen.yaml \
    --kubeconfig-out "$dir/kubeconfig" 2> "$dir/kubeenv.log" &
  kpid=$!
  pids+=("$kpid")
  until [ -f "$dir/kubeconfig" ]; do
    kill -0 "$kpid" || { cat "$dir/kubeenv.log"; exit 1; }
    sleep 0.5
  done
  kubeconfig=$dir/kubeconfig
}

# start_server DIR SOURCE_FLAGS...: a discovery server (pinned with TASKSET);
# sets $pid and $ready_s (seconds from start to /ready).
start_server() {
  local dir=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  mkdir -p "${OUT:-/tmp/meshpilot-load/results}"
  server_log=${OUT:-/tmp/meshpilot-load/results}/discovery-$(date +%Y%m%dT%H%M%S).log
  "${server_pin[@]}" "$bin/pilot-discovery" discovery "$@" --meshConfig "$dir/none" \
    --grpcAddr "$xds_addr" --httpAddr "$http_addr" --monitoringAddr "127.0.0.1:$((port_base + 14))" \
    --secureGRPCAddr= --httpsAddr= \
    --log_output_level default:warn 2> "$server_log" &
  pid=$!
  pids+=("$pid")
  until curl -sf "$http_addr/ready" >/dev/null; do
    kill -0 "$pid" || { cat "$server_log"; exit 1; }
    sleep 0.1
  done
  t1=$(date +%s.%N)
  # /ready may have come from another process on the port: ours must live.
  kill -0 "$pid" || { cat "$server_log"; exit 1; }
  ready_s=$(echo "$t1 - $t0" | bc)
  echo "server pid $pid: start to /ready ${ready_s} s (log: $server_log)"
}

# stop PID: stops one process this script started.
stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# load ARGS...: pilot-load (pinned with TASKSET).
load() { "${tool_pin[@]}" "$bin/pilot-load" "$@"; }
