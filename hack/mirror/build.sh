#!/usr/bin/env bash
# hack/mirror/build.sh: build the release binaries hardway installs (etcd, etcdctl, etcdutl,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from source through the Go
# module proxy, and lay them out like the official download sites, so the lab and the tests use
# the real binaries without reaching those sites:
#
#   $MIRROR/kubernetes/release/vX.Y.Z/bin/linux/<arch>/<bin>{,.sha256,.sha512}
#   $MIRROR/kubernetes/release/stable-X.Y.txt
#   $MIRROR/etcd/vA.B.C/etcd-vA.B.C-linux-<arch>.tar.gz   (top dir etcd-vA.B.C-linux-<arch>/)
#   $MIRROR/etcd/vA.B.C/SHA256SUMS
#
# Point an inventory at it with releases.kubernetes: file://$MIRROR/kubernetes and
# releases.etcd: file://$MIRROR/etcd. Cached per version: a second run only re-checks digests.
# Go's own module and build caches are left where `go env` puts them, so CI on the same
# machine reuses them (cold ~15 min on 2 cores, warm caches ~30 s).
#
# This is a development tool, not part of hardway.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
GOOS=linux
GOARCH=${GOARCH:-$(go env GOARCH)}
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
WORK=${HARDWAY_MIRROR_WORK:-$(dirname "$MIRROR")/mirror-work}

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
ETCD_BINS=(etcd etcdctl etcdutl)

# The wrapper modules live outside any checkout; never let a go.work or the
# project's go.mod leak in, and never download a newer toolchain.
export GOWORK=off GOTOOLCHAIN=local GOOS GOARCH CGO_ENABLED=0
export GOFLAGS="-buildvcs=false"

log() { echo "[mirror $(date +%T)] $*" >&2; }
die() { echo "mirror: $*" >&2; exit 1; }
command -v go >/dev/null || die "go not found in PATH"
for t in sha256sum sha512sum tar gzip; do command -v "$t" >/dev/null || die "$t not found"; done

# hex digests of a file, in the form the official sites serve (hex only, no newline)
digest() { "$1" "$2" | cut -d' ' -f1; }

# write_atomic DEST: stdin -> DEST via a temp file in the same directory
write_atomic() {
  local tmp; tmp=$(mktemp "$1.tmp.XXXXXX")
  cat > "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$1"
}

# mod_field MOD@VER FIELD: a field of `go mod download -json` (downloads the module if needed)
mod_json() { (cd "$WORK" && go mod download -json "$1"); }
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -1; }

# the tag's commit time as RFC 3339, so buildDate (and so the binary) is the same on every rebuild
tag_time() { (cd "$WORK" && go mod download -json "$1") | json_field Info | xargs cat | sed -n 's/.*"Time":"\([^"]*\)".*/\1/p'; }

# install_wrapper_gomod DIR CONTENT: write go.mod atomically; a half-written go.mod makes every
# module's availability check fail on the next run
install_gomod() { local tmp="$1/go.mod.tmp"; cat > "$tmp"; mv -f "$tmp" "$1/go.mod"; }

# says WANT CMD...: CMD's output (stdout+stderr) has a line matching the regexp WANT. The output
# is read whole first: `cmd | grep -q` under pipefail fails at random when grep exits at the first
# match and cmd, still writing, dies of SIGPIPE (etcd --version prints four lines).
says() {
  local want=$1 out; shift
  out=$("$@" 2>&1) || true
  grep -q -- "$want" <<<"$out" || { echo "mirror: $* says:" >&2; echo "$out" >&2; return 1; }
}

mkdir -p "$WORK" "$MIRROR"
T0=$(date +%s)

# ---------------------------------------------------------------- Kubernetes
k8s_dir=$MIRROR/kubernetes/release/$K8S_VERSION/bin/$GOOS/$GOARCH
k8s_complete() {
  local b
  for b in "${K8S_BINS[@]}"; do
    [ -x "$k8s_dir/$b" ] && [ -s "$k8s_dir/$b.sha256" ] && [ -s "$k8s_dir/$b.sha512" ] || return 1
    [ "$(digest sha256sum "$k8s_dir/$b")" = "$(cat "$k8s_dir/$b.sha256")" ] || return 1
  done
}

