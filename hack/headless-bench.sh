#!/usr/bin/env bash
# One Service of PODS (1000) Pods, headless then ClusterIP, under the same
# PROXIES (500) proxies in kube mode, with CHANGES (10) pod replacements so
# the endpoint path runs. Reports the server CPU (initial + churn phases)
# and peak RSS of each and their ratio headless / ClusterIP.
#
#   TASKSET=1 hack/headless-bench.sh
#
# Target (issue 17): headless no more than 1.2x ClusterIP in CPU and memory.
set -euo pipefail
here=$(dirname "$0")
out=${OUT:-/tmp/meshpilot-load/results}
export DEPLOYMENTS=1 PODS=${PODS:-1000} NAMESPACES=1 PROXIES=${PROXIES:-500} CONNS=${CONNS:-10}
export RATE=${RATE:-120} DURATION=${DURATION:-30s} LIMIT=${CHANGES:-10} OUT="$out"
HEADLESS=1 "$here/churn-bench.sh" 1
env -u HEADLESS "$here/churn-bench.sh" 1
h="$out/churn-headless-d1-p$PROXIES-r$RATE-1.json"
c="$out/churn-d1-p$PROXIES-r$RATE-1.json"
summary='{cpu: ((.initial.server_cpu_seconds // 0) + (.churn.server_cpu_seconds // 0)),
  rss: ([.initial.server_peak_rss_bytes, .churn.server_peak_rss_bytes] | max),
  tool: (.initial.tool_cpu_seconds + (.churn.tool_cpu_seconds // 0)), initial_ms: .initial.total_ms}'
jq -n --slurpfile h "$h" --slurpfile c "$c" "
  (\$h[0] | $summary) as \$H | (\$c[0] | $summary) as \$C |
  \"headless:  server CPU \(\$H.cpu) s, peak RSS \(\$H.rss / 1048576 | floor) MB, tool CPU \(\$H.tool) s, initial \(\$H.initial_ms) ms\",
  \"ClusterIP: server CPU \(\$C.cpu) s, peak RSS \(\$C.rss / 1048576 | floor) MB, tool CPU \(\$C.tool) s, initial \(\$C.initial_ms) ms\",
  \"ratio headless/ClusterIP: CPU \(\$H.cpu / \$C.cpu * 100 | round / 100), RSS \(\$H.rss / \$C.rss * 100 | round / 100)\"" -r
