#!/usr/bin/env bash
# testenv.sh — installs and locates the real Kubernetes parts the test suite
# runs against: etcd (Debian package), kube-apiserver and helm (built from the
# Go module proxy, in one go build); and iptables and iproute2 (Debian
# packages) for the traffic-capture test in test/iptables; dig (Debian's
# dnsutils) for the agent's DNS proxy tests; python3-grpcio (Debian) and
# @grpc/grpc-js-xds (npm ci of test/e2e/proxyless's lock file) for the
# proxyless clients test in test/e2e; chromium (Debian) for the operator
# console's browser test in pilot/console. Built binaries are
# cached outside the work tree, keyed by version, so only the first run pays:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot/kube-apiserver-<version>/kube-apiserver
#   ${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot/helm-<version>/helm
#
# Usage:
#   hack/testenv.sh install   # idempotent; prints the time each step took
#   hack/testenv.sh env       # prints export lines: eval "$(hack/testenv.sh env)"
#   hack/testenv.sh exec CMD  # runs CMD with them; fails, CMD not run, when missing
#
# Versions can be overridden with KUBE_VERSION and HELM_VERSION.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
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

# apt_install WHAT PACKAGE... installs Debian packages for WHAT (a phrase
# for the messages), as root or through sudo. The dpkg lock timeout guards
# against an apt run outside this script.
apt_install() {
  local what="$1" sudo=""
  shift
  command -v apt-get >/dev/null 2>&1 ||
    die "$what missing and apt-get is not available; install packages $*"
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "$what missing; run as root or install packages $*"
    sudo=sudo
  fi
  log "installing $what (apt packages $*)"
  $sudo apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "$@" ||
    die "apt-get install $* failed"
}

install_etcd() {
  if [ -n "$(etcd_path)" ]; then
    log "etcd present: $(etcd_path) ($(etcd --version 2>/dev/null | head -1))"
    return 0
  fi
  apt_install "etcd (>= 3.4)" etcd-server
  [ -n "$(etcd_path)" ] || die "etcd-server installed but no etcd on PATH"
  # The Debian package starts a system etcd on :2379; tests run their own on
  # free ports, so stop the packaged one where a service manager exists.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo systemctl stop etcd || true
    $sudo systemctl disable etcd >/dev/null 2>&1 || true
  fi
}

netutils_missing() {
  local c
  for c in iptables-nft iptables-legacy ip6tables-nft ip6tables-legacy ip setpriv; do
    command -v "$c" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null 2>&1 || echo "$c"
  done
}

# install_netutils installs iptables (both the nft and legacy variants, v4
# and v6) and iproute2 for test/iptables, when any command is missing.
install_netutils() {
  if [ -z "$(netutils_missing)" ]; then
    log "iptables and iproute2 present: $(PATH="$PATH:/usr/sbin:/sbin" iptables --version 2>/dev/null | head -1)"
    return 0
  fi
  apt_install "$(netutils_missing | tr '\n' ' ')(iptables, iproute2)" iptables iproute2 util-linux
  [ -z "$(netutils_missing)" ] || die "installed iptables and iproute2 but still missing: $(netutils_missing | tr '\n' ' ')"
}

# install_dnsutils installs dig (Debian's dnsutils) for the agent's DNS
# proxy tests in pilot/agent/dns, when it is missing.
install_dnsutils() {
  if command -v dig >/dev/null 2>&1; then
    log "dig present: $(dig -v 2>&1 | head -1)"
    return 0
  fi
  apt_install "dig (dnsutils)" dnsutils
  command -v dig >/dev/null 2>&1 || die "installed dnsutils but dig is still not on PATH"
}

# PYTHON3 is the interpreter Debian's python3-grpcio belongs to (not a
# pyenv or venv python3 that may be first on PATH).
PYTHON3=/usr/bin/python3

python_grpc_ok() {
  [ -x "$PYTHON3" ] && "$PYTHON3" -c 'import grpc' >/dev/null 2>&1
}

# install_python_grpc installs python3-grpcio (gRPC C-core) for the
# proxyless clients test in test/e2e.
install_python_grpc() {
  if python_grpc_ok; then
    log "python3-grpcio present: $("$PYTHON3" -c 'import grpc; print(grpc.__version__)')"
    return 0
  fi
  apt_install "python3-grpcio (gRPC C-core for test/e2e)" python3 python3-grpcio
  python_grpc_ok || die "installed python3-grpcio but $PYTHON3 cannot import grpc"
}

# The @grpc/grpc-js-xds client of test/e2e, installed with `npm ci` from the
# lock file in the repository into a cache directory named after the lock
# file's hash, so a changed lock gets a fresh install.
GRPC_JS_LOCK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/test/e2e/proxyless"

grpc_js_dir() {
  local sum
  sum=$(sha256sum "$GRPC_JS_LOCK_DIR/package-lock.json" | cut -c1-12)
  echo "$CACHE_ROOT/grpc-js-xds-$sum"
}

