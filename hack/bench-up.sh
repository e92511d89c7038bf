#!/usr/bin/env bash
# hack/bench-up.sh: the up and verify figures (speed and scale), each with its
# goal and its ratio, measured side by side in one run, as root.
#
#   1. cold `hardway up` on three fresh lab hosts (control plane) from a warm
#      download cache, timed until `hardway verify` passes, against
#      a. the tutorial's way: a plain shell script (written to
#         WORK/baseline.sh, read it) that copies every file of `hardway
#         render`'s manifests with scp, host by host, and runs the systemctl
#         commands, on three other fresh lab hosts, timed the same way;
#      b. the floor: the bytes pushed to one host divided by the SSH stream
#         throughput measured to all three at once (OpenSSH, cat > /dev/null),
#         plus a bare apiserver's time from start to /readyz on one host;
#      c. the CPU time the whole machine spent in each of the two windows
#         (/proc/stat): the lab's hosts share this machine's cores, so that
#         time divided by the cores is a lower bound no scheduling can beat;
#   2. for each worker count in WORKERS (default "1 2 3 9"): 3 controllers and
#      that many workers, cold up until verify passes, then the medians of
#      three no-op ups and three verifies, the lab's memory per host,
#      hardway's peak RSS and the bytes it sent over its own connections
#      (against the artifact set: what crossed the operator's link).
#
# The baseline uses the same inventory, the same state directory (certificates,
# kubeconfigs, encryption config) and the same cached binaries, so the two
# control planes are byte for byte the same; the baseline is not charged for
# making certificates (hardway's cold up is: its pki step is printed apart).
# It copies each host's files with ONE scp -r (the most favourable way to do
# it by hand), so the ratio is conservative.
#
# Uses its own lab (prefix hwb, 10.240.6.0/24 unless PREFIX/NET say otherwise)
# and always takes it down. KEEP=1 keeps the work directory (logs, outputs).
# WORKERS="" skips part 2; WORKERS="2" measures 3+2 only. Part 5 (FETCH_WORKERS,
# default "2"): cold up with releases.fetchOn: hosts on 3 controllers and on
# 3 + 2, with the bytes over the operator's link (goal: at most 1.2x the
# artifact set, whatever the number of hosts).
#
# SCALE=1 (make bench-scale) measures only the scale figures: part 4 on 1, 3
# and 9 workers (WORKERS), 3+9 against 3+1, hardway's peak RSS against 100 MiB,
# the lab's memory per host and what the machine has left with the lab up; no
# 3-host cold up, floor or baseline (parts 1-3), no part 5 unless
# FETCH_WORKERS is set. WORKERS_FETCH_ON=hosts runs part 4's labs with
# releases.fetchOn: hosts (the hosts download from the lab's mirror server).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
HW=${HW:-$top/bin/hardway}
PREFIX=${PREFIX:-hwb}
NET=${NET:-10.240.6}
VERIFY_DEADLINE=${VERIFY_DEADLINE:-900} # seconds of verify retries before giving up
SCALE=${SCALE:-0}
if [ "$SCALE" = 1 ]; then WORKERS=${WORKERS-1 3 9}; else WORKERS=${WORKERS-1 2 3 9}; fi
WORKERS_FETCH_ON=${WORKERS_FETCH_ON:-}

[ "$(id -u)" = 0 ] || { echo "bench-up: needs root (lab hosts): sudo $0" >&2; exit 1; }
[ -x "$HW" ] || { echo "bench-up: $HW not built: make build" >&2; exit 1; }
bash "$top/hack/setup.sh" # /usr/bin/time (GNU time) for the peak RSS, ssh/scp

