#!/usr/bin/env bash
# hack/conformance/build.sh: build the upstream conformance suite's binaries, e2e.test and
# ginkgo, from the same Kubernetes source release the mirror's binaries come from, through the
# Go module proxy, and put them beside the mirror's release:
#
#   $MIRROR/kubernetes-test/vX.Y.Z/linux/<arch>/{e2e.test,ginkgo}{,.sha256}
#
# What the official kubernetes-test tarball holds (kubernetes/test/bin/), built here when no
# official site can be reached. Cached: a second run only checks the digests. Reproducible
# as build.sh's outputs are (-trimpath, the release tag's version ldflags).
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

T0=$(date +%s)
w=$WORK/kubernetes-test-$K8S_VERSION
mkdir -p "$w"
gomod=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -1)
[ -s "$gomod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
info=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p' | head -1)
tm=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
rest=${K8S_VERSION#v}; major=${rest%%.*}; rest=${rest#*.}; minor=${rest%%.*}

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
ginkgo=$(sed -n 's#^[[:space:]]*github.com/onsi/ginkgo/v2 \(v[^ ]*\).*#\1#p' "$gomod" | head -1)
[ -n "$ginkgo" ] || die "no github.com/onsi/ginkgo/v2 in $gomod"

log "resolving k8s.io/kubernetes/test/e2e@$K8S_VERSION (with its tests' imports) and ginkgo $ginkgo"
(cd "$w" && go get -t "k8s.io/kubernetes/test/e2e@$K8S_VERSION" "github.com/onsi/ginkgo/v2/ginkgo@$ginkgo") >&2

ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$tm"
done
rm -rf "$w/out"; mkdir -p "$w/out"
log "building e2e.test (cold: many minutes on 2 cores) and ginkgo"
(cd "$w" && go test -c -trimpath -tags selinux,grpcnotrace -ldflags "$ld" -o "$w/out/e2e.test" k8s.io/kubernetes/test/e2e) >&2
(cd "$w" && go build -trimpath -ldflags "-s -w" -o "$w/out/ginkgo" github.com/onsi/ginkgo/v2/ginkgo) >&2
"$w/out/e2e.test" --version 2>&1 | grep -q "$K8S_VERSION" || die "e2e.test --version does not say $K8S_VERSION: $("$w/out/e2e.test" --version 2>&1 | head -2)"

mkdir -p "$OUT"
for b in e2e.test ginkgo; do
  install -m 0755 "$w/out/$b" "$OUT/.$b.tmp" && mv -f "$OUT/.$b.tmp" "$OUT/$b"
  sha256sum "$OUT/$b" | cut -d' ' -f1 | tr -d '\n' > "$OUT/.$b.sha256.tmp" && mv -f "$OUT/.$b.sha256.tmp" "$OUT/$b.sha256"
done
rm -rf "$w/out"
log "e2e.test and ginkgo $K8S_VERSION in $OUT ($(( $(date +%s) - T0 ))s)"