install_grpc_js_xds() {
  local dir tmp
  dir=$(grpc_js_dir)
  if [ -f "$dir/node_modules/@grpc/grpc-js-xds/package.json" ]; then
    log "@grpc/grpc-js-xds cached: $dir"
    return 0
  fi
  command -v npm >/dev/null 2>&1 || die "npm is not on PATH (needed for @grpc/grpc-js-xds)"
  tmp=$(mktemp -d "$CACHE_ROOT/.grpc-js-xds.XXXXXX") || die "mktemp in $CACHE_ROOT failed"
  cp "$GRPC_JS_LOCK_DIR/package.json" "$GRPC_JS_LOCK_DIR/package-lock.json" "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts) || {
    rm -rf "$tmp"
    die "npm ci of @grpc/grpc-js-xds failed"
  }
  publish "$tmp" "$dir" node_modules
}

# CHROMIUM is Debian's chromium, which the console's browser test drives
# headless over the DevTools protocol.
CHROMIUM=/usr/bin/chromium

# install_chromium installs Debian's chromium for the operator console's
# browser test (pilot/console), unless it is there.
install_chromium() {
  if [ -x "$CHROMIUM" ]; then
    log "chromium present: $("$CHROMIUM" --version 2>/dev/null | head -1)"
    return 0
  fi
  apt_install "chromium (browser test of pilot/console)" chromium
  [ -x "$CHROMIUM" ] || die "installed chromium but $CHROMIUM is missing"
}

# install_apt installs the Debian packages one after the other: apt takes
# one dpkg lock at a time, and the lock file keeps concurrent runs of this
# script from colliding.
install_apt() {
  with_lock "$CACHE_ROOT/.apt.lock" install_etcd
  with_lock "$CACHE_ROOT/.apt.lock" install_netutils
  with_lock "$CACHE_ROOT/.apt.lock" install_dnsutils
  with_lock "$CACHE_ROOT/.apt.lock" install_python_grpc
  with_lock "$CACHE_ROOT/.apt.lock" install_chromium
}

# build_tools NAME... builds the missing test tools (kube-apiserver, helm) in
# one throwaway module and one `go build`. Both need k8s.io/api, apimachinery,
# client-go and friends; one module graph resolves them to the same versions,
# so the packages they share (two thirds of helm's) are compiled once, and the
# go command spreads both builds over every core.
build_tools() {
  local tools=() t
  for t in "$@"; do
    if [ -x "$(tool_dir "$t")/$t" ]; then
      log "$t $(tool_version "$t") cached: $(tool_dir "$t")/$t"
    else
      tools+=("$t")
    fi
  done
  [ "${#tools[@]}" -gt 0 ] || return 0
  command -v go >/dev/null 2>&1 || die "go is not on PATH (expected /usr/local/go/bin/go)"
  local tmp mod gomod replaces minor pkgs=() imports=""
  tmp=$(mktemp -d "$CACHE_ROOT/.tools.XXXXXX") || die "mktemp in $CACHE_ROOT failed"
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
  # published as k8s.io/NAME v0.MINOR.PATCH; pin each to that version. helm
  # builds against the same ones (keep HELM_VERSION on a release that
  # requires this Kubernetes minor or an older one).
  local staging_version="v0.${KUBE_VERSION#v1.}"
  replaces=$(grep -E '^[[:space:]]*(replace[[:space:]]+)?k8s\.io/[^[:space:]]+[[:space:]]+=>[[:space:]]+\./staging/' "$gomod" |
    sed -E 's/^[[:space:]]*(replace[[:space:]]+)?(k8s\.io\/[^[:space:]]+).*/\2/' | sort -u)
  [ -n "$replaces" ] || die "no ./staging replaces found in $gomod"
  log "pinning $(echo "$replaces" | wc -l) staging modules to $staging_version"

  minor="${KUBE_VERSION#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w"
  for t in "${tools[@]}"; do
    case "$t" in
    kube-apiserver)
      pkgs+=(k8s.io/kubernetes/cmd/kube-apiserver)
      ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
      ;;
    helm)
      pkgs+=(helm.sh/helm/v3/cmd/helm)
      ldflags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
      ;;
    esac
  done
  for t in "${pkgs[@]}"; do
    imports+="	_ \"$t\""$'\n'
  done

  {
    echo "module meshpilot.local/testenv/tools"
    echo
    echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes $KUBE_VERSION"
    echo "	helm.sh/helm/v3 $HELM_VERSION"
    echo ")"
    echo
    echo "replace ("
    while read -r m; do
      echo "	$m => $m $staging_version"
    done <<<"$replaces"
    echo ")"
  } >"$mod/go.mod"
  # Blank imports keep the commands in the module graph for `go mod tidy`.
  printf '//go:build tools\n\npackage tools\n\nimport (\n%s)\n' "$imports" >"$mod/tools.go"

  log "resolving the module graph of ${tools[*]}"
  (cd "$mod" && GOFLAGS=-mod=mod go mod tidy) || die "go mod tidy of the test tools module failed"

  # Only what the tests run: no cgo, no symbol table or DWARF (-s -w), and no
  # DWARF generated in the first place (-dwarf=false: less compiler work and a
  # smaller build cache); providerless leaves out in-tree cloud providers
  # where a release still has some.
  log "building ${tools[*]} (several minutes when cold)"
  (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags providerless \
    -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$tmp/out/" "${pkgs[@]}") ||
    die "go build ${pkgs[*]} failed"
  for t in "${tools[@]}"; do
    mkdir -p "$tmp/$t"
    mv "$tmp/out/$t" "$tmp/$t/$t"
    case "$t" in
    kube-apiserver) "$tmp/$t/$t" --version || die "the built kube-apiserver does not run" ;;
    helm) "$tmp/$t/$t" version --short || die "the built helm does not run" ;;
    esac
    publish "$tmp/$t" "$(tool_dir "$t")" "$t"
  done
}

