#!/usr/bin/env bash
# hack/bench-backup.sh: the backup and restore figures, side by side in one run, as root.
#
#   1. cold `hardway up` on three fresh lab hosts (warm download cache), timed
#      until `hardway verify` passes
#   2. `hardway backup` of that cluster (a namespace, a ConfigMap and a Secret
#      added), three times: time, file size, snapshot size
#   3. the lab taken down and three new hosts brought up (new host keys, empty
#      disks; timed apart), then `hardway restore --from FILE`, timed until
#      verify passes (restore runs verify itself), and the objects checked
#
# Uses its own lab (prefix hwr, 10.240.9.0/24 unless PREFIX/NET say otherwise)
# and always takes it down. KEEP=1 keeps the work directory (logs, outputs).
# Wrap it in `flock /var/tmp/hardway/lab.lock` where other labs may run.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
HW=${HW:-$top/bin/hardway}
PREFIX=${PREFIX:-hwr}
NET=${NET:-10.240.9}
VERIFY_DEADLINE=${VERIFY_DEADLINE:-900}

[ "$(id -u)" = 0 ] || { echo "bench-backup: needs root (lab hosts): sudo $0" >&2; exit 1; }
[ -x "$HW" ] || { echo "bench-backup: $HW not built: make build" >&2; exit 1; }

work=$(mktemp -d /var/tmp/hardway-bench-backup.XXXXXX)
lab_is_ours=0
cleanup() {
  local rc=$?
  if [ $lab_is_ours = 1 ]; then "$HW" lab down --prefix "$PREFIX" >/dev/null 2>&1 || echo "bench-backup: lab down --prefix $PREFIX failed" >&2; fi
  if [ $rc -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then echo "bench-backup: outputs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if "$HW" lab status --prefix "$PREFIX" -o json 2>/dev/null | grep -q '"up": true'; then
  echo "bench-backup: a lab with prefix $PREFIX is already up; take it down first (hardway lab down --prefix $PREFIX) or set PREFIX" >&2
  exit 1
fi

state=$work/state
cache=$work/cache
labdir=$work/lab
inv=$labdir/inventory.yaml
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[bench] $*" >&2; }
# The passphrase comes from the environment, as a script would give it.
export HARDWAY_BACKUP_PASSPHRASE="bench-backup $(head -c 12 /dev/urandom | base64)"

lab_up() {
  lab_is_ours=1
  "$HW" lab up --dir "$labdir" --prefix "$PREFIX" --net "$NET" >"$work/lab-up.$1.log" 2>&1 || { cat "$work/lab-up.$1.log" >&2; return 1; }
}

verify_until_pass() {
  local deadline=$(( $(date +%s) + VERIFY_DEADLINE )) n=0
  while :; do
    n=$((n + 1))
    if "$HW" verify -i "$inv" --state "$state" --cache-dir "$cache" >"$work/verify.out" 2>&1; then
      log "verify passed (run $n)"
      return 0
    fi
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "bench-backup: verify still failing after ${VERIFY_DEADLINE}s:" >&2
      grep -E '^(FAIL|WARN)' "$work/verify.out" >&2 || tail -20 "$work/verify.out" >&2
      return 1
    fi
    sleep 2
  done
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# --- 1. cold up ---------------------------------------------------------------
log "lab up ($PREFIX, $NET.0/24)"
lab_up 1
log "warm the download cache: hardway fetch"
"$HW" fetch -i "$inv" --state "$state" --cache-dir "$cache" >"$work/fetch.log" 2>&1
log "cold: hardway up (+ verify until it passes)"
t0=$(now)
"$HW" up -i "$inv" --state "$state" --cache-dir "$cache" >"$work/up.out" 2>&1 || { tail -30 "$work/up.out" >&2; exit 1; }
verify_until_pass
t1=$(now)
cold=$(secs "$t0" "$t1")
log "cold up: ${cold} s"

# --- 2. backups -----------------------------------------------------------------
# kubectl from the verified cache (a blob there is not executable: a copy is)
blob=$(jq -r '.artifacts[] | select(.name == "kubectl") | .path' < <("$HW" fetch -i "$inv" --state "$state" --cache-dir "$cache" --offline -o json 2>/dev/null))
kubectl=$work/kubectl
install -m 0755 "$blob" "$kubectl"
kc=$state/kubeconfigs/admin.kubeconfig
"$kubectl" --kubeconfig "$kc" create namespace bench >/dev/null
"$kubectl" --kubeconfig "$kc" -n bench create configmap kept --from-literal=colour=teal >/dev/null
"$kubectl" --kubeconfig "$kc" -n bench create secret generic kept --from-literal=password=bench >/dev/null
backups=()
for i in 1 2 3; do
  t0=$(now)
  "$HW" backup -i "$inv" --state "$state" --dir "$work/backups" -o json >"$work/backup.$i.json" 2>"$work/backup.$i.log" ||
    { cat "$work/backup.$i.log" >&2; exit 1; }
  t1=$(now)
  backups+=("$(secs "$t0" "$t1") s, $(jq -r '.size' "$work/backup.$i.json") bytes (snapshot $(jq -r '.snapshot.size' "$work/backup.$i.json") bytes from $(jq -r '.snapshot.member' "$work/backup.$i.json"))")
  log "backup $i: ${backups[-1]}"
done
file=$(jq -r '.path' "$work/backup.3.json")

# --- 3. new hosts, restore ---------------------------------------------------------
log "lab down; three new hosts (new host keys, empty disks)"
t0=$(now)
"$HW" lab down --prefix "$PREFIX" >/dev/null 2>&1
lab_up 2
t1=$(now)
newhosts=$(secs "$t0" "$t1")
log "restore --from $(basename "$file") (verify until it passes is part of it)"
t0=$(now)
"$HW" restore -i "$inv" --state "$state" --cache-dir "$cache" --from "$file" >"$work/restore.out" 2>&1 ||
  { tail -40 "$work/restore.out" >&2; exit 1; }
t1=$(now)
restore=$(secs "$t0" "$t1")
got=$("$kubectl" --kubeconfig "$kc" -n bench get configmap kept -o jsonpath='{.data.colour}')
[ "$got" = teal ] || { echo "bench-backup: the ConfigMap did not come back: '$got'" >&2; exit 1; }
steps=$(awk '$1 ~ /^(preflight|restore-check|restore-state|identity|pki|fetch|render|push|restore-etcd|etcd|control-plane|rbac)$/ && NF >= 3 { printf "%s%s %s", sep, $1, $NF; sep = ", " }' "$work/restore.out")

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
cat <<EOF

hardway backup / restore on three lab hosts ($(nproc) cores; load $load_start at start, $load_end at end)
  cold up, until verify passes                    ${cold} s
  backup 1                                        ${backups[0]}
  backup 2                                        ${backups[1]}
  backup 3                                        ${backups[2]}
  new hosts (lab down + lab up, not counted)      ${newhosts} s
  restore onto them, until verify passes          ${restore} s   ($(awk -v r="$restore" -v c="$cold" 'BEGIN { printf "%.2f", r / c }')x the cold up)
EOF
[ -n "$steps" ] && echo "  restore's steps: $steps"
