#!/usr/bin/env bash
# hack/setup.sh: install every tool the tests and the demo need, idempotently.
# Debian packages come from the machine's own apt configuration; Go tools through
# the Go module proxy that `go env GOPROXY` names. Safe to run again and again:
# it installs only what is missing.
set -euo pipefail

# command -> Debian package that provides it
declare -A pkgs=(
  [sshd]=openssh-server            # real sshd for pkg/remote tests
  [ssh]=openssh-client             # ssh/scp/ssh-keygen: baselines and known_hosts
  [/usr/lib/openssh/sftp-server]=openssh-sftp-server
  [openssl]=openssl                # `openssl verify` of every issued certificate
  [systemd-analyze]=systemd        # `systemd-analyze verify` of rendered units
  [debootstrap]=debootstrap        # the lab's Debian rootfs
  [dpkg-scanpackages]=dpkg-dev     # the lab hosts' local apt index of the base's packages
  [systemd-nspawn]=systemd-container  # the lab's hosts
  [ip]=iproute2                    # the lab's netns, veth and bridge
  [curl]=curl                      # download baseline in the release benchmark
  [sha512sum]=coreutils
  [tar]=tar
  [sudo]=sudo                      # pkg/remote tests: sudo -n for a non-root user
  [/usr/bin/time]=time            # GNU time -v: peak RSS in hack/bench-up.sh
  [gcc]=gcc                        # hack/mirror: runc (cgo) and the pause binary
  [/usr/lib/$(uname -m)-linux-gnu/libc.a]=libc6-dev  # static links of runc and pause
  [/usr/include/seccomp.h]=libseccomp-dev       # runc's seccomp support, linked statically
  [patch]=patch                    # hack/mirror: the lab's Traefik (traefik-*-lab.patch)
)
need=()
for cmd in "${!pkgs[@]}"; do
  if [[ $cmd == /* ]]; then [ -e "$cmd" ] && continue
  else command -v "$cmd" >/dev/null 2>&1 && continue
  fi
  need+=("${pkgs[$cmd]}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing packages ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Go tools, pinned, into ./bin so nothing outside the checkout changes.
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/bin"
STATICCHECK_VERSION=v0.7.0
if [ ! -x "$top/bin/staticcheck" ] || ! "$top/bin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "setup: installing staticcheck $STATICCHECK_VERSION"
  GOBIN="$top/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
