#!/usr/bin/env bash
# hack/mirror/build.sh: build the release binaries and images hardway installs from source through
# the Go module proxy, and lay them out like the official download sites, so the lab and the tests
# use the real binaries without reaching those sites:
#
#   $MIRROR/kubernetes/release/vX.Y.Z/bin/linux/<arch>/<bin>{,.sha256,.sha512}
#   $MIRROR/kubernetes/release/stable-X.Y.txt
#   $MIRROR/etcd/vA.B.C/etcd-vA.B.C-linux-<arch>.tar.gz   (top dir etcd-vA.B.C-linux-<arch>/)
#   $MIRROR/etcd/vA.B.C/SHA256SUMS
#   $MIRROR/containerd/vX/containerd-X-linux-<arch>.tar.gz{,.sha256sum}   (bin/containerd, ...)
#   $MIRROR/runc/vX/runc.<arch> + runc.sha256sum
#   $MIRROR/cni-plugins/vX/cni-plugins-linux-<arch>-vX.tgz{,.sha256,.sha512}
#   $MIRROR/crictl/vX/crictl-vX-linux-<arch>.tar.gz{,.sha256}
#   $MIRROR/coredns/vX/coredns_X_linux_<arch>.tgz{,.sha256}
#   $MIRROR/traefik/vX/traefik_vX_linux_<arch>.tar.gz + traefik_vX_checksums.txt
#   $MIRROR/images/<name>.tar + SHA256SUMS   (docker-archive tarballs, made with no registry)
#
# Point an inventory at it with releases.kubernetes: file://$MIRROR/kubernetes, releases.etcd:
# file://$MIRROR/etcd, releases.containerd: file://$MIRROR/containerd and so on (the script prints
# the lines). Cached per version: a second run only re-checks digests. Every output is
# reproducible: -trimpath, fixed version ldflags, tarballs with sorted names, owner 0 and the
# release tag's time, gzip -n, image layers with fixed times; a rebuild gives the same bytes.
# Go's own module and build caches are left where `go env` puts them, so CI on the same machine
# reuses them.
#
# usage: build.sh [COMPONENT|GROUP ...]     (default: all)
#   components: etcd kubernetes containerd runc cni crictl coredns traefik images
#   groups:     control-plane (etcd kubernetes), worker (containerd runc cni crictl traefik),
#               all (everything)
# `build.sh worker images` builds what a worker needs without touching Kubernetes; the images
# need only the k8s.io/kubernetes module source (for pause.c), not a Kubernetes build.
#
# Each component is first taken from its official release where the download site answers
# (hack/mirror/official: verified against the site's published checksum files, kept beside it);
# it is built from source only when the site cannot be reached (a 5 s probe) or lacks it.
# HARDWAY_MIRROR_FROM=source never asks the sites. The log says which path each one took.
#
# Architectures: this machine's (GOARCH, else `go env GOARCH`) by default. MIRROR_ARCHES="amd64 arm64"
# lays out each one named, under its own paths as the official sites do (the checksum files that
# list several architectures, etcd's SHA256SUMS, runc.sha256sum, Traefik's checksums and
# images/SHA256SUMS, keep every one's lines). Another architecture than this machine's is
# cross-compiled: the Go components with GOARCH and CGO_ENABLED=0; runc (cgo: nsenter, libseccomp
# linked in) and the pause image (C, static) need a C cross compiler and, for runc, libseccomp
# built for the target (Debian, for arm64: gcc-aarch64-linux-gnu, and libseccomp-dev:arm64 after
# `dpkg --add-architecture arm64`); the official releases, when the sites answer, need neither.
# A cross-built binary's ELF header is checked against the architecture, and its --version only
# where this machine can run it (qemu-user's binfmt_misc handler). The images of another
# architecture than GOARCH's are images/<name>-<arch>.tar (e.g. pause-3.10.2-arm64.tar), so the
# ones the lab uses keep their names.
#
# This is a development tool, not part of hardway.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.3}
CNI_VERSION=${CNI_VERSION:-v1.10.0}
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
TRAEFIK_VERSION=${TRAEFIK_VERSION:-v3.7.13}
# The lab's Traefik leaves out the providers hardway never uses (build_traefik says why): the
# patch for this version, and the provider packages it makes unused.
TRAEFIK_LAB_PATCH=${TRAEFIK_LAB_PATCH:-$(cd "$(dirname "$0")" && pwd)/traefik-$TRAEFIK_VERSION-lab.patch}
TRAEFIK_LAB_DROP=(pkg/provider/kubernetes pkg/provider/docker pkg/provider/ecs pkg/provider/kv
                  pkg/provider/consulcatalog pkg/provider/nomad)
PAUSE_VERSION=${PAUSE_VERSION:-3.10.2}
HELLO_TAG=v1
# The hello image has no upstream tag to take a time from: a fixed one keeps it reproducible.
HELLO_CREATED=2026-01-01T00:00:00Z

# Image names as a worker's containerd knows them: pause under containerd's default sandbox
# name (so kubelet never tries to pull it), CoreDNS under its upstream name.
PAUSE_IMAGE=registry.k8s.io/pause:$PAUSE_VERSION
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:$COREDNS_VERSION
HELLO_IMAGE=hardway.local/hello:$HELLO_TAG

GOOS=linux
GOARCH=${GOARCH:-$(go env GOARCH)}
HOSTARCH=$(go env GOHOSTARCH)
# GOARCH's images keep their names; the architectures in MIRROR_ARCHES are built one after the other
IMAGES_ARCH=$GOARCH
read -r -a ARCHES <<<"${MIRROR_ARCHES:-$GOARCH}"
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=("$GOARCH")
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
WORK=${HARDWAY_MIRROR_WORK:-$(dirname "$MIRROR")/mirror-work}
TOP=$(cd "$(dirname "$0")/../.." && pwd)

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
ETCD_BINS=(etcd etcdctl etcdutl)
CONTAINERD_BINS=(containerd containerd-shim-runc-v2 ctr)
CNI_PLUGINS=(bridge host-local loopback portmap)

# The wrapper modules live outside any checkout; never let a go.work or the
# project's go.mod leak in, and never download a newer toolchain.
export GOWORK=off GOTOOLCHAIN=local GOOS GOARCH CGO_ENABLED=0
export GOFLAGS="-buildvcs=false"