work=$(mktemp -d /var/tmp/hardway-bench-up.XXXXXX)
lab_is_ours=0
cleanup() {
  local rc=$?
  if [ $lab_is_ours = 1 ]; then "$HW" lab down --prefix "$PREFIX" >/dev/null 2>&1 || echo "bench-up: lab down --prefix $PREFIX failed" >&2; fi
  if [ $rc -ne 0 ] || [ "${KEEP:-0}" = 1 ]; then echo "bench-up: outputs kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if "$HW" lab status --prefix "$PREFIX" -o json 2>/dev/null | grep -q '"up": true'; then
  echo "bench-up: a lab with prefix $PREFIX is already up; take it down first (hardway lab down --prefix $PREFIX) or set PREFIX" >&2
  exit 1
fi

state=$work/state
cache=$work/cache
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "[bench] $*" >&2; }
# cpu_self FILE: user + system seconds of the process /usr/bin/time -v measured
cpu_self() { awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.1f", s }' "$1"; }
rss_mib() { awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
# up_sent FILE: the bytes up sent over SSH, from its summary line
# "  ssh            1.23 GB sent, 4.5 MB received"
up_sent() { awk '$1 == "ssh" && $4 == "sent," { v = $2; u = $3; m = (u == "GB") ? 1e9 : (u == "MB") ? 1e6 : (u == "kB") ? 1e3 : 1; printf "%.0f", v * m }' "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1e6 }'; }
# busy: the CPU time the whole machine has spent busy since boot, in seconds
# (/proc/stat's cpu line without idle and iowait). The lab's hosts share
# this machine's cores, so a window's difference is what the hosts, hardway
# (or the baseline's ssh and scp) and the kernel's network stack cost
# together, and that divided by the cores bounds the window's time from below.
hz=$(getconf CLK_TCK) # /proc/stat counts in these ticks per second
busy() { awk -v hz="$hz" '$1 == "cpu" { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat; }
cpu_used() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# lab_up DIR [WORKERS]: three fresh controllers (and workers); the inventory
# is DIR/inventory.yaml
lab_up() {
  lab_is_ours=1
  "$HW" lab up --dir "$1" --prefix "$PREFIX" --net "$NET" --workers "${2:-0}" >"$1.lab-up.log" 2>&1 || { cat "$1.lab-up.log" >&2; return 1; }
}
lab_down() {
  "$HW" lab down --prefix "$PREFIX" >/dev/null 2>&1
  lab_is_ours=0
}

# verify_until_pass INV NAME: verify until it passes; the last run's
# /usr/bin/time -v report is left in $work/NAME.verify.time
verify_until_pass() {
  local inv=$1 name=$2 n=0 deadline
  deadline=$(( $(date +%s) + VERIFY_DEADLINE ))
  while :; do
    n=$((n + 1))
    if /usr/bin/time -v -o "$work/$name.verify.time" \
      "$HW" verify -i "$inv" --state "$state" --cache-dir "$cache" >"$work/$name.verify.out" 2>&1; then
      log "$name: verify passed (run $n)"
      return 0
    fi
    # Say why: a control plane that needs a second look is part of the figure.
    grep -E '^FAIL' "$work/$name.verify.out" | sed "s/^/[bench] $name: verify run $n: /" >&2 || true
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "bench-up: $name: verify still failing after ${VERIFY_DEADLINE}s:" >&2
      grep -E '^(FAIL|WARN)' "$work/$name.verify.out" >&2 || tail -20 "$work/$name.verify.out" >&2
      return 1
    fi
    sleep 2
  done
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# Parts 1-3 (not with SCALE=1), left unindented to keep the diff small.
if [ "$SCALE" != 1 ]; then

# --- 1. cold hardway up from a warm cache ------------------------------------
log "lab up ($PREFIX, $NET.0/24)"
lab_up "$work/lab1"
inv=$work/lab1/inventory.yaml
log "warm the download cache: hardway fetch"
"$HW" fetch -i "$inv" --state "$state" --cache-dir "$cache" >"$work/fetch.log" 2>&1

log "cold: hardway up (+ verify until it passes)"
t0=$(now) c0=$(busy)
/usr/bin/time -v -o "$work/up.time" \
  "$HW" up -i "$inv" --state "$state" --cache-dir "$cache" >"$work/up.out" 2>&1 ||
  { tail -30 "$work/up.out" >&2; exit 1; }
t_up=$(now)
verify_until_pass "$inv" cold
t1=$(now)
cold=$(secs "$t0" "$t1")
cold_cpu=$(cpu_used "$c0" "$(busy)")
cold_up=$(secs "$t0" "$t_up")
# up's own summary: "  push  123 change(s)  20.618s" -> "push 20.618s"
steps=$(awk '$1 ~ /^(preflight|pki|fetch|render|push|etcd|control-plane|rbac)$/ && NF >= 3 { printf "%s%s %s", sep, $1, $NF; sep = ", " }' "$work/up.out")
up_rss=$(rss_mib "$work/up.time")
verify_rss=$(rss_mib "$work/cold.verify.time")

# --- 2. no-op up ---------------------------------------------------------------
log "no-op: hardway up"
t0=$(now)
"$HW" up -i "$inv" --state "$state" --cache-dir "$cache" >"$work/noop.out" 2>&1
t1=$(now)
noop=$(secs "$t0" "$t1")
grep -q "no changes" "$work/noop.out" || { echo "bench-up: the second up did not say \"no changes\":" >&2; tail -20 "$work/noop.out" >&2; exit 1; }

# What the baseline needs, from the same inventory and state: the rendered
# tree with its manifests, and the cached binaries' paths.
"$HW" render -i "$inv" --state "$state" --out "$work/rendered" >/dev/null 2>&1
"$HW" fetch -i "$inv" --state "$state" --cache-dir "$cache" -o json 2>/dev/null >"$work/fetch.json"
cp "$work/lab1/hardway.lock" "$work/hardway.lock"

# --- the floor, part 1: on the same hosts ------------------------------------
# SSH stream throughput: the largest binary to every host at once, with
# OpenSSH; each host receives it in that time.
cfg=$work/lab1/ssh_config
mapfile -t cps < <("$HW" lab status --prefix "$PREFIX" -o json | jq -r '.hosts[].name')
big=$(jq -r '[.artifacts[] | select(.install)] | max_by(.size) | .path' "$work/fetch.json")
[[ $big == /* ]] || big=$PWD/$big
big_size=$(stat -c %s "$big")
log "floor: stream $(mb "$big_size") MB to ${#cps[@]} hosts at once"
t0=$(now)
for h in "${cps[@]}"; do ssh -F "$cfg" "$h" 'cat > /dev/null' <"$big" & done
wait
t1=$(now)
stream_bps=$(awk -v n="$big_size" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
# A bare apiserver: stopped, then started against the running etcd, until
# /readyz answers ok (polled on the host with the scheduler's kubeconfig:
# /readyz is open to any authenticated user; no admin kubeconfig is there).
log "floor: kube-apiserver on ${cps[0]}: start until /readyz"
apiserver_ms=$(ssh -F "$cfg" "${cps[0]}" 'systemctl stop kube-apiserver; t0=$(date +%s%N); systemctl start kube-apiserver
  until kubectl --kubeconfig /var/lib/kubernetes/kube-scheduler.kubeconfig get --raw /readyz >/dev/null 2>&1; do
    [ $(( $(date +%s%N) - t0 )) -lt 300000000000 ] || { echo "no /readyz after 300 s" >&2; exit 1; }
    sleep 0.05
  done
  echo $(( ($(date +%s%N) - t0) / 1000000 ))')
lab_down

# --- 3. the baseline: the tutorial's way -------------------------------------
# source_of ORIGIN NAME HOST PATH: the local file behind a manifest line
source_of() {
  case $1 in
    rendered) echo "$work/rendered/$3$4" ;;
    cert) echo "$state/pki/$2.crt" ;;
    key) echo "$state/pki/$2.key" ;;
    public-key) echo "$state/pki/$2.pub" ;;
    kubeconfig) echo "$state/kubeconfigs/$2.kubeconfig" ;;
    encryption-config) echo "$state/encryption-config.yaml" ;;
    binary)
      local p
      p=$(jq -r --arg n "$2" '.artifacts[] | select(.name == $n) | .path' "$work/fetch.json")
      [[ $p == /* ]] || p=$PWD/$p # fetch names paths as given in --cache-dir
      echo "$p" ;;
    *) echo "bench-up: unknown origin '$1' in a manifest" >&2; return 1 ;;
  esac
}

# Write baseline.sh: for every host, build its tree (DIR/<host>/...) with the
# manifest's modes, scp it, then the systemctl commands of the tutorial.
hosts=()
for m in "$work"/rendered/*.manifest; do hosts+=("$(basename "$m" .manifest)"); done
b=$work/baseline.sh
{
  echo '#!/usr/bin/env bash'
  echo "# The tutorial's way: scp every file host by host, then systemctl. Generated by hack/bench-up.sh."
  echo 'set -euo pipefail'
  echo "ssh_cfg=\$1 # the lab's ssh_config"
  echo "stage=$work/stage"
  echo 'rm -rf "$stage"'
  for h in "${hosts[@]}"; do
    echo
    echo "# $h: $(grep -vc '^#' "$work/rendered/$h.manifest") entries of $h.manifest"
    echo "mkdir -p \"\$stage/$h\""
    while read -r path mode owner rest; do
      case $path in '#'* | '') continue ;; esac
      if [[ $path == */ ]]; then
        echo "install -d -m $mode \"\$stage/$h$path\""
        continue
      fi
      from=$(sed -n 's/.*from=\([^ ]*\).*/\1/p' <<<"$rest")
      name=$(sed -n 's/.*from=[^ ]* *\(.*\)$/\1/p' <<<"$rest")
      src=$(source_of "$from" "$name" "$h" "$path")
      [ -e "$src" ] || { echo "bench-up: $h: $path: no source $src" >&2; exit 1; }
      echo "install -D -m $mode -o ${owner%%:*} -g ${owner##*:} '$src' \"\$stage/$h$path\""
    done <"$work/rendered/$h.manifest"
    echo "scp -F \"\$ssh_cfg\" -q -r -p \"\$stage/$h\"/* $h:/"
  done
  echo
  echo '# "on each controller": etcd on all three at once (each waits for quorum)'
  for h in "${hosts[@]}"; do
    echo "ssh -F \"\$ssh_cfg\" $h 'systemctl daemon-reload && systemctl enable --now etcd' &"
  done
  echo 'wait'
  echo
  for h in "${hosts[@]}"; do
    echo "ssh -F \"\$ssh_cfg\" $h 'systemctl enable --now kube-apiserver kube-controller-manager kube-scheduler'"
  done
  echo
  echo '# the kubelet RBAC, from the first controller, once the apiserver answers (the tutorial copies'
  echo '# the admin kubeconfig there; hardway pushes it only with pki.adminKubeconfigOnHosts)'
  echo "scp -F \"\$ssh_cfg\" -q -p '$state/kubeconfigs/admin.kubeconfig' ${hosts[0]}:/var/lib/kubernetes/admin.kubeconfig"
  subject=$(openssl x509 -in "$state/pki/apiserver-kubelet-client.crt" -noout -subject -nameopt multiline | sed -n 's/ *commonName *= *//p')
  echo "until ssh -F \"\$ssh_cfg\" ${hosts[0]} 'kubectl --kubeconfig /var/lib/kubernetes/admin.kubeconfig apply -f -' <<'EOF'; do sleep 2; done"
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  annotations:
    rbac.authorization.kubernetes.io/autoupdate: "true"
  labels:
    kubernetes.io/bootstrapping: rbac-defaults
  name: system:kube-apiserver-to-kubelet
rules:
  - apiGroups: [""]
    resources: [nodes/proxy, nodes/stats, nodes/log, nodes/spec, nodes/metrics]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:kube-apiserver
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kube-apiserver-to-kubelet
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: $subject
EOF
  echo 'EOF'
} >"$b"
chmod 0700 "$b"

# --- the floor, part 2: bytes pushed per host (the largest host's) -----------
push_bytes=0
for h in "${hosts[@]}"; do
  n=0
  while read -r path mode owner rest; do
    case $path in '#'* | '' | */) continue ;; esac
    from=$(sed -n 's/.*from=\([^ ]*\).*/\1/p' <<<"$rest")
    name=$(sed -n 's/.*from=[^ ]* *\(.*\)$/\1/p' <<<"$rest")
    n=$((n + $(stat -L -c %s "$(source_of "$from" "$name" "$h" "$path")")))
  done <"$work/rendered/$h.manifest"
  [ "$n" -gt "$push_bytes" ] && push_bytes=$n
done
floor=$(awk -v n="$push_bytes" -v bps="$stream_bps" -v ms="$apiserver_ms" 'BEGIN { printf "%.1f", n / bps + ms / 1000 }')

log "lab up again: three fresh hosts for the baseline"
lab_up "$work/lab2"
inv2=$work/lab2/inventory.yaml
cp "$work/hardway.lock" "$work/lab2/hardway.lock"
log "baseline: $b (+ verify until it passes)"
t0=$(now) c0=$(busy)
bash "$b" "$work/lab2/ssh_config" >"$work/baseline.out" 2>&1 || { tail -30 "$work/baseline.out" >&2; exit 1; }
t_b=$(now)
verify_until_pass "$inv2" baseline
t1=$(now)
base=$(secs "$t0" "$t1")
base_cpu=$(cpu_used "$c0" "$(busy)")
base_script=$(secs "$t0" "$t_b")
lab_down
fi # parts 1-3

# --- 4. with workers: cold, no-op, verify, memory, bytes, peak RSS ---------
# The artifact set (wset): every distinct artifact the hosts install, once;
# the goal is that about this much crosses the operator's link.
declare -A wcpu wcold wnoop wverify wmem wrss wsent wset wavail
for w in $WORKERS; do
  d=$work/w$w
  log "3 controllers + $w worker(s): lab up${WORKERS_FETCH_ON:+ --fetch-on $WORKERS_FETCH_ON}"
  if [ -n "$WORKERS_FETCH_ON" ]; then
    lab_is_ours=1
    "$HW" lab up --dir "$d" --prefix "$PREFIX" --net "$NET" --workers "$w" --fetch-on "$WORKERS_FETCH_ON" >"$d.lab-up.log" 2>&1 || { cat "$d.lab-up.log" >&2; exit 1; }
  else
    lab_up "$d" "$w"
  fi
  winv=$d/inventory.yaml
  wstate=$d/.hardway
  "$HW" fetch -i "$winv" --cache-dir "$cache" -o json 2>/dev/null >"$d.fetch.json"
  wset[$w]=$(jq '[.artifacts[] | select(.install or .image != null) | .size] | add' "$d.fetch.json")
  log "3+$w: cold up (+ verify until it passes)"
  t0=$(now) c0=$(busy)
  /usr/bin/time -v -o "$d.up.time" "$HW" up -i "$winv" --cache-dir "$cache" >"$d.up.out" 2>&1 ||
    { tail -30 "$d.up.out" >&2; exit 1; }
  state=$wstate verify_until_pass "$winv" "w$w"
  wcold[$w]=$(secs "$t0" "$(now)")
  wcpu[$w]=$(cpu_used "$c0" "$(busy)")
  wrss[$w]=$(rss_mib "$d.up.time")
  wsent[$w]=$(up_sent "$d.up.out")
  n=() v=()
  for i in 1 2 3; do
    t0=$(now)
    "$HW" up -i "$winv" --cache-dir "$cache" >"$d.noop$i.out" 2>&1
    n+=("$(secs "$t0" "$(now)")")
    grep -q "no changes" "$d.noop$i.out" || { echo "bench-up: 3+$w: up $i after the cold one did not say \"no changes\":" >&2; tail -20 "$d.noop$i.out" >&2; exit 1; }
    t0=$(now)
    "$HW" verify -i "$winv" --cache-dir "$cache" >"$d.verify$i.out" 2>&1 || { tail -20 "$d.verify$i.out" >&2; exit 1; }
    v+=("$(secs "$t0" "$(now)")")
  done
  wnoop[$w]=$(median3 "${n[@]}")
  wverify[$w]=$(median3 "${v[@]}")
  wmem[$w]=$("$HW" lab status --prefix "$PREFIX" -o json | jq '[.hosts[].memoryBytes] | add / length / 1048576 | floor')
  # Does the lab fit this machine: what it has left with the cluster up.
  wavail[$w]=$(awk '/^MemAvailable:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
  lab_down
done

# --- 5. fetchOn: hosts ---------------------------------------
# The hosts download their own files from the lab's mirror server (lab up
# --fetch-on hosts: the lab serves the mirror over HTTP on its bridge address),
# each checked against hardway.lock on the host before it is installed. Cold up
# until verify passes on 3 controllers (against the baseline) and on 3 +
# FETCH_WORKERS, with the bytes up sent over SSH against the artifact set.
# FETCH_WORKERS="" skips part 5.
if [ "$SCALE" = 1 ]; then FETCH_WORKERS=${FETCH_WORKERS-}; else FETCH_WORKERS=${FETCH_WORKERS-2}; fi
declare -A fcold fsent fset fsteps fdl
if [ -n "$FETCH_WORKERS" ]; then
  for w in 0 $FETCH_WORKERS; do
    d=$work/f$w
    log "fetchOn hosts, 3 controllers + $w worker(s): lab up --fetch-on hosts"
    lab_is_ours=1
    "$HW" lab up --dir "$d" --prefix "$PREFIX" --net "$NET" --workers "$w" --fetch-on hosts >"$d.lab-up.log" 2>&1 || { cat "$d.lab-up.log" >&2; exit 1; }
    finv=$d/inventory.yaml
    # Warm the cache as part 1 does (the same bytes, now from the mirror server).
    "$HW" fetch -i "$finv" --cache-dir "$cache" -o json 2>/dev/null >"$d.fetch.json"
    fset[$w]=$(jq '[.artifacts[] | select(.install or .image != null) | .size] | add' "$d.fetch.json")
    # What an operator with an empty cache downloads once (files and whole archives).
    fdl[$w]=$(jq '[.artifacts[] | select((.member // "") == "") | .size] | add' "$d.fetch.json")
    log "fetchOn hosts, 3+$w: cold up (+ verify until it passes)"
    t0=$(now)
    "$HW" up -i "$finv" --cache-dir "$cache" >"$d.up.out" 2>&1 || { tail -30 "$d.up.out" >&2; exit 1; }
    state=$d/.hardway verify_until_pass "$finv" "f$w"
    fcold[$w]=$(secs "$t0" "$(now)")
    fsent[$w]=$(up_sent "$d.up.out")
    fsteps[$w]=$(awk '$1 ~ /^(push|etcd|control-plane|workers)$/ && NF >= 3 { printf "%s%s %s", sep, $1, $NF; sep = ", " }' "$d.up.out")
    grep -q "fetch on the host" "$d.up.out" || { echo "bench-up: fetchOn hosts: up fetched nothing on the hosts" >&2; exit 1; }
    lab_down
  done
fi

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
cold_base=$(ratio "${cold:-0}" "${base:-0}")
cold_floor=$(ratio "${cold:-0}" "${floor:-0}")

row() { printf '%-46s %10s %10s %7s %s\n' "$@"; }
echo
echo "hardway up and verify figures ($(nproc) CPUs; load average $load_start at start, $load_end at end)"
row "figure" "hardway" "goal" "ratio" "measured against"
[ "$SCALE" = 1 ] || {
row "cold up, 3 hosts, until verify passes (s)" "$cold" "≤0.5×" "$cold_base" "the tutorial's way: $base s (scp + systemctl)"
row "" "" "≤1.3×" "$cold_floor" "the floor: $floor s = $(mb "$push_bytes") MB/host at $(mb "$stream_bps") MB/s + apiserver to /readyz $(awk -v m="$apiserver_ms" 'BEGIN { printf "%.1f", m / 1000 }') s"
row "  CPU time used, whole machine (s)" "$cold_cpu" "" "$(ratio "$cold_cpu" "$base_cpu")" "hardway's own process $(cpu_self "$work/up.time") s of it; the tutorial's way: $base_cpu s; on $(nproc) cores hardway's CPU time alone takes $(awk -v c="$cold_cpu" -v n="$(nproc)" 'BEGIN { printf "%.1f", c / n }') s = $(awk -v c="$cold_cpu" -v n="$(nproc)" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", c / n / b; else print "-" }')× the tutorial's time"
row "  of which up / baseline.sh (s)" "$cold_up" "" "" "baseline.sh $base_script s; up's steps: $steps"
row "no-op up, 3 hosts (s)" "$noop" "" "" ""
}
for w in $WORKERS; do
  row "3+$w: cold up until verify passes (s)" "${wcold[$w]}" "" "" ""
  row "3+$w: CPU time used by the cold up (s)" "${wcpu[$w]}" "" "" "whole machine; on $(nproc) cores at least $(awk -v c="${wcpu[$w]}" -v n="$(nproc)" 'BEGIN { printf "%.1f", c / n }') s"
  row "3+$w: no-op up, median of 3 (s)" "${wnoop[$w]}" "$([ "$w" = 2 ] && echo '≤1 s')" "$([ "$w" = 2 ] && ratio "${wnoop[$w]}" 1)" ""
  row "3+$w: verify, median of 3 (s)" "${wverify[$w]}" "$([ "$w" = 2 ] && echo '≤1 s')" "$([ "$w" = 2 ] && ratio "${wverify[$w]}" 1)" ""
  row "3+$w: lab memory per host (MiB)" "${wmem[$w]}" "" "" "$(nproc) CPUs and $(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo) GiB here; ${wavail[$w]} GiB still available with the lab up"
  row "3+$w: bytes sent by up over SSH (MB)" "$(mb "${wsent[$w]:-0}")" "≤1.2×" "$(ratio "${wsent[$w]:-0}" "${wset[$w]}")" "the artifact set: $(mb "${wset[$w]}") MB"
  row "3+$w: hardway up's peak RSS (MiB)" "${wrss[$w]}" "$([ "$w" = 9 ] && echo '≤100')" "$([ "$w" = 9 ] && ratio "${wrss[$w]}" 100)" ""
done
if [[ " $WORKERS " == *" 9 "* && " $WORKERS " == *" 1 "* ]]; then
  row "cold up 3+9 vs 3+1" "${wcold[9]}" "≤1.5×" "$(ratio "${wcold[9]}" "${wcold[1]}")" "3+1: ${wcold[1]} s"
  row "  CPU time used, 3+9 vs 3+1 (s)" "${wcpu[9]}" "" "$(ratio "${wcpu[9]}" "${wcpu[1]}")" "3+1: ${wcpu[1]} s (the lab's hosts share $(nproc) cores)"
  row "no-op up 3+9 (s)" "${wnoop[9]}" "≤1.5 s" "$(ratio "${wnoop[9]}" 1.5)" ""
fi
for w in ${FETCH_WORKERS:+0 $FETCH_WORKERS}; do
  name="3 hosts"
  [ "$w" = 0 ] || name="3+$w"
  row "fetchOn hosts, $name: cold up until verify (s)" "${fcold[$w]}" "$([ "$w" = 0 ] && echo '≤0.5×')" "$([ "$w" = 0 ] && ratio "${fcold[$w]}" "${base:-0}")" "$([ "$w" = 0 ] && echo "the tutorial's way: ${base:-not measured} s; ")up's steps: ${fsteps[$w]}"
  row "fetchOn hosts, $name: bytes sent by up (MB)" "$(awk -v b="${fsent[$w]:-0}" 'BEGIN { printf "%.2f", b / 1e6 }')" "≤1.2×" "$(awk -v a="${fsent[$w]:-0}" -v b="${fset[$w]}" 'BEGIN { printf "%.4f", a / b }')" "over the operator's link; the artifact set: $(mb "${fset[$w]}") MB"
  row "fetchOn hosts, $name: + a cold cache (MB)" "$(mb $((fdl[$w] + ${fsent[$w]:-0})))" "≤1.2×" "$(ratio $((fdl[$w] + ${fsent[$w]:-0})) "${fset[$w]}")" "the operator's own download of the set once (archives compressed) plus the above"
done
[ "$SCALE" = 1 ] || echo "peak RSS (MiB), 3 hosts: up $up_rss, verify $verify_rss"
[ "$SCALE" = 1 ] || echo "(the baseline gets hardway's certificates and rendered files for free; KEEP=1 keeps the script it ran: WORK/baseline.sh)"
