# hack/cis/versions.sh: the pins, sourced by build.sh and run.sh so the two cannot disagree.
# shellcheck shell=bash

# The newest kube-bench release the Go module proxy serves (v0.16.1 and v0.17.0 are not there).
KUBE_BENCH_VERSION=${KUBE_BENCH_VERSION:-v0.16.0}
# jq for the policies checks: v0.12.20 needs a go-yaml pseudo-version the proxy does not serve.
GOJQ_VERSION=${GOJQ_VERSION:-v0.12.19}
# The newest benchmark in that release: CIS Kubernetes Benchmark 1.12, which kube-bench's
# version_mapping gives Kubernetes 1.32 to 1.34; there is none for 1.35 or 1.36 yet, and kube-bench
# would step 1.36 back to 1.34's. Named, not detected: it asks kubectl for the server's version,
# a host has no kubeconfig for it, and it falls back to Kubernetes 1.18 (cis-1.6).
CIS_BENCHMARK=${CIS_BENCHMARK:-cis-1.12}
