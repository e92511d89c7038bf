#!/usr/bin/env bash
# hack/cis/build.sh: build kube-bench, which runs the CIS Kubernetes Benchmark's checks on a host,
# from its source release through the Go module proxy, with the benchmark definitions the same
# release ships, and gojq, the jq its policies checks pipe kubectl's output through (kube-bench's
# own image installs jq; the lab's hosts have none):
#
#   $MIRROR/kube-bench/vX.Y.Z/linux/<arch>/kube-bench{,.sha256}
#   $MIRROR/kube-bench/vX.Y.Z/linux/<arch>/cfg/                   (the release's cfg/: every benchmark)
#   $MIRROR/kube-bench/vX.Y.Z/linux/<arch>/cfg.sha256sums         (sha256sum -c, relative to that dir)
#   $MIRROR/gojq/vA.B.C/linux/<arch>/gojq{,.sha256}
#
# hack/cis/run.sh copies them to the hosts with hardway's kube-bench config (hack/cis/config.yaml).
# Cached: a second run only checks the digests. Reproducible as the mirror's outputs are
# (-trimpath, the release tag as each Makefile's version ldflags, -buildvcs=false): each is built
# in a copy of its own module, with its own go.mod and go.sum, so neither is a dependency of
# hardway's go.mod.
#
# usage: hack/cis/build.sh     (the pins are in hack/cis/versions.sh; GOARCH as the mirror's)
#
# This is a development tool, not part of hardway.
set -euo pipefail

# shellcheck source=hack/cis/versions.sh
. "$(dirname "$0")/versions.sh"
GOOS=linux
GOARCH=${GOARCH:-$(go env GOARCH)}
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
WORK=${HARDWAY_MIRROR_WORK:-$(dirname "$MIRROR")/mirror-work}
OUT=$MIRROR/kube-bench/$KUBE_BENCH_VERSION/$GOOS/$GOARCH
JQ_OUT=$MIRROR/gojq/$GOJQ_VERSION/$GOOS/$GOARCH
export GOWORK=off GOTOOLCHAIN=local GOOS GOARCH CGO_ENABLED=0 GOFLAGS="-buildvcs=false"

log() { echo "[cis $(date +%T)] $*" >&2; }
die() { echo "cis: $*" >&2; exit 1; }

digest_ok() { # dir binary
  [ -x "$1/$2" ] && [ -s "$1/$2.sha256" ] &&
    [ "$(sha256sum "$1/$2" | cut -d' ' -f1)" = "$(cat "$1/$2.sha256")" ]
}
cfg_ok() { [ -s "$OUT/cfg.sha256sums" ] && (cd "$OUT" && sha256sum -c --quiet --strict cfg.sha256sums >/dev/null 2>&1); }
kube_bench_ok() { digest_ok "$OUT" kube-bench && cfg_ok; }
complete() { kube_bench_ok && digest_ok "$JQ_OUT" gojq; }
if complete; then log "kube-bench $KUBE_BENCH_VERSION and gojq $GOJQ_VERSION: cached in $OUT and $JQ_OUT"; exit 0; fi

# install_bin dir name file: the binary and its digest, each renamed into place.
install_bin() {
  mkdir -p "$1"
  install -m 0755 "$3" "$1/.$2.tmp" && mv -f "$1/.$2.tmp" "$1/$2"
  sha256sum "$1/$2" | cut -d' ' -f1 | tr -d '\n' > "$1/.$2.sha256.tmp" && mv -f "$1/.$2.sha256.tmp" "$1/$2.sha256"
}

# module_src module version dest: a writable copy of the module's release tree. The module cache's is
# read-only; building there would also make the cache a working directory.
module_src() {
  local dir
  dir=$(cd "$WORK" && go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -1)
  { [ -n "$dir" ] && [ -s "$dir/go.mod" ]; } || die "could not download $1@$2"
  rm -rf "$3"; mkdir -p "$(dirname "$3")"
  cp -R "$dir" "$3"
  chmod -R u+w "$3"
}

T0=$(date +%s)
mkdir -p "$WORK"

if ! kube_bench_ok; then
  w=$WORK/kube-bench-$KUBE_BENCH_VERSION
  module_src github.com/aquasecurity/kube-bench "$KUBE_BENCH_VERSION" "$w/src"
  # The makefile's build target sets -X cmd.KubeBenchVersion=$(git describe --tags --abbrev=0),
  # the tag; -s -w as every mirror build (no symbol tables: 56 MB instead of 80).
  ld="-s -w -X github.com/aquasecurity/kube-bench/cmd.KubeBenchVersion=$KUBE_BENCH_VERSION"
  rm -rf "$w/out"; mkdir -p "$w/out"
  log "building kube-bench $KUBE_BENCH_VERSION"
  (cd "$w/src" && go build -trimpath -ldflags "$ld" -o "$w/out/kube-bench" .) >&2
  if [ "$GOARCH" = "$(go env GOHOSTARCH)" ]; then
    v=$("$w/out/kube-bench" version 2>&1 | head -1)
    [ "$v" = "$KUBE_BENCH_VERSION" ] || die "kube-bench version says $v, not $KUBE_BENCH_VERSION"
  fi
  # The benchmarks as released, with modes of their own (the module cache's are read-only).
  cp -R "$w/src/cfg" "$w/out/cfg"
  find "$w/out/cfg" -type d -exec chmod 0755 {} + && find "$w/out/cfg" -type f -exec chmod 0644 {} +
  [ -s "$w/out/cfg/config.yaml" ] || die "kube-bench $KUBE_BENCH_VERSION: no cfg/config.yaml"
  for m in $CIS_BENCHMARKS; do
    [ -s "$w/out/cfg/${m#*=}/master.yaml" ] || die "kube-bench $KUBE_BENCH_VERSION: no cfg/${m#*=} (CIS_BENCHMARKS has $m)"
  done

  mkdir -p "$OUT"
  rm -rf "$OUT/.cfg.tmp" "$OUT/.cfg.old"
  mv "$w/out/cfg" "$OUT/.cfg.tmp"
  [ ! -e "$OUT/cfg" ] || mv "$OUT/cfg" "$OUT/.cfg.old"
  mv "$OUT/.cfg.tmp" "$OUT/cfg" && rm -rf "$OUT/.cfg.old"
  (cd "$OUT" && find cfg -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) > "$OUT/.cfg.sha256sums.tmp"
  mv -f "$OUT/.cfg.sha256sums.tmp" "$OUT/cfg.sha256sums"
  install_bin "$OUT" kube-bench "$w/out/kube-bench"
  rm -rf "$w/out"
fi

if ! digest_ok "$JQ_OUT" gojq; then
  w=$WORK/gojq-$GOJQ_VERSION
  module_src github.com/itchyny/gojq "$GOJQ_VERSION" "$w/src"
  # The Makefile sets cli.revision to the commit; the proxy's copy carries none, so the tag.
  rm -rf "$w/out"; mkdir -p "$w/out"
  log "building gojq $GOJQ_VERSION"
  (cd "$w/src" && go build -trimpath -ldflags "-s -w -X github.com/itchyny/gojq/cli.revision=$GOJQ_VERSION" -o "$w/out/gojq" ./cmd/gojq) >&2
  install_bin "$JQ_OUT" gojq "$w/out/gojq"
  rm -rf "$w/out"
fi

complete || die "built, but the digests in $OUT or $JQ_OUT do not check"
log "kube-bench $KUBE_BENCH_VERSION in $OUT, gojq $GOJQ_VERSION in $JQ_OUT ($(( $(date +%s) - T0 ))s)"
