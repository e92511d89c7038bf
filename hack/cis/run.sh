#!/usr/bin/env bash
# hack/cis/run.sh: run the CIS Kubernetes Benchmark's checks (kube-bench, from hack/cis/build.sh)
# on hosts hardway set up, over ssh, and keep what each says:
#
#   <results>/<host>.json    kube-bench run --json
#   <results>/<host>.log     its stderr (the targets, kube-bench's own warnings)
#   <results>/summary.txt    one line per host: PASS / FAIL / WARN / INFO per section, and in total
#   <results>/fail.txt       one line per failed check: host, check, scored or not, its text
#
# Each host gets a bundle in a temporary directory, removed when the run ends: kube-bench, jq
# (gojq), hardway's config (hack/cis/config.yaml) and hardway-cis-1.11 and -1.12, the benchmarks
# with the audits that name kubeadm's files pointed at hardway's (hack/cis/benchmark); host.sh
# picks the one for the host's Kubernetes minor (versions.sh, CIS_BENCHMARKS). Control-plane
# hosts run --targets master,etcd,controlplane,policies, workers --targets node (host.sh says
# which from the units). Nothing on a host is changed.
#
# usage: hack/cis/run.sh -F SSH_CONFIG [-o RESULTS] [-k ADMIN_KUBECONFIG] HOST...
#        hack/cis/run.sh -n            (only assemble the bundle and print where it is)
#   -F  the ssh_config to reach the hosts with (a lab's: <labdir>/ssh_config); they log in as root
#   -o  where the results go (default $HARDWAY_CIS_RESULTS or /var/tmp/hardway/cis-results/<time>)
#   -k  a kubeconfig for the policies checks (the state directory's kubeconfigs/admin.kubeconfig),
#       copied into the bundle (0600) on control-plane hosts only; without it they use the host's
#       /var/lib/kubernetes/admin.kubeconfig (pki.adminKubeconfigOnHosts), if there is one
#
# This is a development tool, not part of hardway.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
# shellcheck source=hack/cis/versions.sh
. "$HERE/versions.sh"
GOOS=linux
GOARCH=${GOARCH:-$(go env GOARCH)}
MIRROR=${HARDWAY_MIRROR:-/var/tmp/hardway/mirror}
KB=$MIRROR/kube-bench/$KUBE_BENCH_VERSION/$GOOS/$GOARCH
JQ=$MIRROR/gojq/$GOJQ_VERSION/$GOOS/$GOARCH

log() { echo "[cis $(date +%T)] $*" >&2; }
die() { echo "cis: $*" >&2; exit 1; }
usage() { sed -n 's/^# \{0,1\}//; /^usage:/,/^$/p' "$0" >&2; exit 2; }

ssh_config='' results=${HARDWAY_CIS_RESULTS:-} kubeconfig='' only_bundle=''
while getopts F:o:k:nh opt; do
  case $opt in
    F) ssh_config=$OPTARG ;;
    o) results=$OPTARG ;;
    k) kubeconfig=$OPTARG ;;
    n) only_bundle=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ -z "$only_bundle" ]; then
  { [ $# -gt 0 ] && [ -n "$ssh_config" ]; } || usage
  [ -s "$ssh_config" ] || die "no ssh config $ssh_config"
fi
[ -z "$kubeconfig" ] || [ -s "$kubeconfig" ] || die "no kubeconfig $kubeconfig"

check() { # dir file
  { [ -s "$1/$2.sha256" ] && [ "$(sha256sum "$1/$2" | cut -d' ' -f1)" = "$(cat "$1/$2.sha256")" ]; } ||
    die "$1/$2 is missing or does not match its digest: run make cis-build"
}
check "$KB" kube-bench
check "$JQ" gojq
(cd "$KB" && sha256sum -c --quiet --strict cfg.sha256sums >/dev/null 2>&1) || die "$KB/cfg does not match cfg.sha256sums: run make cis-build"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bundle=$tmp/bundle
mkdir -p "$bundle/bin" "$bundle/cfg"
install -m 0755 "$KB/kube-bench" "$bundle/kube-bench"
install -m 0755 "$JQ/gojq" "$bundle/bin/jq"
install -m 0755 "$HERE/host.sh" "$bundle/host.sh"
install -m 0644 "$HERE/config.yaml" "$bundle/cfg/config.yaml"
# The release's benchmark with hack/cis/benchmark's edits: the audits that name kubeadm's files
# (/etc/kubernetes/admin.conf, /etc/kubernetes/pki/) pointed at hardway's, 1.1.13/1.1.14 passing on
# a host without an admin kubeconfig, and 1.4.1 reading the scheduler's config file, whose
# enableProfiling is what counts under --config. A release whose text differs stops the run.
# host.sh picks one by the host's Kubernetes minor from the bundle's benchmarks file.
(cd "$TOP" && go build -o "$tmp/benchmark" ./hack/cis/benchmark)
for m in $CIS_BENCHMARKS; do
  b=${m#*=}
  [ -d "$bundle/cfg/hardway-$b" ] || "$tmp/benchmark" "$KB/cfg/$b" "$bundle/cfg/hardway-$b"
  echo "${m%%=*} hardway-$b" >> "$bundle/benchmarks"
done
if [ -n "$only_bundle" ]; then
  trap - EXIT
  echo "$bundle"
  exit 0
fi

results=${results:-/var/tmp/hardway/cis-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$results"
if [ -n "$kubeconfig" ]; then
  mkdir -p "$tmp/with-kubeconfig"
  cp -R "$bundle/." "$tmp/with-kubeconfig/"
  install -m 0600 "$kubeconfig" "$tmp/with-kubeconfig/admin.kubeconfig"
fi

# One ssh per host: the bundle goes in on stdin, the JSON comes back on stdout; the remote trap
# removes the directory however the run ends.
# shellcheck disable=SC2016 # expanded on the host
remote='d=$(mktemp -d /tmp/hardway-cis.XXXXXX) && trap '\''rm -rf "$d"'\'' EXIT && tar -C "$d" -xf - && sh "$d/host.sh" "$d"'
failed=()
for h in "$@"; do
  src=$bundle
  # Only a control-plane host runs the policies checks: a worker never gets the admin kubeconfig.
  if [ -n "$kubeconfig" ] && ssh -F "$ssh_config" -n "$h" test -e /etc/systemd/system/kube-apiserver.service; then
    src=$tmp/with-kubeconfig
  fi
  log "$h: kube-bench $KUBE_BENCH_VERSION"
  if tar --owner=0 --group=0 -C "$src" -cf - . | ssh -F "$ssh_config" "$h" "$remote" >"$results/$h.json.tmp" 2>"$results/$h.log" &&
     [ -s "$results/$h.json.tmp" ]; then
    mv -f "$results/$h.json.tmp" "$results/$h.json"
  else
    log "$h: failed; its stderr:"; sed 's/^/  /' "$results/$h.log" >&2
    rm -f "$results/$h.json.tmp"
    failed+=("$h")
  fi
done

jsons=()
for h in "$@"; do [ ! -s "$results/$h.json" ] || jsons+=("$results/$h.json"); done
if [ ${#jsons[@]} -gt 0 ]; then
  (cd "$TOP" && go build -o "$tmp/summary" ./hack/cis/summary)
  "$tmp/summary" "${jsons[@]}" | tee "$results/summary.txt"
  "$tmp/summary" -fail "${jsons[@]}" > "$results/fail.txt"
fi
log "results in $results"
[ ${#failed[@]} -eq 0 ] || die "no results from: ${failed[*]}"
