#!/usr/bin/env bash
# hack/lab-demo.sh: what `make demo` runs. Fills the release mirror (cached), starts three lab
# controllers and two workers (or reuses the running lab), then `hardway up` and `hardway verify`
# against them, and says how to use kubectl. Steps this build of hardway does not have yet are
# reported, not faked. LAB_WORKERS=0 gives a control plane alone.
# Needs root. Undo with: bin/hardway lab down
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
HW=${HW:-$top/bin/hardway}
LAB_DIR=${LAB_DIR:-lab}
LAB_WORKERS=${LAB_WORKERS:-2}
export HARDWAY_MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}

step() { echo; echo "==> $*"; }
[ "$(id -u)" = 0 ] || { echo "make demo needs root (network namespaces, containers): sudo make demo" >&2; exit 1; }
[ -x "$HW" ] || { echo "$HW not built: make build" >&2; exit 1; }

# build.sh takes each component's official release when its download site answers (verified
# against the site's checksum files) and builds it from source only when it does not; it prints
# which path each component took.
step "release mirror (official releases when reachable, else built from source; cached): hack/mirror/build.sh"
t0=$(date +%s)
bash hack/mirror/build.sh
echo "mirror ready in $(( $(date +%s) - t0 ))s"

missing=()
# Workers need the worker components and images from the mirror; a mirror (build.sh) without
# them gets a lab without workers, reported at the end.
if [ "$LAB_WORKERS" -gt 0 ]; then
  for d in containerd runc cni-plugins crictl images/SHA256SUMS; do
    if [ ! -e "$HARDWAY_MIRROR/$d" ]; then
      echo "the mirror has no $d: starting the lab without workers"
      missing+=("worker components in the mirror ($d)"); LAB_WORKERS=0; break
    fi
  done
fi

step "lab hosts: hardway lab up --dir $LAB_DIR --workers $LAB_WORKERS"
INV=$LAB_DIR/inventory.yaml
if "$HW" lab status -o json | grep -q '"up": true'; then
  echo "the lab is already up (hardway lab down to start over):"
  "$HW" lab status
  INV=$("$HW" lab status -o json | sed -n 's/^ *"inventory": "\(.*\)",$/\1/p')
  LAB_DIR=$(dirname "$INV")
else
  "$HW" lab up --dir "$LAB_DIR" --workers "$LAB_WORKERS"
fi

# has CMD: this build of hardway has the command (a stub says "not implemented", cobra "unknown command")
has() { "$HW" "$1" --help >/dev/null 2>&1; }
# try CMD ARGS...: run a step; a missing command is recorded, a real failure stops the demo
try() {
  local out rc=0
  if ! has "$1"; then missing+=("hardway $1"); echo "(not in this build yet)"; return 0; fi
  out=$("$HW" "$@" 2>&1) || rc=$?
  echo "$out"
  if [ $rc -ne 0 ]; then
    if grep -q "not implemented" <<<"$out"; then missing+=("hardway $1"); return 0; fi
    echo "demo: 'hardway $*' failed (exit $rc)" >&2; exit $rc
  fi
}

step "control plane: hardway up -i $INV"
try up -i "$INV"
step "checks: hardway verify -i $INV"
try verify -i "$INV"

step "next"
kubectl=$HARDWAY_MIRROR/kubernetes/release/v1.36.3/bin/linux/$(go env GOARCH)/kubectl
kubeconfig=$(find "$LAB_DIR" -name 'admin*.kubeconfig' 2>/dev/null | head -1)
echo "hosts:    ssh -F $LAB_DIR/ssh_config controller-1   (workers: worker-1, ...)"
if [ -n "$kubeconfig" ]; then
  echo "kubectl:  $kubectl --kubeconfig $kubeconfig get --raw /readyz?verbose"
else
  echo "kubectl:  $kubectl (an admin kubeconfig appears under $LAB_DIR/ once 'hardway up' ran)"
fi
echo "stop:     $HW lab down"
if [ ${#missing[@]} -gt 0 ]; then
  echo
  echo "demo: not in this build yet: ${missing[*]}"
fi
