#!/usr/bin/env bash
# hack/conformance/images.sh: the images the conformance suite's pods run, made here with no
# registry, as docker-archive tarballs under their upstream names (a worker imports them into
# containerd, as it does pause and CoreDNS; the pods' IfNotPresent pull then finds them):
#
#   $MIRROR/conformance-images/<name>.tar + SHA256SUMS
#
#   registry.k8s.io/e2e-test-images/agnhost:2.63.0 and :2.55   agnhost built from the Kubernetes
#       source release (test/images/agnhost) on a Debian rootfs with the tools the upstream image
#       adds (dig/nslookup, curl, nc, ip, iperf, bash), its test user and group, and /coredns
#   registry.k8s.io/e2e-test-images/kitten:1.8 and nautilus:1.8   that agnhost image with the
#       picture and data.json of test/images/{kitten,nautilus}/html in /, CMD test-webserver
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-1 and :1.36.1-1   upstream's busybox 1.37.0
#       (the orig tarball of trixie's source, through apt), built here statically, with every
#       applet linked in /bin
#   registry.k8s.io/e2e-test-images/nginx:1.15-4 and :1.27-0   Debian's nginx serving on :80
#   registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0   the Debian rootfs (glibc's resolver)
#   registry.k8s.io/e2e-test-images/nonroot:1.5   the Debian rootfs with USER 1234
#   registry.k8s.io/e2e-test-images/nonewprivs:1.4   the busybox tree with the source release's
#       test/images/nonewprivs (nnp) setuid root at /usr/local/bin/nnp, CMD nnp
#   registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2   the busybox tree with the server of
#       the published module k8s.io/sample-apiserver v0.X.Y (this release's) at /sample-apiserver
#   registry.k8s.io/etcd:3.6.8-0   etcd, etcdctl and etcdutl v3.6.8 built from the published
#       go.etcd.io/etcd modules, in /usr/local/bin, on a tree of passwd, group and /tmp
#
# The suite's tags (test/utils/image/manifest.go); the Go programs are built through the Go
# module proxy, as hack/mirror/build.sh builds the cluster's binaries. Upstream bases some of
# these on alpine, which has no source here: the busybox tree stands in for it.
#
# Cached per image; the Debian rootfs is debootstrapped once (from the machine's own apt
# configuration). Needs root (debootstrap). This is a development tool, not part of hardway.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
AGNHOST_VERSION=${AGNHOST_VERSION:-2.63.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
# the suite's registry.k8s.io/etcd:3.6.8-0 (not $ETCD_VERSION: the cluster's, in hack/mirror/build.sh)
ETCD_IMAGE_VERSION=v3.6.8
BUSYBOX_VERSION=${BUSYBOX_VERSION:-1.37.0}
BUSYBOX_SUITE=${BUSYBOX_SUITE:-trixie} # the Debian release whose source has $BUSYBOX_VERSION
GOARCH=${GOARCH:-$(go env GOARCH)}
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
WORK=${HARDWAY_MIRROR_WORK:-$(dirname "$MIRROR")/mirror-work}
OUT=$MIRROR/conformance-images
TOP=$(cd "$(dirname "$0")/../.." && pwd)
CREATED=2026-01-01T00:00:00Z
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
umask 022 # the modes of the files made here (busybox's /etc/passwd) are in the images' bytes

log() { echo "[conformance-images $(date +%T)] $*" >&2; }
die() { echo "conformance-images: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap)"
mkdir -p "$OUT" "$WORK/conformance-images"
w=$WORK/conformance-images

# The machine's Debian source: deb822 first, then the one-line form.
apt_source() {
  local f uri suite
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' "$f" | head -1)
    suite=$(sed -n 's/^Suites: *\([^ ]*\).*/\1/p' "$f" | head -1)
    [ -n "$uri" ] && [ -n "$suite" ] && { echo "$uri $suite"; return; }
  done
  awk '$1 == "deb" { print $2, $3; exit }' /etc/apt/sources.list 2>/dev/null
}

(cd "$TOP" && go build -trimpath -o "$w/mkimage" ./hack/mirror/mkimage)

# image NAME FILE MKIMAGE-ARGS...: make FILE (under $OUT) unless it is there
image() {
  local name=$1 file=$2; shift 2
  if [ -s "$OUT/$file" ]; then log "$name: cached"; return; fi
  "$w/mkimage" -name "$name" -arch "$GOARCH" -created "$CREATED" "$@" -o "$OUT/.$file.tmp" >&2
  mv -f "$OUT/.$file.tmp" "$OUT/$file"
}

# --- the Debian rootfs with the tools
rootfs=$w/debian-tools
if [ ! -e "$rootfs/.done" ]; then
  read -r uri suite < <(apt_source) || die "no Debian source in the apt configuration"
  log "debootstrap $suite (minbase + tools) into $rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=bind9-dnsutils,curl,netcat-openbsd,iproute2,iperf,bash,util-linux,procps,nginx-light,ca-certificates \
    "$suite" "$rootfs" "$uri" > "$w/debootstrap.log" 2>&1 || die "debootstrap failed: see $w/debootstrap.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/dev/* "$rootfs"/proc/* "$rootfs"/sys/*
  # agnhost's user and group, as its Dockerfile adds them
  chroot "$rootfs" sh -c 'groupadd -g 50000 group-defined-in-image && useradd -u 1000 -M -s /bin/sh user-defined-in-image && usermod -aG group-defined-in-image user-defined-in-image'
  mkdir -p "$rootfs/uploads"
  # nginx in the foreground, on :80, as the upstream image; its default page
  printf 'Welcome to nginx!\n' > "$rootfs/var/www/html/index.html"
  touch "$rootfs/.done"
fi

# --- agnhost, from the Kubernetes source release
tw=$WORK/kubernetes-test-$K8S_VERSION # build.sh's module: k8s.io/kubernetes and its staging modules
agn=$w/agnhost-$K8S_VERSION
if [ ! -x "$agn" ]; then
  [ -s "$tw/go.mod" ] || die "run hack/conformance/build.sh first (it writes the module $tw)"
  log "agnhost $AGNHOST_VERSION from k8s.io/kubernetes@$K8S_VERSION"
  (cd "$tw" && go get "k8s.io/kubernetes/test/images/agnhost@$K8S_VERSION") >&2
  (cd "$tw" && GOOS=linux GOARCH=$GOARCH go build -trimpath -ldflags "-s -w -X main.Version=$AGNHOST_VERSION" -o "$agn" k8s.io/kubernetes/test/images/agnhost) >&2
fi
mod=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -1)
coredns_tgz=$MIRROR/coredns/$COREDNS_VERSION/coredns_${COREDNS_VERSION#v}_linux_$GOARCH.tgz
[ -s "$coredns_tgz" ] || die "no $coredns_tgz: run make mirror"
tar -xzf "$coredns_tgz" -C "$w" coredns

agnhost_args=(-rootfs "$rootfs" -entrypoint /agnhost -file "$agn:/agnhost" -file "$agn:/agnhost-2"
  -file "$w/coredns:/coredns" -file "$mod/test/images/agnhost/porter/localhost.crt:/localhost.crt"
  -file "$mod/test/images/agnhost/porter/localhost.key:/localhost.key")
image "registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_VERSION" "agnhost-$AGNHOST_VERSION.tar" "${agnhost_args[@]}" -cmd pause
image registry.k8s.io/e2e-test-images/agnhost:2.55 agnhost-2.55.tar "${agnhost_args[@]}" -cmd pause
# kitten and nautilus are agnhost (their BASEIMAGE) plus a picture and data.json, CMD
# test-webserver. agnhost's Dockerfile sets no WORKDIR, so their COPY destinations are in /,
# which is also what test-webserver serves (http.Dir("/")).
for pic in kitten nautilus; do
  image "registry.k8s.io/e2e-test-images/$pic:1.8" "$pic-1.8.tar" "${agnhost_args[@]}" -cmd test-webserver \
    -file "$mod/test/images/$pic/html/$pic.jpg:/$pic.jpg" -file "$mod/test/images/$pic/html/data.json:/data.json"
done
image registry.k8s.io/e2e-test-images/nginx:1.15-4 nginx-1.15-4.tar -rootfs "$rootfs" -entrypoint "/usr/sbin/nginx,-g,daemon off;"
image registry.k8s.io/e2e-test-images/nginx:1.27-0 nginx-1.27-0.tar -rootfs "$rootfs" -entrypoint "/usr/sbin/nginx,-g,daemon off;"
image registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0 glibc-dns-testing-2.0.0.tar -rootfs "$rootfs" -cmd /bin/sh
# nonroot: its Dockerfile is its Debian base with USER 1234 (runAsNonRoot's image-specified user)
image registry.k8s.io/e2e-test-images/nonroot:1.5 nonroot-1.5.tar -rootfs "$rootfs" -user 1234 -cmd /bin/sh

# --- busybox: upstream's source release, built here statically, every applet a link
bb=$w/busybox-$BUSYBOX_VERSION-root
if [ ! -x "$bb/bin/busybox" ]; then
  # Upstream's busybox, not Debian's build: Debian's ash carries a patch
  # (debian/patches/revert-9c143ce52...) that drops environment variables whose names are not
  # shell names ("data-1"), which the ConfigMap and Secret env tests print with 'sh -c env';
  # upstream's ash keeps them. The tarball is the .orig.tar.bz2 (upstream's, unpatched) of the
  # Debian release that has $BUSYBOX_VERSION, fetched by apt with its own checks: the suite's
  # signed InRelease, then the Sources index's hashes of each file.
  [ "$GOARCH" = "$(go env GOHOSTARCH)" ] || die "busybox is built natively: GOARCH $GOARCH is not the host's"
  log "busybox $BUSYBOX_VERSION from upstream's source ($BUSYBOX_SUITE's orig tarball)"
  read -r uri _ < <(apt_source) || die "no Debian source in the apt configuration"
  a=$w/apt-$BUSYBOX_SUITE
  mkdir -p "$a/lists-src/partial" "$a/cache/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $BUSYBOX_SUITE main" > "$a/deb-src.list"
  aptopts=(-o "Dir::Etc::SourceList=$a/deb-src.list" -o Dir::Etc::SourceParts=/nonexistent -o "Dir::State::Lists=$a/lists-src" -o "Dir::Cache=$a/cache")
  rm -rf "$w/busybox-src" "$w/busybox-build"; mkdir -p "$w/busybox-src" "$w/busybox-build"
  chown -R _apt "$a" "$w/busybox-src" 2>/dev/null || true # apt downloads as _apt where it can
  apt-get "${aptopts[@]}" update >/dev/null || die "apt-get update for $BUSYBOX_SUITE's sources failed"
  (cd "$w/busybox-src" && apt-get "${aptopts[@]}" source --download-only busybox >/dev/null) || die "apt-get source busybox ($BUSYBOX_SUITE) failed"
  orig=$w/busybox-src/busybox_$BUSYBOX_VERSION.orig.tar.bz2
  [ -s "$orig" ] || die "$BUSYBOX_SUITE's busybox source has no $(basename "$orig"): $(ls "$w/busybox-src")"
  tar -xjf "$orig" -C "$w/busybox-build"
  s=$w/busybox-build/busybox-$BUSYBOX_VERSION
  # defconfig, static (the image has no libc), without tc (it does not build against current
  # kernel headers, and no test runs it); SOURCE_DATE_EPOCH is the build date the binary
  # prints, so a rebuild gives the same bytes
  (cd "$s" && export SOURCE_DATE_EPOCH; SOURCE_DATE_EPOCH=$(date -u -d "$CREATED" +%s) &&
    make defconfig &&
    sed -i -e 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' -e 's/^CONFIG_TC=y$/# CONFIG_TC is not set/' .config &&
    make -j2 busybox) > "$w/busybox-build.log" 2>&1 || die "busybox build failed: see $w/busybox-build.log"
  grep -qx 'CONFIG_STATIC=y' "$s/.config" && grep -qx '# CONFIG_TC is not set' "$s/.config" || die "busybox .config: not static, or tc on"
  ! readelf -l "$s/busybox" | grep 'program interpreter' >/dev/null || die "busybox is not static"
  v=$("$s/busybox" 2>&1 | sed -n 1p)
  case $v in "BusyBox v$BUSYBOX_VERSION "*) ;; *) die "busybox says \"$v\", not v$BUSYBOX_VERSION" ;; esac
  r=$bb.tmp; rm -rf "$r"; mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
  install -m 0755 "$s/busybox" "$r/bin/busybox"
  for ap in $("$r/bin/busybox" --list); do [ "$ap" = busybox ] || ln -sf busybox "$r/bin/$ap"; done
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
  # the reason for building it: the image's sh passes on a variable that is not a shell name
  chroot "$r" /bin/env -i PATH=/bin data-1=x /bin/sh -c env | grep -x 'data-1=x' >/dev/null ||
    die "busybox's sh drops the environment variable data-1 (env -i data-1=x sh -c env)"
  rm -rf "$bb"; mv "$r" "$bb"
fi
image registry.k8s.io/e2e-test-images/busybox:1.37.0-1 busybox-1.37.0-1.tar -rootfs "$bb" -cmd sh
image registry.k8s.io/e2e-test-images/busybox:1.36.1-1 busybox-1.36.1-1.tar -rootfs "$bb" -cmd sh

# --- nonewprivs: nnp (it prints its effective uid) setuid root at /usr/local/bin/nnp, CMD nnp, as
# its Dockerfile (COPY, chmod +s); the allowPrivilegeEscalation tests run it as a non-root uid.
# Upstream's base is alpine; here the busybox tree, the nearest (a busybox userland).
nnp=$w/nnp-$K8S_VERSION
if [ ! -u "$nnp" ]; then
  [ -s "$tw/go.mod" ] || die "run hack/conformance/build.sh first (it writes the module $tw)"
  log "nonewprivs' nnp from k8s.io/kubernetes@$K8S_VERSION"
  (cd "$tw" && GOOS=linux GOARCH=$GOARCH go build -trimpath -ldflags "-s -w" -o "$nnp.tmp" k8s.io/kubernetes/test/images/nonewprivs) >&2
  chmod 4755 "$nnp.tmp" && mv -f "$nnp.tmp" "$nnp"
fi
image registry.k8s.io/e2e-test-images/nonewprivs:1.4 nonewprivs-1.4.tar -rootfs "$bb" -file "$nnp:/usr/local/bin/nnp" -cmd nnp

# wrapper DIR MODULE@VERSION...: a fresh module under $w (not build.sh's, which it may rewrite)
# that requires only these; go get resolves their dependencies from their own go.mod files, so
# what is built is the published modules as their go.mod files pin them
wrapper() {
  local d=$1; shift
  mkdir -p "$d"
  [ -s "$d/go.mod" ] || printf 'module hardway.invalid/conformance-images/%s\n\ngo %s\n' "$(basename "$d")" \
    "$(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')" > "$d/go.mod"
  (cd "$d" && go get "$@") >&2
}

# --- sample-apiserver: k8s.io/sample-apiserver's server from the published module of this
# Kubernetes release, at /sample-apiserver, ENTRYPOINT /sample-apiserver, as its Dockerfile (the
# aggregator test passes only flags). Upstream's base is alpine; here the busybox tree.
SAMPLE_APISERVER_VERSION=v0.${K8S_VERSION#v1.}
sa=$w/sample-apiserver-$SAMPLE_APISERVER_VERSION
if [ ! -x "$sa" ]; then
  log "sample-apiserver from k8s.io/sample-apiserver@$SAMPLE_APISERVER_VERSION"
  wrapper "$w/sample-apiserver-module" "k8s.io/sample-apiserver@$SAMPLE_APISERVER_VERSION"
  (cd "$w/sample-apiserver-module" && GOOS=linux GOARCH=$GOARCH go build -trimpath -ldflags "-s -w" -o "$sa.tmp" k8s.io/sample-apiserver) >&2
  mv -f "$sa.tmp" "$sa"
fi
image registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2 sample-apiserver-1.29.2.tar -rootfs "$bb" -file "$sa:/sample-apiserver" -entrypoint /sample-apiserver

# --- etcd: the aggregator test's second container runs /usr/local/bin/etcd. Built from source
# as hack/mirror/build.sh builds the cluster's etcd: go.etcd.io/etcd/server/v3's root package is
# the etcd main, etcdctl/v3 and etcdutl/v3 likewise; all three in /usr/local/bin as upstream's
# image has them (its migration tools left out), CMD etcd, on a distroless-like tree: passwd,
# group, /tmp.
e=$w/etcd-$ETCD_IMAGE_VERSION
if [ ! -x "$e/usr/local/bin/etcd" ]; then
  log "etcd $ETCD_IMAGE_VERSION from go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3@$ETCD_IMAGE_VERSION"
  m=$w/etcd-module
  wrapper "$m" "go.etcd.io/etcd/server/v3@$ETCD_IMAGE_VERSION" "go.etcd.io/etcd/etcdctl/v3@$ETCD_IMAGE_VERSION" "go.etcd.io/etcd/etcdutl/v3@$ETCD_IMAGE_VERSION"
  r=$e.tmp; rm -rf "$r"; mkdir -p "$r/usr/local/bin" "$r/etc" "$r/tmp"
  for b in server etcdctl etcdutl; do
    n=$b; [ "$b" = server ] && n=etcd
    (cd "$m" && GOOS=linux GOARCH=$GOARCH go build -trimpath -ldflags "-s -w" -o "$r/usr/local/bin/$n" "go.etcd.io/etcd/$b/v3") >&2
  done
  v=$("$r/usr/local/bin/etcd" --version 2>&1 | sed -n 1p)
  [ "$v" = "etcd Version: ${ETCD_IMAGE_VERSION#v}" ] || die "etcd --version says \"$v\", not ${ETCD_IMAGE_VERSION#v}"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
  rm -rf "$e"; mv "$r" "$e"
fi
image "registry.k8s.io/etcd:${ETCD_IMAGE_VERSION#v}-0" "etcd-${ETCD_IMAGE_VERSION#v}-0.tar" -rootfs "$e" -cmd /usr/local/bin/etcd

(cd "$OUT" && sha256sum -- *.tar | sed 's/ \*/  /') > "$OUT/.SHA256SUMS.tmp" && mv -f "$OUT/.SHA256SUMS.tmp" "$OUT/SHA256SUMS"
log "images in $OUT:"
cat "$OUT/SHA256SUMS" >&2
