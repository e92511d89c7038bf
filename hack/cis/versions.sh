# hack/cis/versions.sh: the pins, sourced by build.sh and run.sh so the two cannot disagree.
# shellcheck shell=bash

# The newest kube-bench release the Go module proxy serves (v0.16.1 and v0.17.0 are not there).
KUBE_BENCH_VERSION=${KUBE_BENCH_VERSION:-v0.16.0}
# jq for the policies checks: v0.12.20 needs a go-yaml pseudo-version the proxy does not serve.
GOJQ_VERSION=${GOJQ_VERSION:-v0.12.19}
# The benchmark for each Kubernetes minor hardway runs, as kube-bench's version_mapping has them
# (1.30 and 1.31: CIS 1.11; 1.32 to 1.34: CIS 1.12). A newer minor gets the last one, the newest
# there is (as kube-bench would step 1.36 back to 1.34's). Chosen on each host from its own
# kube-apiserver or kubelet --version (host.sh), not detected by kube-bench: that asks kubectl for
# the server's version, a worker has no kubeconfig for it, and it falls back to 1.18 (cis-1.6).
CIS_BENCHMARKS=${CIS_BENCHMARKS:-"1.30=cis-1.11 1.31=cis-1.11 1.32=cis-1.12 1.33=cis-1.12 1.34=cis-1.12"}
