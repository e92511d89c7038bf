#!/usr/bin/env bash
# hack/conformance/build.sh: the upstream conformance suite's binaries, e2e.test and ginkgo, of the
# Kubernetes release the mirror's binaries are, beside the mirror's release:
#
#   $MIRROR/kubernetes-test/vX.Y.Z/linux/<arch>/{e2e.test,ginkgo}{,.sha256}
#
# First from the official kubernetes-test tarball where dl.k8s.io answers (hack/mirror/official,
# as hack/mirror/build.sh takes the release's binaries: verified against the published .sha256
# and .sha512, kept with them where the site has it,
# $MIRROR/kubernetes/release/vX.Y.Z/kubernetes-test-linux-<arch>.tar.gz), its
# kubernetes/test/bin/e2e.test and ginkgo taken out. Built from the same source release through
# the Go module proxy when the site cannot be reached (a 5 s probe) or lacks it;
# HARDWAY_MIRROR_FROM=source never asks the site. A checksum mismatch stops the script: never a
# reason to build instead. The same files either way; the log says which path was taken. Cached:
# a second run only checks the digests. The source build is reproducible as build.sh's outputs
# are (-trimpath, the release tag's version ldflags).
#
# Either way it writes the module $WORK/kubernetes-test-vX.Y.Z (k8s.io/kubernetes, each staging
# module at its published version), in which images.sh builds agnhost and nnp.
#
# usage: hack/conformance/build.sh        (K8S_VERSION as hack/mirror/build.sh: v1.36.3)
#
# This is a development tool, not part of hardway.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
GOOS=linux
GOARCH=${GOARCH:-$(go env GOARCH)}
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
WORK=${HARDWAY_MIRROR_WORK:-$(dirname "$MIRROR")/mirror-work}
OUT=$MIRROR/kubernetes-test/$K8S_VERSION/$GOOS/$GOARCH
TOP=$(cd "$(dirname "$0")/../.." && pwd)
# where hack/mirror/official puts the official tarball: the site's layout
TGZ=$MIRROR/kubernetes/release/$K8S_VERSION/kubernetes-test-linux-$GOARCH.tar.gz
export GOWORK=off GOTOOLCHAIN=local GOOS GOARCH CGO_ENABLED=0 GOFLAGS="-buildvcs=false"

log() { echo "[conformance $(date +%T)] $*" >&2; }
die() { echo "conformance: $*" >&2; exit 1; }

complete() {
  local b
  for b in e2e.test ginkgo; do
    [ -x "$OUT/$b" ] && [ -s "$OUT/$b.sha256" ] || return 1
    [ "$(sha256sum "$OUT/$b" | cut -d' ' -f1)" = "$(cat "$OUT/$b.sha256")" ] || return 1
  done
}
if complete; then log "e2e.test and ginkgo $K8S_VERSION: cached in $OUT"; exit 0; fi

# the official tarball is in the mirror and has both published digests (a run that stopped after
# taking it need not download it again)
tgz_ok() {
  local e
  for e in sha256 sha512; do
    [ -s "$TGZ" ] && [ -s "$TGZ.$e" ] || return 1
    [ "$("${e}sum" "$TGZ" | cut -d' ' -f1)" = "$(awk 'NF { print tolower($1); exit }' "$TGZ.$e")" ] || return 1
  done
}

