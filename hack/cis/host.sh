#!/bin/sh
# hack/cis/host.sh DIR: runs on a host, as root, from the bundle run.sh unpacked into DIR; prints
# kube-bench's JSON on stdout, everything else on stderr. The targets follow the units hardway
# installed: a control-plane host has kube-apiserver.service, a worker kubelet.service. The
# benchmark follows the Kubernetes minor of the host's own binary: DIR/benchmarks has one
# "MINOR BENCHMARK" line per minor, oldest first; a newer minor gets the last (the newest there is).
set -eu
d=$1
units=/etc/systemd/system

bin=
for b in /usr/local/bin/kube-apiserver /usr/local/bin/kubelet; do [ -x "$b" ] && bin=$b && break; done
[ -n "$bin" ] || { echo "cis: no /usr/local/bin/kube-apiserver or kubelet: not a host hardway set up" >&2; exit 3; }
minor=$("$bin" --version | sed -n 's/^Kubernetes v\([0-9]*\.[0-9]*\)\..*/\1/p')
[ -n "$minor" ] || { echo "cis: $bin --version: no Kubernetes version" >&2; exit 3; }
benchmark=$(awk -v m="$minor" '
  function v(s, a) { split(s, a, "."); return a[1] * 1000 + a[2] }
  v($1) <= v(m) { b = $2 } END { print b }' "$d/benchmarks")
[ -n "$benchmark" ] || { echo "cis: Kubernetes $minor is older than every benchmark in $d/benchmarks" >&2; exit 3; }

targets=
if [ -e "$units/kube-apiserver.service" ]; then targets=master,etcd,controlplane,policies; fi
if [ -e "$units/kubelet.service" ]; then targets=${targets:+$targets,}node; fi
if [ -z "$targets" ]; then
  echo "cis: neither kube-apiserver.service nor kubelet.service in $units: not a host hardway set up" >&2
  exit 3
fi

# The policies checks ask the API (kubectl, as system:masters) about RBAC, service accounts and pods.
case $targets in *policies*)
  if [ -s "$d/admin.kubeconfig" ]; then
    KUBECONFIG=$d/admin.kubeconfig
  elif [ -s /var/lib/kubernetes/admin.kubeconfig ]; then
    KUBECONFIG=/var/lib/kubernetes/admin.kubeconfig # pki.adminKubeconfigOnHosts
  elif [ ! -s "${HOME:-/root}/.kube/config" ]; then
    echo "cis: no admin kubeconfig (run.sh -k FILE): the policies checks cannot reach the API" >&2
  fi
  [ -z "${KUBECONFIG:-}" ] || export KUBECONFIG;;
esac

echo "cis: kube-bench $("$d/kube-bench" version) $benchmark (Kubernetes $minor) --targets $targets" >&2
cd "$d"
# jq (gojq) first in PATH; stdin closed: it is the rest of the bundle's tar stream.
PATH="$d/bin:$PATH" "$d/kube-bench" run --config-dir "$d/cfg" --config "$d/cfg/config.yaml" \
  --benchmark "$benchmark" --targets "$targets" --json --outputfile "$d/results.json" </dev/null >&2
cat "$d/results.json"