log() { echo "[mirror $(date +%T)] $*" >&2; }
die() { echo "mirror: $*" >&2; exit 1; }
command -v go >/dev/null || die "go not found in PATH"
for t in sha256sum sha512sum tar gzip patch; do command -v "$t" >/dev/null || die "$t not found"; done

# hex digests of a file, in the form the official sites serve (hex only, no newline)
digest() { "$1" "$2" | cut -d' ' -f1; }

# write_atomic DEST: stdin -> DEST via a temp file in the same directory
write_atomic() {
  local tmp; tmp=$(mktemp "$1.tmp.XXXXXX")
  cat > "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$1"
}

# sumline FILE ALGO: "<hex>  <basename>", the line sha256sum -c reads (containerd, CNI, crictl)
sumline() { printf '%s  %s\n' "$(digest "${2}sum" "$1")" "$(basename "$1")"; }

# sums_ok DIR SUMFILE: every file SUMFILE lists is there and matches
sums_ok() { [ -s "$1/$2" ] && (cd "$1" && sha256sum -c --quiet --status "$2"); }

# published_ok DIR SUMFILE FILE: FILE is there and has the digest SUMFILE gives for it: its
# "<hex>  FILE" line (an official checksums file lists other files too), or, in a sidecar of
# one line, a bare "<hex>" (crictl's .sha256); sha256 or sha512 by the digest's length. Both the
# files build.sh writes and the official ones (hack/mirror/official) pass.
published_ok() {
  local want algo
  [ -s "$1/$3" ] && [ -s "$1/$2" ] || return 1
  want=$(awk -v f="$3" 'NF == 0 { next } { n++ }
    NF >= 2 { x = $2; sub(/^\*/, "", x); sub(/^\.\//, "", x); if (x == f) { print tolower($1); found = 1; exit } }
    NF == 1 { one = tolower($1) }
    END { if (!found && n == 1 && one != "") print one }' "$1/$2")
  case ${#want} in 64) algo=sha256sum ;; 128) algo=sha512sum ;; *) return 1 ;; esac
  [ "$(digest "$algo" "$1/$3")" = "$want" ]
}

# mod_field MOD@VER FIELD: a field of `go mod download -json` (downloads the module if needed)
mod_json() { (cd "$WORK" && go mod download -json "$1"); }
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" | head -1; }

# the tag's commit time as RFC 3339, so buildDate (and so the binary) is the same on every rebuild
tag_time() { (cd "$WORK" && go mod download -json "$1") | json_field Info | xargs cat | sed -n 's/.*"Time":"\([^"]*\)".*/\1/p'; }

# install_wrapper_gomod DIR CONTENT: write go.mod atomically; a half-written go.mod makes every
# module's availability check fail on the next run
install_gomod() { local tmp="$1/go.mod.tmp"; cat > "$tmp"; mv -f "$tmp" "$1/go.mod"; }

go_minor() { go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/'; }

# wrapper NAME: a fresh module that only requires what `go get` adds, so an upstream go.mod's own
# replace directives (ignored for dependencies) never matter
wrapper() {
  local w=$WORK/$1
  mkdir -p "$w"
  [ -s "$w/go.mod" ] || printf 'module hardway.invalid/mirror/%s\n\ngo %s\n' "$1" "$(go_minor)" | install_gomod "$w"
  echo "$w"
}

# tgz DIR OUT MTIME PATH...: a reproducible tarball: fixed order, owner and mtime (the tag's),
# gzip without a name or timestamp
tgz() {
  local dir=$1 out=$2 tm=$3; shift 3
  (cd "$dir" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$tm" \
     -cf - "$@" | gzip -n -9) > "$out.tmp"
  mv -f "$out.tmp" "$out"
}

# timed NAME CMD...: run and remember the wall time for the summary
declare -A TIMES=()
timed() {
  local name=$1 t0; shift; t0=$(date +%s)
  "$@"
  TIMES[$name]=$(( $(date +%s) - t0 ))
  log "$name: built in ${TIMES[$name]}s"
}

# says WANT CMD...: CMD's output (stdout+stderr) has a line matching the regexp WANT. The output
# is read whole first: `cmd | grep -q` under pipefail fails at random when grep exits at the first
# match and cmd, still writing, dies of SIGPIPE.
says() {
  local want=$1 out; shift
  out=$("$@" 2>&1) || true
  grep -q -- "$want" <<<"$out" || { echo "mirror: $* says:" >&2; echo "$out" >&2; return 1; }
}

# static_ok FILE: no dynamic section (runc and pause must run on any distribution)
static_ok() { local d; d=$(readelf -d "$1" 2>&1) || return 1; ! grep -q '(NEEDED)' <<<"$d"; }

# merge_sums FILE: the "<hex>  <name>" lines on stdin replace FILE's lines for those names; the
# others stay (a checksums file lists every architecture's files, as the official ones do). An
# official release taken later for another architecture brings the official file whole, whose line
# for a file built here from source does not match it: the next run takes that one's official
# release too.
merge_sums() {
  local new; new=$(cat)
  { if [ -s "$1" ]; then
      awk 'NR == FNR { n = $2; sub(/^\*/, "", n); mine[n] = 1; next }
           { n = $2; sub(/^\*/, "", n) } NF >= 2 && !(n in mine)' <(printf '%s\n' "$new") "$1"
    fi
    printf '%s\n' "$new"; } | write_atomic "$1"
}

# official_tool: build hack/mirror/official for this machine (whatever GOARCH is being built)
official_tool() { (cd "$TOP" && GOARCH=$HOSTARCH go build -trimpath -o "$WORK/official" ./hack/mirror/official) >&2; }

# arch_tool ARGS...: hack/mirror/official's -elf and -uname: hardway's own architecture table
# (pkg/platform), not a copy of it in this script. Main builds the tool when it builds for another
# architecture than this machine's, the only time these are asked.
arch_tool() { "$WORK/official" "$@"; }

# cross: building for another architecture than this machine's
cross() { [ "$GOARCH" != "$HOSTARCH" ]; }

# target_runs: this machine runs binaries of $GOARCH: its own, or another through qemu-user's
# binfmt_misc handler (Debian's qemu-user-static registers one per architecture)
target_runs() {
  cross || return 0
  local f; f=/proc/sys/fs/binfmt_misc/qemu-$(arch_tool -uname "$GOARCH")
  [ -r "$f" ] && [ "$(head -1 "$f")" = enabled ]
}

# built_ok WANT FILE ARGS...: what says checks of a build of this machine's architecture. A cross
# build is first checked to be an ELF binary for $GOARCH, then run where this machine can run it;
# where it cannot, the log says its version was not checked
built_ok() {
  local want=$1 bin=$2; shift 2
  if cross; then
    arch_tool -elf "$GOARCH" "$bin" || return 1
    if ! target_runs; then
      log "$(basename "$bin") for $GOARCH: ELF header checked; not run (no qemu-user binfmt handler for $GOARCH), so its version is not checked"
      return 0
    fi
  fi
  says "$want" "$bin" "$@"
}

# cross_cc: the C cross compiler for $GOARCH (Debian's gcc-<triplet>), or this machine's gcc
triplet() { echo "$(arch_tool -uname "$GOARCH")-linux-gnu"; }
cross_cc() {
  cross || { echo gcc; return; }
  local cc; cc=$(triplet)-gcc
  command -v "$cc" >/dev/null || die "a C build for $GOARCH needs $cc (Debian: apt-get install gcc-$(triplet) libc6-dev-$GOARCH-cross), or the official release (HARDWAY_MIRROR_FROM=auto, the sites reachable)"
  echo "$cc"
}

mkdir -p "$WORK" "$MIRROR"
T0=$(date +%s)

# use_arch ARCH: build for ARCH from here on: GOARCH (exported) and every component's paths that
# name the architecture (the paths_* functions beside each component below)
use_arch() {
  local f
  if [ "$1" != "$HOSTARCH" ]; then
    arch_tool -uname "$1" >/dev/null || die "MIRROR_ARCHES: $1 is not an architecture hardway installs for"
  fi
  GOARCH=$1
  for f in $(declare -F | awk '$3 ~ /^paths_/ { print $3 }'); do "$f"; done
}

# ---------------------------------------------------------------- Kubernetes
paths_kubernetes() { k8s_dir=$MIRROR/kubernetes/release/$K8S_VERSION/bin/$GOOS/$GOARCH; }
kubernetes_complete() {
  local b
  for b in "${K8S_BINS[@]}"; do
    [ -x "$k8s_dir/$b" ] && [ -s "$k8s_dir/$b.sha256" ] && [ -s "$k8s_dir/$b.sha512" ] || return 1
    [ "$(digest sha256sum "$k8s_dir/$b")" = "$(cat "$k8s_dir/$b.sha256")" ] || return 1
  done
}

build_kubernetes() {
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
  built_ok "^Kubernetes $K8S_VERSION\$" "$w/out/kube-apiserver" --version || die "kube-apiserver --version does not say $K8S_VERSION"
  if cross; then (cd "$w/out" && arch_tool -elf "$GOARCH" "${K8S_BINS[@]}") || die "kubernetes: not every binary is for $GOARCH"; fi

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
paths_etcd() { etcd_name=etcd-$ETCD_VERSION-$GOOS-$GOARCH; etcd_tgz=$etcd_dir/$etcd_name.tar.gz; }
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
    echo "go $(go_minor)"
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
  built_ok "^etcd Version: ${ETCD_VERSION#v}\$" "$w/out/$etcd_name/etcd" --version || die "etcd --version does not say ${ETCD_VERSION#v}"
  if cross; then (cd "$w/out/$etcd_name" && arch_tool -elf "$GOARCH" "${ETCD_BINS[@]}") || die "etcd: not every binary is for $GOARCH"; fi

  mkdir -p "$etcd_dir"
  tgz "$w/out" "$etcd_tgz" "$tm" "$etcd_name"
  sha=$(digest sha256sum "$etcd_tgz")
  printf '%s  %s\n' "$sha" "$etcd_name.tar.gz" | merge_sums "$etcd_dir/SHA256SUMS"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- containerd
# Official: containerd-2.4.2-linux-amd64.tar.gz (bin/...) and its .sha256sum ("<hex>  <file>").
containerd_dir=$MIRROR/containerd/$CONTAINERD_VERSION
paths_containerd() { containerd_tgz=containerd-${CONTAINERD_VERSION#v}-$GOOS-$GOARCH.tar.gz; }
containerd_complete() { published_ok "$containerd_dir" "$containerd_tgz.sha256sum" "$containerd_tgz"; }

build_containerd() {
  local w m=github.com/containerd/containerd/v2 tm pkgs=() b
  w=$(wrapper containerd-$CONTAINERD_VERSION)
  for b in "${CONTAINERD_BINS[@]}"; do pkgs+=("$m/cmd/$b"); done
  tm=$(tag_time "$m@$CONTAINERD_VERSION")
  log "containerd $CONTAINERD_VERSION: resolving modules"
  (cd "$w" && go get "${pkgs[@]/%/@$CONTAINERD_VERSION}") >&2
  log "containerd $CONTAINERD_VERSION: building ${CONTAINERD_BINS[*]}"
  rm -rf "$w/out"; mkdir -p "$w/out/bin"
  # the storage drivers hardway does not use need cgo and headers; upstream's static build drops them too
  local ld="-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=$CONTAINERD_VERSION -X $m/version.Package=github.com/containerd/containerd/v2"
  (cd "$w" && go build -trimpath -tags no_btrfs,no_devmapper,no_zfs -ldflags "$ld" -o "$w/out/bin/" "${pkgs[@]}") >&2
  built_ok " $CONTAINERD_VERSION " "$w/out/bin/containerd" --version || die "containerd --version does not say $CONTAINERD_VERSION"
  if cross; then (cd "$w/out/bin" && arch_tool -elf "$GOARCH" "${CONTAINERD_BINS[@]}") || die "containerd: not every binary is for $GOARCH"; fi
  mkdir -p "$containerd_dir"
  tgz "$w/out" "$containerd_dir/$containerd_tgz" "$tm" bin
  sumline "$containerd_dir/$containerd_tgz" sha256 | write_atomic "$containerd_dir/$containerd_tgz.sha256sum"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- runc
# Official: runc.amd64 (static, with seccomp) and runc.sha256sum listing every file of the release.
runc_dir=$MIRROR/runc/$RUNC_VERSION
runc_complete() { [ -x "$runc_dir/runc.$GOARCH" ] && published_ok "$runc_dir" runc.sha256sum "runc.$GOARCH"; }

build_runc() {
  local w m=github.com/opencontainers/runc cc cgo=() tr
  [ -e /usr/include/seccomp.h ] || die "runc needs libseccomp-dev (run hack/setup.sh)"
  command -v gcc >/dev/null || die "runc needs gcc (run hack/setup.sh)"
  cc=$(cross_cc)
  if cross; then
    # cgo for another architecture: its C compiler, and libseccomp built for it (Debian's multiarch
    # package puts libseccomp.a and its .pc under /usr/lib/<triplet>). seccomp.h is the same for
    # every architecture, in /usr/include, which a cross compiler does not search: -idirafter adds
    # it after the target's own headers, so none of this machine's glibc headers is taken instead.
    tr=$(triplet)
    [ -s "/usr/lib/$tr/libseccomp.a" ] && [ -s "/usr/lib/$tr/pkgconfig/libseccomp.pc" ] \
      || die "runc for $GOARCH needs libseccomp for $GOARCH (Debian: dpkg --add-architecture $GOARCH && apt-get update && apt-get install libseccomp-dev:$GOARCH), or the official release (HARDWAY_MIRROR_FROM=auto, the sites reachable)"
    cgo=(CC="$cc" PKG_CONFIG_LIBDIR="/usr/lib/$tr/pkgconfig" CGO_CFLAGS="-idirafter /usr/include" CGO_LDFLAGS="-L/usr/lib/$tr")
  fi
  w=$(wrapper runc-$RUNC_VERSION)
  log "runc $RUNC_VERSION: resolving modules"
  (cd "$w" && go get "$m@$RUNC_VERSION") >&2
  log "runc $RUNC_VERSION: building for $GOARCH (cgo, static, seccomp)"
  rm -rf "$w/out"; mkdir -p "$w/out"
  # like upstream's `make static`: cgo for nsenter, libseccomp linked in, no libc at run time
  (cd "$w" && env CGO_ENABLED=1 "${cgo[@]}" go build -trimpath -tags "seccomp netgo osusergo urfave_cli_no_docs" \
     -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=$RUNC_VERSION -extldflags -static" \
     -o "$w/out/runc.$GOARCH" "$m") >&2
  static_ok "$w/out/runc.$GOARCH" || die "runc is not static"
  built_ok "^runc version ${RUNC_VERSION#v}\$" "$w/out/runc.$GOARCH" --version || die "runc --version does not say ${RUNC_VERSION#v}"
  if target_runs; then
    says "^libseccomp: " "$w/out/runc.$GOARCH" --version || die "runc was built without seccomp"
  else
    # not runnable here: the build settings Go records in the binary say the seccomp tag was on
    says "-tags=\(.*,\)\{0,1\}seccomp\(,\|\$\)" go version -m "$w/out/runc.$GOARCH" || die "runc was built without seccomp"
  fi
  mkdir -p "$runc_dir"
  install -m 0755 "$w/out/runc.$GOARCH" "$runc_dir/.runc.tmp" && mv -f "$runc_dir/.runc.tmp" "$runc_dir/runc.$GOARCH"
  sumline "$runc_dir/runc.$GOARCH" sha256 | merge_sums "$runc_dir/runc.sha256sum"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- CNI plugins
# Official: cni-plugins-linux-amd64-v1.10.0.tgz (./bridge, ./host-local, ...) + .sha256 and .sha512.
cni_dir=$MIRROR/cni-plugins/$CNI_VERSION
paths_cni() { cni_tgz=cni-plugins-$GOOS-$GOARCH-$CNI_VERSION.tgz; }
cni_complete() { published_ok "$cni_dir" "$cni_tgz.sha256" "$cni_tgz" && published_ok "$cni_dir" "$cni_tgz.sha512" "$cni_tgz"; }

build_cni() {
  local w m=github.com/containernetworking/plugins tm pkgs=() p
  w=$(wrapper cni-plugins-$CNI_VERSION)
  for p in main/bridge ipam/host-local main/loopback meta/portmap; do pkgs+=("$m/plugins/$p"); done
  tm=$(tag_time "$m@$CNI_VERSION")
  log "CNI plugins $CNI_VERSION: resolving modules"
  (cd "$w" && go get "${pkgs[@]/%/@$CNI_VERSION}") >&2
  log "CNI plugins $CNI_VERSION: building ${CNI_PLUGINS[*]}"
  rm -rf "$w/out"; mkdir -p "$w/out"
  (cd "$w" && go build -trimpath -ldflags "-s -w -X $m/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
     -o "$w/out/" "${pkgs[@]}") >&2
  for p in "${CNI_PLUGINS[@]}"; do [ -x "$w/out/$p" ] || die "CNI plugin $p was not built"; done
  built_ok "^CNI bridge plugin $CNI_VERSION\$" "$w/out/bridge" || die "bridge does not say $CNI_VERSION"
  if cross; then (cd "$w/out" && arch_tool -elf "$GOARCH" "${CNI_PLUGINS[@]}") || die "CNI plugins: not every one is for $GOARCH"; fi
  mkdir -p "$cni_dir"
  tgz "$w/out" "$cni_dir/$cni_tgz" "$tm" .
  sumline "$cni_dir/$cni_tgz" sha512 | write_atomic "$cni_dir/$cni_tgz.sha512"
  sumline "$cni_dir/$cni_tgz" sha256 | write_atomic "$cni_dir/$cni_tgz.sha256"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- crictl
# Official: crictl-v1.37.0-linux-amd64.tar.gz (crictl at the top) + .sha256.
crictl_dir=$MIRROR/crictl/$CRICTL_VERSION
paths_crictl() { crictl_tgz=crictl-$CRICTL_VERSION-$GOOS-$GOARCH.tar.gz; }
crictl_complete() { published_ok "$crictl_dir" "$crictl_tgz.sha256" "$crictl_tgz"; }

build_crictl() {
  local w m=sigs.k8s.io/cri-tools tm
  w=$(wrapper cri-tools-$CRICTL_VERSION)
  tm=$(tag_time "$m@$CRICTL_VERSION")
  log "crictl $CRICTL_VERSION: resolving modules"
  (cd "$w" && go get "$m/cmd/crictl@$CRICTL_VERSION") >&2
  log "crictl $CRICTL_VERSION: building"
  rm -rf "$w/out"; mkdir -p "$w/out"
  (cd "$w" && go build -trimpath -ldflags "-s -w -X $m/pkg/version.Version=$CRICTL_VERSION" \
     -o "$w/out/crictl" "$m/cmd/crictl") >&2
  built_ok "$CRICTL_VERSION" "$w/out/crictl" --version || die "crictl --version does not say $CRICTL_VERSION"
  mkdir -p "$crictl_dir"
  tgz "$w/out" "$crictl_dir/$crictl_tgz" "$tm" crictl
  sumline "$crictl_dir/$crictl_tgz" sha256 | write_atomic "$crictl_dir/$crictl_tgz.sha256"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- CoreDNS
# Official: coredns_1.14.7_linux_amd64.tgz (coredns at the top) + .sha256. The image is made
# from this binary by build_images.
coredns_dir=$MIRROR/coredns/$COREDNS_VERSION
paths_coredns() { coredns_tgz=coredns_${COREDNS_VERSION#v}_${GOOS}_$GOARCH.tgz; }
coredns_complete() { published_ok "$coredns_dir" "$coredns_tgz.sha256" "$coredns_tgz"; }

build_coredns() {
  local w m=github.com/coredns/coredns tm
  w=$(wrapper coredns-$COREDNS_VERSION)
  tm=$(tag_time "$m@$COREDNS_VERSION")
  log "CoreDNS $COREDNS_VERSION: resolving modules"
  (cd "$w" && go get "$m@$COREDNS_VERSION") >&2
  log "CoreDNS $COREDNS_VERSION: building"
  rm -rf "$w/out"; mkdir -p "$w/out"
  (cd "$w" && go build -trimpath -ldflags "-s -w -X $m/coremain.GitCommit=$COREDNS_VERSION" -o "$w/out/coredns" "$m") >&2
  built_ok "CoreDNS-${COREDNS_VERSION#v}" "$w/out/coredns" -version || die "coredns -version does not say ${COREDNS_VERSION#v}"
  mkdir -p "$coredns_dir"
  tgz "$w/out" "$coredns_dir/$coredns_tgz" "$tm" coredns
  sumline "$coredns_dir/$coredns_tgz" sha256 | write_atomic "$coredns_dir/$coredns_tgz.sha256"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- Traefik
# Official: traefik_v3.7.13_linux_amd64.tar.gz (traefik, LICENSE.md, CHANGELOG.md at the top) and
# traefik_v3.7.13_checksums.txt ("<hex>  <file>" for every file of the release). Workers run it as
# the node-local apiserver load balancer.
traefik_dir=$MIRROR/traefik/$TRAEFIK_VERSION
paths_traefik() { traefik_tgz=traefik_${TRAEFIK_VERSION}_${GOOS}_$GOARCH.tar.gz; }
traefik_sums=traefik_${TRAEFIK_VERSION}_checksums.txt
traefik_complete() { published_ok "$traefik_dir" "$traefik_sums" "$traefik_tgz"; }

build_traefik() {
  local w=$WORK/traefik-$TRAEFIK_VERSION m=github.com/traefik/traefik/v3 gomod dir tm line mod lego legodir auth
  rm -rf "$w"; mkdir -p "$w/stubs/ext"
  log "traefik $TRAEFIK_VERSION: reading its go.mod"
  gomod=$(mod_json "$m@$TRAEFIK_VERSION" | json_field GoMod)
  dir=$(mod_json "$m@$TRAEFIK_VERSION" | json_field Dir)
  [ -s "$gomod" ] && [ -d "$dir" ] || die "could not download $m@$TRAEFIK_VERSION"
  tm=$(tag_time "$m@$TRAEFIK_VERSION")

  # Traefik's go.mod replaces two modules with Containous forks and excludes one broken
  # tencentcloud version; a dependency's replace and exclude directives are ignored, so the
  # wrapper repeats them (with the substitutions below). github.com/traefik/traefik/dynamic/ext
  # is a nested module of the repository (./pkg/config/dynamic/ext), so it is neither in the v3
  # zip nor on the proxy: it holds the extension points of dynamic.HTTP and dynamic.Router,
  # empty in the open-source build, and the wrapper gives it a stub with one empty struct for
  # each ext.<Type> the source names. The web UI needs no Node build: webui/static is in the
  # zip (a placeholder), so the dashboard is empty but the API hardway reads
  # (/api/tcp/services) is all there.
  printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.22\n' > "$w/stubs/ext/go.mod"
  {
    echo "// Package ext is an empty stand-in for Traefik's nested dynamic/ext module (see build.sh)."
    echo "package ext"
    grep -rhoE '\bext\.[A-Z][A-Za-z0-9]*' --include='*.go' --exclude='*_test.go' "$dir/pkg" "$dir/cmd" \
      | sort -u | sed 's/^ext\.\(.*\)/\n\/\/ \1 carries nothing in the open-source build.\ntype \1 struct{}/'
  } > "$w/stubs/ext/ext.go"
  grep -q '^type HTTP struct{}' "$w/stubs/ext/ext.go" || die "traefik: found no ext.HTTP in $m@$TRAEFIK_VERSION; look at its dynamic/ext module"

  # Two things the module proxy does not serve, neither on the path hardway uses (a TCP
  # router with TLS passthrough, a health-checked TCP load balancer, the read-only API):
  # - the Containous fork of go-http-auth (the basic and digest auth middlewares): upstream
  #   abbot/go-http-auth v0.4.0 instead, plus the one function the fork adds, CheckSecret,
  #   written from v0.4.0's own hash comparison;
  # - SDKs of some of lego's DNS-01 providers (ACME certificates through a DNS API): lego's
  #   provider registry is swapped for one that knows no provider, so none of those SDKs is
  #   linked. ACME over HTTP-01 and TLS-ALPN-01 and everything else are unchanged.
  # Real hosts download the official release binary; this only feeds the lab and the tests.
  # The providers hardway never configures (Kubernetes, Docker, ECS, Consul, Nomad, the KV
  # stores) bring client-go, the AWS SDK and the Docker API: 1,697 packages for the whole binary,
  # about 80 min at load 20. traefik-<version>-lab.patch, a reviewed diff against this version's
  # own source (its head says what and why), takes them out of the static configuration and the
  # provider aggregator; their packages are then deleted, so nothing kept can still use them.
  # The copy of the module replaces the downloaded one. Without a patch for TRAEFIK_VERSION the
  # whole of Traefik is built, every provider included (1,697 packages).
  if [ -s "$TRAEFIK_LAB_PATCH" ]; then
    cp -r "$dir" "$w/traefik"; chmod -R u+w "$w/traefik"
    patch -p1 --forward --batch --silent -d "$w/traefik" < "$TRAEFIK_LAB_PATCH" >&2 \
      || die "traefik: $TRAEFIK_LAB_PATCH does not apply to $m@$TRAEFIK_VERSION"
    local p
    for p in "${TRAEFIK_LAB_DROP[@]}"; do
      [ -d "$w/traefik/$p" ] || die "traefik: $m@$TRAEFIK_VERSION has no $p to leave out"
      rm -rf "${w:?}/traefik/$p"
    done
  else
    log "traefik $TRAEFIK_VERSION: no $(basename "$TRAEFIK_LAB_PATCH"): building every provider (1,700 packages)"
  fi

  lego=$(sed -n 's#^[[:space:]]*github.com/go-acme/lego/v5 \(v[^[:space:]]*\).*#\1#p' "$gomod" | head -1)
  [ -n "$lego" ] || die "traefik: its go.mod requires no github.com/go-acme/lego/v5"
  legodir=$(mod_json "github.com/go-acme/lego/v5@$lego" | json_field Dir)
  [ -s "$legodir/providers/dns/zz_gen_dns_providers.go" ] || die "traefik: lego $lego has no providers/dns/zz_gen_dns_providers.go to swap"
  cp -r "$legodir" "$w/lego"; chmod -R u+w "$w/lego"
  rm -f "$w/lego/providers/dns/"*.go
  cat > "$w/lego/providers/dns/dns.go" <<'GO'
// Package dns is lego's DNS-01 provider registry, empty in hardway's mirror build of Traefik
// (hack/mirror/build.sh says why).
package dns

import (
	"fmt"

	"github.com/go-acme/lego/v5/challenge"
)

// NewDNSChallengeProviderByName knows no provider in this build.
func NewDNSChallengeProviderByName(name string) (challenge.Provider, error) {
	return nil, fmt.Errorf("unrecognized DNS provider: %s (this Traefik was built without DNS-01 providers)", name)
}
GO
  auth=$(mod_json "github.com/abbot/go-http-auth@v0.4.0" | json_field Dir)
  [ -s "$auth/basic.go" ] || die "traefik: could not download github.com/abbot/go-http-auth@v0.4.0"
  cp -r "$auth" "$w/go-http-auth"; chmod -R u+w "$w/go-http-auth"
  grep -q 'compareFuncs' "$w/go-http-auth/basic.go" && grep -q 'func (a \*DigestAuth) RequireAuth(' "$w/go-http-auth/digest.go" \
    || die "traefik: go-http-auth v0.4.0 lacks what CheckSecret and RequireAuthStale are built on"
  # v0.4.0 predates modules: its go.mod requires what it imports at the versions Traefik uses
  rm -rf "$w/go-http-auth/examples"
  {
    printf 'module github.com/abbot/go-http-auth\n\ngo 1.22\n\nrequire (\n'
    grep -E '^[[:space:]]*golang.org/x/(crypto|net) v' "$gomod" | sed 's#//.*##'
    printf ')\n'
  } > "$w/go-http-auth/go.mod"
  [ "$(grep -c 'golang.org/x/' "$w/go-http-auth/go.mod")" = 2 ] || die "traefik: its go.mod does not name golang.org/x/crypto and golang.org/x/net"
  cat > "$w/go-http-auth/fork.go" <<'GO'
package auth

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// CheckSecret reports whether password matches secret, an htpasswd entry (MD5, {SHA} or
// bcrypt), with the same comparison CheckAuth uses.
func CheckSecret(password, secret string) bool {
	compare := compareFuncs[0].compare
	for _, cmp := range compareFuncs[1:] {
		if strings.HasPrefix(secret, cmp.prefix) {
			compare = cmp.compare
			break
		}
	}
	return compare([]byte(secret), []byte(password)) == nil
}

// RequireAuthStale is RequireAuth for a request whose nonce was stale: the challenge says
// stale=true (RFC 2617), so the client retries with the new nonce without asking its user.
func (a *DigestAuth) RequireAuthStale(w http.ResponseWriter, r *http.Request) {
	if len(a.clients) > a.ClientCacheSize+a.ClientCacheTolerance {
		a.Purge(a.ClientCacheTolerance * 2)
	}
	nonce := RandomKey()
	a.clients[nonce] = &digest_client{nc: 0, last_seen: time.Now().UnixNano()}
	w.Header().Set(contentType, a.Headers.V().UnauthContentType)
	w.Header().Set(a.Headers.V().Authenticate,
		fmt.Sprintf(`Digest realm="%s", nonce="%s", opaque="%s", algorithm="MD5", qop="auth", stale=true`,
			a.Realm, nonce, a.Opaque))
	w.WriteHeader(a.Headers.V().UnauthCode)
	w.Write([]byte(a.Headers.V().UnauthResponse))
}
GO

  {
    echo "module hardway.invalid/mirror/traefik"
    echo
    sed -n 's/^go \(.*\)/go \1/p' "$gomod"
    echo
    echo "require $m $TRAEFIK_VERSION"
    echo
    echo "replace github.com/traefik/traefik/dynamic/ext => ./stubs/ext"
    echo "replace github.com/go-acme/lego/v5 => ./lego"
    echo "replace github.com/abbot/go-http-auth => ./go-http-auth"
    if [ -d "$w/traefik" ]; then echo "replace $m => ./traefik"; fi
    # "A => B vX" lines, alone or in a replace block; local paths (./...) are handled above
    sed -n 's#^\(replace\)\{0,1\}[[:space:]]*\([^[:space:]]*\) => \([^.[:space:]][^[:space:]]*\) \(v[^[:space:]]*\)[[:space:]]*$#replace \2 => \3 \4#p' "$gomod" \
      | grep -v '^replace github.com/abbot/go-http-auth '
    sed -n 's#^exclude \([^(].*\)#exclude \1#p' "$gomod"
  } > "$w/go.mod.new"
  while read -r line; do
    mod=${line#replace }; mod=${mod%% *}
    grep -q "^replace $mod => " "$w/go.mod.new" || die "traefik: go.mod replaces $mod in a way build.sh does not copy: $line"
  done < <(sed -n 's#^\(replace\)\{0,1\}[[:space:]]*\([^[:space:]]*\) => .*#replace \2#p' "$gomod")
  install_gomod "$w" < "$w/go.mod.new"; rm -f "$w/go.mod.new"

  log "traefik $TRAEFIK_VERSION: resolving modules"
  (cd "$w" && go get "$m/cmd/traefik@$TRAEFIK_VERSION") >&2
  log "traefik $TRAEFIK_VERSION: building $(cd "$w" && go list -deps "$m/cmd/traefik" | wc -l) packages"
  rm -rf "$w/out"; mkdir -p "$w/out"
  local ld="-s -w -X $m/pkg/version.Version=$TRAEFIK_VERSION -X $m/pkg/version.BuildDate=$tm" codename
  # `traefik version` tells the lab build from upstream's: "Codename: <upstream's>+hardway-lab"
  codename=$(sed -n 's/^[[:space:]]*Codename = "\([^"]*\)".*/\1/p' "$dir/pkg/version/version.go")
  if [ -d "$w/traefik" ] && [ -n "$codename" ]; then ld+=" -X $m/pkg/version.Codename=$codename+hardway-lab"; fi
  (cd "$w" && go build -trimpath -ldflags "$ld" -o "$w/out/traefik" "$m/cmd/traefik") >&2
  built_ok "^Version:[[:space:]]*$TRAEFIK_VERSION\$" "$w/out/traefik" version || die "traefik version does not say $TRAEFIK_VERSION"
  cp "$dir/LICENSE.md" "$dir/CHANGELOG.md" "$w/out/"
  chmod 0644 "$w/out/LICENSE.md" "$w/out/CHANGELOG.md"
  mkdir -p "$traefik_dir"
  tgz "$w/out" "$traefik_dir/$traefik_tgz" "$tm" CHANGELOG.md LICENSE.md traefik
  sumline "$traefik_dir/$traefik_tgz" sha256 | merge_sums "$traefik_dir/$traefik_sums"
  rm -rf "$w/out"
}

# ---------------------------------------------------------------- images
# docker-archive tarballs (what `ctr images import` and hardway's image check read), written by
# hack/mirror/mkimage with no registry and no daemon: one layer, linux/<arch>, an entrypoint.
images_dir=$MIRROR/images
paths_images() {
  local sfx=""
  [ "$GOARCH" = "$IMAGES_ARCH" ] || sfx=-$GOARCH
  pause_tar=pause-$PAUSE_VERSION$sfx.tar
  coredns_tar=coredns-$COREDNS_VERSION$sfx.tar
  hello_tar=hello-$HELLO_TAG$sfx.tar
}
images_complete() {
  local f
  for f in "$pause_tar" "$coredns_tar" "$hello_tar"; do grep -q "  $f\$" "$images_dir/SHA256SUMS" 2>/dev/null || return 1; done
  sums_ok "$images_dir" SHA256SUMS
}

build_images() {
  local w=$WORK/images/$GOARCH src tm_k8s tm_dns cc
  mkdir -p "$w"
  # the tools come from this checkout (the project's go.mod pins go-containerregistry): mkimage
  # runs here, the hello server goes into the image
  log "images: building mkimage and the hello server ($GOARCH)"
  (cd "$TOP" && GOARCH=$HOSTARCH go build -trimpath -ldflags "-s -w" -o "$w/mkimage" ./hack/mirror/mkimage \
     && go build -trimpath -ldflags "-s -w" -o "$w/hello" ./hack/mirror/hello) >&2

  # pause: the real pause.c from the Kubernetes module zip, built like build/pause/Makefile
  command -v gcc >/dev/null || die "pause needs gcc (run hack/setup.sh)"
  cc=$(cross_cc)
  src=$(mod_json "k8s.io/kubernetes@$K8S_VERSION" | json_field Dir)/build/pause/linux/pause.c
  [ -s "$src" ] || die "no pause.c in k8s.io/kubernetes@$K8S_VERSION ($src)"
  tm_k8s=$(tag_time "k8s.io/kubernetes@$K8S_VERSION")
  (cd "$w" && "$cc" -Os -Wall -Werror -static -ffile-prefix-map="$(dirname "$src")"=. \
     -DVERSION="v$PAUSE_VERSION" -o "$w/pause" "$src" && "${cc%gcc}strip" "$w/pause")
  static_ok "$w/pause" || die "pause is not static"
  if cross; then arch_tool -elf "$GOARCH" "$w/pause" "$w/hello" || die "images: pause or hello is not for $GOARCH"; fi

  # CoreDNS: the binary of the coredns component, from its tarball
  coredns_complete || die "the CoreDNS image needs the coredns component: build.sh coredns images"
  tm_dns=$(tag_time "github.com/coredns/coredns@$COREDNS_VERSION")
  rm -rf "$w/coredns-bin"; mkdir -p "$w/coredns-bin"
  tar -xzf "$coredns_dir/$coredns_tgz" -C "$w/coredns-bin" coredns

  mkdir -p "$images_dir"
  mk() { # OUT NAME CREATED ENTRYPOINT SRC:DEST...
    local out=$1 name=$2 created=$3 ep=$4; shift 4
    local args=() f
    for f in "$@"; do args+=(-file "$f"); done
    "$w/mkimage" -name "$name" -arch "$GOARCH" -created "$created" -entrypoint "$ep" "${args[@]}" -o "$images_dir/.$out.tmp" >&2
    mv -f "$images_dir/.$out.tmp" "$images_dir/$out"
  }
  mk "$pause_tar" "$PAUSE_IMAGE" "$tm_k8s" /pause "$w/pause:/pause"
  mk "$coredns_tar" "$COREDNS_IMAGE" "$tm_dns" /coredns "$w/coredns-bin/coredns:/coredns"
  mk "$hello_tar" "$HELLO_IMAGE" "$HELLO_CREATED" /hello "$w/hello:/hello"
  (cd "$images_dir" && for f in "$coredns_tar" "$hello_tar" "$pause_tar"; do sumline "$f" sha256; done) \
    | merge_sums "$images_dir/SHA256SUMS"
}

# ---------------------------------------------------------------- main
ALL=(etcd kubernetes containerd runc cni crictl coredns traefik images)
want=()
[ $# -gt 0 ] || set -- all
for a in "$@"; do
  case "$a" in
    all) want+=("${ALL[@]}") ;;
    control-plane) want+=(etcd kubernetes) ;;
    worker|workers) want+=(containerd runc cni crictl traefik) ;;
    etcd|kubernetes|containerd|runc|cni|crictl|coredns|traefik) want+=("$a") ;;
    images) want+=(coredns images) ;;  # the CoreDNS image is made from the coredns binary
    -h|--help) sed -n '2,/^# This is a development tool/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown component $a (components: ${ALL[*]}; groups: control-plane worker all)" ;;
  esac
done
# every component has a check and a build; a missing one would silently rebuild (an `if` ignores
# "command not found"), so refuse to start instead
for c in "${ALL[@]}"; do
  declare -F "${c}_complete" "build_$c" >/dev/null || die "internal: ${c}_complete or build_$c is not defined"
done

# Official releases first: a machine that reaches the official download sites takes each missing
# component from there, verified against the checksum files the site publishes (and keeps those
# files beside it, so `hardway fetch` verifies the same way against the mirror); building from
# source is the fallback for a site that cannot be reached (5 s) or does not have the files.
# hack/mirror/official says which path each component took. HARDWAY_MIRROR_FROM=source skips
# the official sites. The images are always made here (they have no official tarball).
version_of() {
  case $1 in
    kubernetes) echo "$K8S_VERSION" ;; etcd) echo "$ETCD_VERSION" ;; containerd) echo "$CONTAINERD_VERSION" ;;
    runc) echo "$RUNC_VERSION" ;; cni) echo "$CNI_VERSION" ;; crictl) echo "$CRICTL_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;; traefik) echo "$TRAEFIK_VERSION" ;;
  esac
}
# label C: C, and its architecture when the mirror is built for several
label() { if [ ${#ARCHES[@]} -gt 1 ]; then echo "$1 ($GOARCH)"; else echo "$1"; fi; }

official_taken=() source_built=()
k8s_pid=""
stop_k8s() { # the background build and the go commands under it, if a foreground build failed
  local p kids
  [ -n "$k8s_pid" ] || return 0
  kids=$(pgrep -P "$k8s_pid" || true)
  for p in $kids; do pkill -TERM -P "$p" 2>/dev/null || true; kill -TERM "$p" 2>/dev/null || true; done
  kill -TERM "$k8s_pid" 2>/dev/null || true
}

# build_arch: every wanted component for $GOARCH (use_arch): the official release, the cache, or a
# source build
build_arch() {
  local c x taken="" missing=() todo=()
  for c in "${ALL[@]}"; do
    for x in "${want[@]}"; do
      [ "$x" = "$c" ] || continue
      if [ "$c" != images ] && ! "${c}_complete"; then missing+=("$c=$(version_of "$c")"); fi
      break
    done
  done
  case ${HARDWAY_MIRROR_FROM:-auto} in
    source) log "HARDWAY_MIRROR_FROM=source: building from source for $GOARCH, official sites not asked" ;;
    auto)
      if [ ${#missing[@]} -gt 0 ]; then
        log "trying the official releases of ${missing[*]%%=*} for $GOARCH"
        official_tool
        taken=$("$WORK/official" -mirror "$MIRROR" -arch "$GOARCH" "${missing[@]}") \
          || die "official releases: see above (a checksum mismatch is never a reason to build from source instead)"
      fi ;;
    *) die "HARDWAY_MIRROR_FROM=${HARDWAY_MIRROR_FROM}: auto (official releases, source as the fallback) or source" ;;
  esac

  # in the order of ALL, each once: the official release, the cache, or a source build
  for c in "${ALL[@]}"; do
    for x in "${want[@]}"; do
      [ "$x" = "$c" ] || continue
      if grep -qx "official $c" <<<"$taken" && "${c}_complete"; then
        log "$(label "$c"): the official release, checksums verified"; official_taken+=("$(label "$c")")
      elif "${c}_complete"; then log "$(label "$c"): cached"
      else todo+=("$c")
      fi
      break
    done
  done

  # Kubernetes is most of a cold build (10 min of compiling on 2 cores). It builds beside the
  # others, so that their module downloads (3-4 min in all, network-bound) overlap its compiling
  # instead of leaving the cores idle. Each writes only its own wrapper module and output;
  # Go's module and build caches are safe for concurrent use.
  local k8s_label; k8s_label=$(label kubernetes)
  trap stop_k8s EXIT
  if [ ${#todo[@]} -gt 1 ] && grep -qw kubernetes <<<"${todo[*]}"; then
    ( timed "$k8s_label" build_kubernetes && echo "${TIMES[$k8s_label]}" > "$WORK/.kubernetes-build-time" ) &
    k8s_pid=$!
    log "$k8s_label: building in the background (pid $k8s_pid) beside ${todo[*]/kubernetes/}"
  fi
  for c in "${todo[@]}"; do
    if [ "$c" = kubernetes ] && [ -n "$k8s_pid" ]; then continue; fi
    timed "$(label "$c")" "build_$c"; source_built+=("$(label "$c")")
  done
  if [ -n "$k8s_pid" ]; then
    wait "$k8s_pid" || { k8s_pid=""; die "$k8s_label: the source build failed (see above)"; }
    k8s_pid=""
    TIMES[$k8s_label]=$(cat "$WORK/.kubernetes-build-time"); source_built+=("$k8s_label")
  fi
  trap - EXIT
}

# Another architecture than this machine's is cross-compiled, and its binaries checked with
# hack/mirror/official -elf: built once, here, for this machine.
for a in "${ARCHES[@]}"; do
  if [ "$a" != "$HOSTARCH" ]; then official_tool; break; fi
done
for a in "${ARCHES[@]}"; do
  use_arch "$a"
  build_arch
done
for x in "${want[@]}"; do
  if [ "$x" = kubernetes ]; then
    minor_line=${K8S_VERSION#v}; minor_line=${minor_line%.*}
    printf '%s' "$K8S_VERSION" | write_atomic "$MIRROR/kubernetes/release/stable-$minor_line.txt"
    break
  fi
done

log "mirror ready in $(( $(date +%s) - T0 ))s: $MIRROR"
log "official releases: ${official_taken[*]:-none}; built from source: ${source_built[*]:-none}"
for a in "${ARCHES[@]}"; do
  use_arch "$a"
  for c in "${ALL[@]}"; do
    if [ -n "${TIMES[$(label "$c")]:-}" ]; then echo "build time $(label "$c") ${TIMES[$(label "$c")]}s" >&2; fi
  done
done
echo "kubernetes file://$MIRROR/kubernetes"
echo "etcd file://$MIRROR/etcd"
echo "containerd file://$MIRROR/containerd"
echo "runc file://$MIRROR/runc"
echo "cniPlugins file://$MIRROR/cni-plugins"
echo "crictl file://$MIRROR/crictl"
echo "traefik file://$MIRROR/traefik"
echo "images file://$MIRROR/images"