build_k8s() {
  local w=$WORK/kubernetes-$K8S_VERSION gomod tm major minor rest pkgs=() b
  mkdir -p "$w/stubs"
  log "kubernetes $K8S_VERSION: reading its go.mod"
  gomod=$(mod_json "k8s.io/kubernetes@$K8S_VERSION" | json_field GoMod)
  [ -s "$gomod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
  tm=$(tag_time "k8s.io/kubernetes@$K8S_VERSION")
  rest=${K8S_VERSION#v}; major=${rest%%.*}; rest=${rest#*.}; minor=${rest%%.*}

  # Kubernetes replaces its staging modules with ./staging/src/...; replace directives of a
  # dependency are ignored, so the wrapper points each one at its published v0.X.Y instead.
  # The sample-* modules are not published: an empty stub satisfies the requirement.
  {
    echo "module hardway.invalid/mirror/kubernetes"
    echo
    sed -n 's/^go \(.*\)/go \1/p; s/^godebug \(.*\)/godebug \1/p' "$gomod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" | while read -r m; do
      case "$m" in
        k8s.io/sample-*)
          mkdir -p "$w/stubs/${m#k8s.io/}"
          printf 'module %s\n' "$m" > "$w/stubs/${m#k8s.io/}/go.mod"
          echo "	$m => ./stubs/${m#k8s.io/}" ;;
        *) echo "	$m => $m v0.${K8S_VERSION#v1.}" ;;
      esac
    done
    echo ")"
  } > "$w/go.mod.new"
  grep -q '=> ./stubs/\|=> k8s.io/' "$w/go.mod.new" || die "found no staging modules in $gomod"
  install_gomod "$w" < "$w/go.mod.new"; rm -f "$w/go.mod.new"
  for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done

  # explicit @version: a bare `go get pkg` would upgrade to the newest release
  log "kubernetes $K8S_VERSION: resolving modules"
  (cd "$w" && go get "${pkgs[@]/%/@$K8S_VERSION}") >&2

  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$tm"
  done
  log "kubernetes $K8S_VERSION: building ${K8S_BINS[*]} (cold: ~12 min on 2 cores)"
  rm -rf "$w/out"; mkdir -p "$w/out"
  (cd "$w" && go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld" -o "$w/out/" "${pkgs[@]}") >&2
  says "^Kubernetes $K8S_VERSION\$" "$w/out/kube-apiserver" --version || die "kube-apiserver --version does not say $K8S_VERSION"

  mkdir -p "$k8s_dir"
  for b in "${K8S_BINS[@]}"; do
    install -m 0755 "$w/out/$b" "$k8s_dir/.$b.tmp" && mv -f "$k8s_dir/.$b.tmp" "$k8s_dir/$b"
    digest sha256sum "$k8s_dir/$b" | tr -d '\n' | write_atomic "$k8s_dir/$b.sha256"
    digest sha512sum "$k8s_dir/$b" | tr -d '\n' | write_atomic "$k8s_dir/$b.sha512"
  done
  rm -rf "$w/out"
}


# ---------------------------------------------------------------- etcd
etcd_dir=$MIRROR/etcd/$ETCD_VERSION
etcd_name=etcd-$ETCD_VERSION-$GOOS-$GOARCH
etcd_tgz=$etcd_dir/$etcd_name.tar.gz
etcd_complete() {
  [ -s "$etcd_tgz" ] && [ -s "$etcd_dir/SHA256SUMS" ] || return 1
  (cd "$etcd_dir" && grep " $etcd_name.tar.gz\$" SHA256SUMS | sha256sum -c --quiet --status)
}

build_etcd() {
  local w=$WORK/etcd-$ETCD_VERSION tm sha m pkgs=()
  mkdir -p "$w"
  # server/v3's root package is the etcd main; etcdctl/v3 and etcdutl/v3 likewise
  for m in server etcdctl etcdutl; do pkgs+=("go.etcd.io/etcd/$m/v3"); done
  tm=$(tag_time "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  {
    echo "module hardway.invalid/mirror/etcd"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require ("
    for m in "${pkgs[@]}"; do echo "	$m $ETCD_VERSION"; done
    echo ")"
  } | install_gomod "$w"
  log "etcd $ETCD_VERSION: resolving modules"
  (cd "$w" && go get "${pkgs[@]/%/@$ETCD_VERSION}") >&2
  log "etcd $ETCD_VERSION: building ${ETCD_BINS[*]}"
  rm -rf "$w/out"; mkdir -p "$w/out/$etcd_name"
  (cd "$w" && for m in server etcdctl etcdutl; do
     b=$m; [ "$m" = server ] && b=etcd
     go build -trimpath -ldflags "-s -w" -o "$w/out/$etcd_name/$b" "go.etcd.io/etcd/$m/v3" || exit 1
   done) >&2
  says "^etcd Version: ${ETCD_VERSION#v}\$" "$w/out/$etcd_name/etcd" --version || die "etcd --version does not say ${ETCD_VERSION#v}"

  # a reproducible tarball: fixed order, owner and mtime (the tag's), gzip without a timestamp
  mkdir -p "$etcd_dir"
  (cd "$w/out" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$tm" \
     -cf - "$etcd_name" | gzip -n -9) > "$etcd_tgz.tmp"
  mv -f "$etcd_tgz.tmp" "$etcd_tgz"
  sha=$(digest sha256sum "$etcd_tgz")
  printf '%s  %s\n' "$sha" "$etcd_name.tar.gz" | write_atomic "$etcd_dir/SHA256SUMS"
  rm -rf "$w/out"
}

if etcd_complete; then
  log "etcd $ETCD_VERSION: cached in $etcd_dir"
else
  build_etcd
fi

# etcd first: it takes a minute, Kubernetes a quarter of an hour
if k8s_complete; then
  log "kubernetes $K8S_VERSION: cached in $k8s_dir"
else
  build_k8s
fi
minor_line=${K8S_VERSION#v}; minor_line=${minor_line%.*}
printf '%s' "$K8S_VERSION" | write_atomic "$MIRROR/kubernetes/release/stable-$minor_line.txt"

log "mirror ready in $(( $(date +%s) - T0 ))s: $MIRROR"
echo "kubernetes file://$MIRROR/kubernetes"
echo "etcd file://$MIRROR/etcd"
