#!/usr/bin/env bash
# testenv.sh — installs and locates the real Kubernetes parts the test suite
# runs against: etcd (Debian package), kube-apiserver (built from the Go module
# proxy) and helm (go install). Built binaries are cached outside the work
# tree, keyed by version, so only the first run pays:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot/kube-apiserver-<version>/kube-apiserver
#   ${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot/helm-<version>/helm
#
# Usage:
#   hack/testenv.sh install   # idempotent; prints the time each step took
#   hack/testenv.sh env       # prints export lines: eval "$(hack/testenv.sh env)"
#
# Versions can be overridden with KUBE_VERSION and HELM_VERSION.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot"
APISERVER_DIR="$CACHE_ROOT/kube-apiserver-$KUBE_VERSION"
HELM_DIR="$CACHE_ROOT/helm-$HELM_VERSION"
export PATH="$PATH:/usr/local/go/bin"

die() {
  echo "testenv: ERROR: $*" >&2
  exit 1
}

log() {
  echo "testenv: $*" >&2
}

# timed NAME CMD... runs CMD and reports how long it took, failing loudly.
timed() {
  local name="$1"
  shift
  local start end
  start=$(date +%s)
  if ! "$@"; then
    die "step '$name' failed (see the output above)"
  fi
  end=$(date +%s)
  log "step '$name' done in $((end - start))s"
}

# with_lock FILE CMD... serialises CMD across concurrent runs of this script.
with_lock() {
  local lockfile="$1"
  shift
  mkdir -p "$CACHE_ROOT"
  if command -v flock >/dev/null 2>&1; then
    (
      flock 9
      "$@"
    ) 9>"$lockfile"
  else
    "$@"
  fi
}

# publish TMPDIR FINALDIR BINARY moves a finished build into place atomically
# (rename also replaces an empty FINALDIR); if a concurrent run got there
# first, its result is kept and ours discarded.
publish() {
  local tmp="$1" final="$2" bin="$3"
  if mv -T "$tmp" "$final" 2>/dev/null; then
    return 0
  fi
  rm -rf "$tmp"
  [ -x "$final/$bin" ] || die "could not move the build into $final (remove that directory and retry)"
}

etcd_path() {
  command -v etcd 2>/dev/null || true
}

install_etcd() {
  if [ -n "$(etcd_path)" ]; then
    log "etcd present: $(etcd_path) ($(etcd --version 2>/dev/null | head -1))"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "etcd is missing and apt-get is not available; install etcd >= 3.4 and put it on PATH"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "etcd is missing; run as root or install package etcd-server"
    sudo=sudo
  fi
  log "installing etcd (apt package etcd-server)"
  $sudo apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends etcd-server ||
    die "apt-get install etcd-server failed"
  [ -n "$(etcd_path)" ] || die "etcd-server installed but no etcd on PATH"
  # The Debian package starts a system etcd on :2379; tests run their own on
  # free ports, so stop the packaged one where a service manager exists.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    $sudo systemctl stop etcd || true
    $sudo systemctl disable etcd >/dev/null 2>&1 || true
  fi
}