tool_version() {
  case "$1" in
  kube-apiserver) echo "$KUBE_VERSION" ;;
  helm) echo "$HELM_VERSION" ;;
  esac
}

tool_dir() {
  echo "$CACHE_ROOT/$1-$(tool_version "$1")"
}

cmd_install() {
  mkdir -p "$CACHE_ROOT"
  local start etcd_pid etcd_log
  start=$(date +%s)
  # etcd, iptables and iproute2 come from apt (network and disk) while the
  # Go build uses the CPUs.
  etcd_log=$(mktemp)
  timed "etcd+iptables+iproute2+dnsutils+python3-grpcio+chromium" install_apt >"$etcd_log" 2>&1 &
  etcd_pid=$!
  timed "kube-apiserver+helm" with_lock "$CACHE_ROOT/.tools.lock" build_tools kube-apiserver helm
  timed "@grpc/grpc-js-xds" with_lock "$CACHE_ROOT/.npm.lock" install_grpc_js_xds
  if ! wait "$etcd_pid"; then
    cat "$etcd_log" >&2
    rm -f "$etcd_log"
    die "apt install (etcd, iptables, iproute2, dnsutils, python3-grpcio, chromium) failed"
  fi
  cat "$etcd_log" >&2
  rm -f "$etcd_log"
  log "all installed in $(($(date +%s) - start))s; cache $(du -sh "$CACHE_ROOT" 2>/dev/null | cut -f1) at $CACHE_ROOT"
}

cmd_env() {
  local etcd missing=()
  etcd=$(etcd_path)
  [ -n "$etcd" ] || missing+=("etcd")
  [ -z "$(netutils_missing)" ] || missing+=($(netutils_missing))
  command -v dig >/dev/null 2>&1 || missing+=("dig")
  [ -x "$APISERVER_DIR/kube-apiserver" ] || missing+=("kube-apiserver $KUBE_VERSION")
  [ -x "$HELM_DIR/helm" ] || missing+=("helm $HELM_VERSION")
  python_grpc_ok || missing+=("python3-grpcio")
  [ -x "$CHROMIUM" ] || missing+=("chromium")
  [ -f "$(grpc_js_dir)/node_modules/@grpc/grpc-js-xds/package.json" ] || missing+=("@grpc/grpc-js-xds")
  if [ "${#missing[@]}" -gt 0 ]; then
    die "not installed: ${missing[*]}; run \`make testenv\` (hack/testenv.sh install)"
  fi
  echo "export MESHPILOT_ETCD=$etcd"
  echo "export MESHPILOT_KUBE_APISERVER=$APISERVER_DIR/kube-apiserver"
  echo "export MESHPILOT_HELM=$HELM_DIR/helm"
  echo "export MESHPILOT_PYTHON3=$PYTHON3"
  echo "export MESHPILOT_GRPC_JS_XDS=$(grpc_js_dir)"
  echo "export MESHPILOT_CHROMIUM=$CHROMIUM"
  # iptables and ip live in /usr/sbin, which a non-root PATH may lack.
  if ! command -v iptables-nft >/dev/null 2>&1; then
    echo 'export PATH="$PATH:/usr/sbin:/sbin"'
  fi
}

# cmd_exec runs a command with the test environment's variables, or fails
# without running it when they cannot be produced (unlike
# `eval "$(testenv.sh env)" && cmd`, where eval of a failed substitution
# succeeds and cmd runs without them).
cmd_exec() {
  [ "$#" -gt 0 ] || die "exec: no command given"
  local env
  env=$(cmd_env) || die "exec: the test environment is not installed; not running $1"
  eval "$env"
  exec "$@"
}

case "${1:-}" in
install) cmd_install ;;
env) cmd_env ;;
exec)
  shift
  cmd_exec "$@"
  ;;
*)
  echo "usage: $0 install|env|exec CMD..." >&2
  exit 2
  ;;
esac
