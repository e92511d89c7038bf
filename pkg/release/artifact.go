package release

import (
	"fmt"
	"path"
	"sort"
)

// Checksum kinds: where the published digest of an artifact comes from.
const (
	sumSidecarSHA512 = "sha512-sidecar" // <url>.sha512 holds the hex digest only
	sumSHA256SUMS    = "SHA256SUMS"     // "<hex>  <file>" lines in SHA256SUMS beside the file
	sumMember        = "member"         // extracted from a verified archive; no published digest
)

// Names of the Kubernetes binaries hardway installs.
var (
	controlPlaneBinaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
	workerBinaries       = []string{"kubelet", "kube-proxy"}
	// EtcdBinaries are the only files taken out of the etcd tarball.
	EtcdBinaries = []string{"etcd", "etcdctl", "etcdutl"}
)

// spec is one thing to obtain, before anything is known about its bytes.
type spec struct {
	Name    string // lock key: "kube-apiserver", "etcd-v3.6.16-linux-amd64.tar.gz", "etcd"
	Version string // tag, "v1.36.3"
	Arch    string
	URL     string
	SumURL  string // where the published digest is; "" for members
	SumKind string
	Archive string // for members: the lock name of the tarball they come from
	Member  string // for members: the path inside the tarball
	Install bool   // a binary pushed to /usr/local/bin/<Name>
}

// plan lists the artifacts for the resolved versions, archives before the
// members extracted from them, otherwise sorted by name.
func plan(k8sMirror, etcdMirror, k8sTag, etcdTag, arch string, workers bool) []spec {
	bins := append([]string{}, controlPlaneBinaries...)
	if workers {
		bins = append(bins, workerBinaries...)
	}
	sort.Strings(bins)
	var out []spec
	for _, b := range bins {
		u := fmt.Sprintf("%s/release/%s/bin/linux/%s/%s", k8sMirror, k8sTag, arch, b)
		out = append(out, spec{Name: b, Version: k8sTag, Arch: arch, URL: u, SumURL: u + ".sha512", SumKind: sumSidecarSHA512, Install: true})
	}
	tarName := fmt.Sprintf("etcd-%s-linux-%s.tar.gz", etcdTag, arch)
	tarURL := fmt.Sprintf("%s/%s/%s", etcdMirror, etcdTag, tarName)
	out = append(out, spec{Name: tarName, Version: etcdTag, Arch: arch, URL: tarURL,
		SumURL: fmt.Sprintf("%s/%s/SHA256SUMS", etcdMirror, etcdTag), SumKind: sumSHA256SUMS})
	top := fmt.Sprintf("etcd-%s-linux-%s", etcdTag, arch)
	for _, b := range EtcdBinaries {
		out = append(out, spec{Name: b, Version: etcdTag, Arch: arch, URL: tarURL, SumKind: sumMember,
			Archive: tarName, Member: path.Join(top, b), Install: true})
	}
	return out
}