build_apiserver() {
  if [ -x "$APISERVER_DIR/kube-apiserver" ]; then
    log "kube-apiserver $KUBE_VERSION cached: $APISERVER_DIR/kube-apiserver"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH (expected /usr/local/go/bin/go)"
  local tmp mod gomod replaces minor
  tmp=$(mktemp -d "$CACHE_ROOT/.kube-apiserver-$KUBE_VERSION.XXXXXX") || die "mktemp in $CACHE_ROOT failed"
  trap 'rm -rf "$tmp"' RETURN
  mod="$tmp/mod"
  mkdir -p "$mod" "$tmp/out"

  log "downloading k8s.io/kubernetes@$KUBE_VERSION to read its staging replaces"
  gomod=$(cd "$mod" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
    die "could not find go.mod of k8s.io/kubernetes@$KUBE_VERSION"
  fi

  # Every module k8s.io/kubernetes replaces with ./staging/src/k8s.io/NAME is
  # published as k8s.io/NAME v0.MINOR.PATCH; pin each to that version.
  local staging_version="v0.${KUBE_VERSION#v1.}"
  replaces=$(grep -E '^[[:space:]]*(replace[[:space:]]+)?k8s\.io/[^[:space:]]+[[:space:]]+=>[[:space:]]+\./staging/' "$gomod" |
    sed -E 's/^[[:space:]]*(replace[[:space:]]+)?(k8s\.io\/[^[:space:]]+).*/\2/' | sort -u)
  [ -n "$replaces" ] || die "no ./staging replaces found in $gomod"
  log "pinning $(echo "$replaces" | wc -l) staging modules to $staging_version"

  {
    echo "module meshpilot.local/testenv/kube-apiserver"
    echo
    echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    while read -r m; do
      echo "	$m => $m $staging_version"
    done <<<"$replaces"
    echo ")"
  } >"$mod/go.mod"
  # A blank import keeps the command in the module graph for `go mod tidy`.
  cat >"$mod/tools.go" <<'EOF'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
EOF

  log "resolving the kube-apiserver module graph"
  (cd "$mod" && GOFLAGS=-mod=mod go mod tidy) || die "go mod tidy of the kube-apiserver build module failed"

  minor="${KUBE_VERSION#v1.}"
  minor="${minor%%.*}"
  log "building kube-apiserver $KUBE_VERSION (several minutes when cold)"
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$tmp/out/kube-apiserver" \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    k8s.io/kubernetes/cmd/kube-apiserver) || die "go build k8s.io/kubernetes/cmd/kube-apiserver failed"
  "$tmp/out/kube-apiserver" --version || die "the built kube-apiserver does not run"
  publish "$tmp/out" "$APISERVER_DIR" kube-apiserver
}

install_helm() {
  if [ -x "$HELM_DIR/helm" ]; then
    log "helm $HELM_VERSION cached: $HELM_DIR/helm"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH (expected /usr/local/go/bin/go)"
  local tmp
  tmp=$(mktemp -d "$CACHE_ROOT/.helm-$HELM_VERSION.XXXXXX") || die "mktemp in $CACHE_ROOT failed"
  trap 'rm -rf "$tmp"' RETURN
  log "installing helm $HELM_VERSION (a few minutes when cold)"
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/out" GOFLAGS='' go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
  "$tmp/out/helm" version --short || die "the installed helm does not run"
  publish "$tmp/out" "$HELM_DIR" helm
}

cmd_install() {
  mkdir -p "$CACHE_ROOT"
  local start
  start=$(date +%s)
  timed etcd with_lock "$CACHE_ROOT/.etcd.lock" install_etcd
  timed kube-apiserver with_lock "$CACHE_ROOT/.kube-apiserver-$KUBE_VERSION.lock" build_apiserver
  timed helm with_lock "$CACHE_ROOT/.helm-$HELM_VERSION.lock" install_helm
  log "all installed in $(($(date +%s) - start))s; cache $(du -sh "$CACHE_ROOT" 2>/dev/null | cut -f1) at $CACHE_ROOT"
}

cmd_env() {
  local etcd missing=()
  etcd=$(etcd_path)
  [ -n "$etcd" ] || missing+=("etcd")
  [ -x "$APISERVER_DIR/kube-apiserver" ] || missing+=("kube-apiserver $KUBE_VERSION")
  [ -x "$HELM_DIR/helm" ] || missing+=("helm $HELM_VERSION")
  if [ "${#missing[@]}" -gt 0 ]; then
    die "not installed: ${missing[*]}; run \`make testenv\` (hack/testenv.sh install)"
  fi
  echo "export MESHPILOT_ETCD=$etcd"
  echo "export MESHPILOT_KUBE_APISERVER=$APISERVER_DIR/kube-apiserver"
  echo "export MESHPILOT_HELM=$HELM_DIR/helm"
}

case "${1:-}" in
install) cmd_install ;;
env) cmd_env ;;
*)
  echo "usage: $0 install|env" >&2
  exit 2
  ;;
esac