T0=$(date +%s)
w=$WORK/kubernetes-test-$K8S_VERSION
mkdir -p "$w"
# The module first, on both paths: images.sh needs it, and a run that put the binaries in place
# without it would leave the next one to say "cached" and never write it.
gomod=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -1)
[ -s "$gomod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"

# As for the binaries (hack/mirror/build.sh): each staging module at its published v0.X.Y. The
# suite imports k8s.io/sample-apiserver's types, so here the sample-* modules are the published
# ones too, not stubs.
{
  echo "module hardway.invalid/mirror/kubernetes-test"
  echo
  sed -n 's/^go \(.*\)/go \1/p; s/^godebug \(.*\)/godebug \1/p' "$gomod"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" | while read -r m; do
    echo "	$m => $m v0.${K8S_VERSION#v1.}"
  done
  echo ")"
} > "$w/go.mod.tmp"
mv -f "$w/go.mod.tmp" "$w/go.mod"
rm -rf "$w/out"; mkdir -p "$w/out"

from=source
case ${HARDWAY_MIRROR_FROM:-auto} in
  source) log "HARDWAY_MIRROR_FROM=source: building from source, dl.k8s.io not asked" ;;
  auto)
    # for this machine, whatever GOARCH the binaries are for
    (cd "$TOP" && GOARCH=$(go env GOHOSTARCH) go build -trimpath -o "$w/official" ./hack/mirror/official) >&2
    if tgz_ok; then
      log "the official kubernetes-test $K8S_VERSION tarball is in the mirror: $TGZ"; from=official
    else
      log "trying the official kubernetes-test $K8S_VERSION tarball"
      taken=$("$w/official" -mirror "$MIRROR" -arch "$GOARCH" "kubernetes-test=$K8S_VERSION") \
        || die "the official kubernetes-test tarball: see above (a checksum mismatch is never a reason to build from source instead)"
      if [ "$taken" = "official kubernetes-test" ] && tgz_ok; then from=official; fi
    fi
    if [ "$from" = official ]; then
      "$w/official" -extract "$TGZ" -into "$w/out" kubernetes/test/bin/e2e.test kubernetes/test/bin/ginkgo \
        || die "could not take e2e.test and ginkgo out of $TGZ"
    fi ;;
  *) die "HARDWAY_MIRROR_FROM=${HARDWAY_MIRROR_FROM}: auto (the official tarball, source as the fallback) or source" ;;
esac

# the source build, into $w/out
build_from_source() {
  local info tm rest major minor ginkgo ld p
  info=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p' | head -1)
  tm=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
  rest=${K8S_VERSION#v}; major=${rest%%.*}; rest=${rest#*.}; minor=${rest%%.*}
  ginkgo=$(sed -n 's#^[[:space:]]*github.com/onsi/ginkgo/v2 \(v[^ ]*\).*#\1#p' "$gomod" | head -1)
  [ -n "$ginkgo" ] || die "no github.com/onsi/ginkgo/v2 in $gomod"

  log "resolving k8s.io/kubernetes/test/e2e@$K8S_VERSION (with its tests' imports) and ginkgo $ginkgo"
  (cd "$w" && go get -t "k8s.io/kubernetes/test/e2e@$K8S_VERSION" "github.com/onsi/ginkgo/v2/ginkgo@$ginkgo") >&2

  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$tm"
  done
  log "building e2e.test (cold: many minutes on 2 cores) and ginkgo"
  (cd "$w" && go test -c -trimpath -tags selinux,grpcnotrace -ldflags "$ld" -o "$w/out/e2e.test" k8s.io/kubernetes/test/e2e) >&2
  (cd "$w" && go build -trimpath -ldflags "-s -w" -o "$w/out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo) >&2
}
# in an if, not after ||: set -e holds inside the function only so
if [ "$from" = source ]; then build_from_source; fi
"$w/out/e2e.test" --version 2>&1 | grep -q "$K8S_VERSION" || die "e2e.test --version does not say $K8S_VERSION: $("$w/out/e2e.test" --version 2>&1 | head -2)"

mkdir -p "$OUT"
for b in e2e.test ginkgo; do
  install -m 0755 "$w/out/$b" "$OUT/.$b.tmp" && mv -f "$OUT/.$b.tmp" "$OUT/$b"
  sha256sum "$OUT/$b" | cut -d' ' -f1 | tr -d '\n' > "$OUT/.$b.sha256.tmp" && mv -f "$OUT/.$b.sha256.tmp" "$OUT/$b.sha256"
done
rm -rf "$w/out"
case $from in
  official) how="the official release, checksums verified" ;;
  source) how="built from source" ;;
esac
log "e2e.test and ginkgo $K8S_VERSION in $OUT: $how ($(( $(date +%s) - T0 ))s)"
