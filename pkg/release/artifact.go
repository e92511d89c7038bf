package release

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
)

// Checksum kinds: where the published digest of an artifact comes from.
const (
	sumSidecarSHA512 = "sha512-sidecar" // <url>.sha512 holds the hex digest ("<hex>  <file>" tolerated)
	sumSidecarSHA256 = "sha256-sidecar" // <url>.sha256 or .sha256sum: "<hex>" or "<hex>  <file>"
	sumSHA256SUMS    = "SHA256SUMS"     // "<hex>  <file>" lines in a file beside the artifact
	sumInline        = "inline"         // a sha256 written in the inventory
	sumMember        = "member"         // extracted from a verified archive; no published digest
)

// Names of the Kubernetes binaries hardway installs.
var (
	controlPlaneBinaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
	workerBinaries       = []string{"kubelet", "kube-proxy"}
	// EtcdBinaries are the only files taken out of the etcd tarball.
	EtcdBinaries = []string{"etcd", "etcdctl", "etcdutl"}
	// ContainerdBinaries are the only files taken out of the containerd
	// tarball (under bin/); containerd-stress and the rest stay in it.
	ContainerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}
	// CNIPlugins are the plugins taken out of the CNI tarball; each is in
	// the set as "cni-<plugin>" and belongs in /opt/cni/bin/<plugin>.
	CNIPlugins = []string{"bridge", "host-local", "loopback", "portmap"}
)

// TraefikBinary is the set name of Traefik, the only file taken out of its
// release tarball.
const TraefikBinary = "traefik"

// ImagePrefix starts the set name of an image: "image:registry.k8s.io/pause:3.10.2".
const ImagePrefix = "image:"

// CNIPrefix starts the set name of a CNI plugin: "cni-bridge".
const CNIPrefix = "cni-"

// spec is one thing to obtain, before anything is known about its bytes.
type spec struct {
	Name    string // lock key with Arch: "kube-apiserver", "etcd-v3.6.16-linux-amd64.tar.gz", "etcd"
	Version string // tag, "v1.36.3"
	Arch    string
	URL     string
	SumURL  string // where the published digest is; "" for members and inline sums
	SumKind string
	Sum     string // sumInline: the hex sha256
	Archive string // for members: the lock name of the tarball they come from (same Arch)
	Member  string // for members: the path inside the tarball
	Install bool   // a binary pushed to /usr/local/bin/<Name>
	Image   string // an image's name, checked against its tarball
	Field   string // the inventory field that chose the mirror, for hints: "releases.etcd"
	Label   string // how progress lines name it: Name, with the arch when the set has several
}

// key is what tells two artifacts apart in a set: name and arch.
func key(arch, name string) string { return arch + "/" + name }

// archesOf are the architectures o's hosts use: the control plane's, and
// with workers theirs, sorted, each once. Empty lists mean o.Arch.
func (o Options) archesOf() (cp, workers, all []string) {
	cp, workers = o.ControlPlaneArches, o.WorkerArches
	if len(cp) == 0 {
		cp = []string{o.Arch}
	}
	if len(workers) == 0 {
		workers = []string{o.Arch}
	}
	if !o.Workers {
		workers = nil
	}
	for _, a := range append(slices.Clone(cp), workers...) {
		if !slices.Contains(all, a) {
			all = append(all, a)
		}
	}
	slices.Sort(all)
	return cp, workers, all
}

// imageArch is the architecture an image of the options is for.
func (o Options) imageArch(im inventory.Image) string {
	if im.Arch != "" {
		return im.Arch
	}
	return o.Arch
}

// plan lists the artifacts for the resolved versions, one architecture
// after the other (sorted): for each, the control-plane binaries and etcd
// when a control-plane host has it, kubelet, kube-proxy and the worker
// components and images when a worker has it; within one, archives before
// the members extracted from them, otherwise sorted by name. An
// architecture only workers use gets no etcd or apiserver.
func plan(o Options, k8sTag, etcdTag string) []spec {
	cpArches, workerArches, all := o.archesOf()
	var out []spec
	for _, arch := range all {
		cp, wk := slices.Contains(cpArches, arch), slices.Contains(workerArches, arch)
		var bins []string
		if cp {
			bins = append(bins, controlPlaneBinaries...)
		}
		if wk {
			bins = append(bins, workerBinaries...)
		}
		sort.Strings(bins)
		for _, b := range bins {
			u := fmt.Sprintf("%s/release/%s/bin/linux/%s/%s", o.KubernetesMirror, k8sTag, arch, b)
			out = append(out, spec{Name: b, Version: k8sTag, Arch: arch, URL: u, SumURL: u + ".sha512", SumKind: sumSidecarSHA512,
				Install: true, Field: "releases.kubernetes"})
		}
		if cp {
			tarName := fmt.Sprintf("etcd-%s-linux-%s.tar.gz", etcdTag, arch)
			tarURL := fmt.Sprintf("%s/%s/%s", o.EtcdMirror, etcdTag, tarName)
			out = append(out, spec{Name: tarName, Version: etcdTag, Arch: arch, URL: tarURL,
				SumURL: fmt.Sprintf("%s/%s/SHA256SUMS", o.EtcdMirror, etcdTag), SumKind: sumSHA256SUMS, Field: "releases.etcd"})
			top := fmt.Sprintf("etcd-%s-linux-%s", etcdTag, arch)
			for _, b := range EtcdBinaries {
				out = append(out, spec{Name: b, Version: etcdTag, Arch: arch, URL: tarURL, SumKind: sumMember,
					Archive: tarName, Member: path.Join(top, b), Install: true, Field: "releases.etcd"})
			}
		}
		if wk {
			out = append(out, workerPlan(o, arch)...)
		}
	}
	for i := range out {
		out[i].Label = out[i].Name
		if len(all) > 1 {
			out[i].Label += " (" + out[i].Arch + ")"
		}
	}
	return out
}

// workerPlan lists what a worker needs besides kubelet and kube-proxy, from
// the official GitHub release layouts, each with its published checksum:
//
//	containerd  <base>/v2.4.2/containerd-2.4.2-linux-amd64.tar.gz  + .sha256sum  (bin/containerd, ...)
//	runc        <base>/v1.5.3/runc.amd64                           + runc.sha256sum
//	CNI         <base>/v1.10.0/cni-plugins-linux-amd64-v1.10.0.tgz + .sha512     (./bridge, ...)
//	crictl      <base>/v1.37.0/crictl-v1.37.0-linux-amd64.tar.gz   + .sha256     (crictl)
//	Traefik     <base>/v3.7.13/traefik_v3.7.13_linux_amd64.tar.gz  + traefik_v3.7.13_checksums.txt (traefik)
//
// (Traefik only with the node-local apiserver load balancer) and the
// inventory's images for arch, verified against their sha256 or the
// SHA256SUMS beside them.
func workerPlan(o Options, arch string) []spec {
	w := o.WorkerVersions
	var out []spec
	archive := func(field, name, version, base string, sumExt, kind string, members map[string]string, install bool) {
		u := fmt.Sprintf("%s/%s/%s", base, version, name)
		out = append(out, spec{Name: name, Version: version, Arch: arch, URL: u, SumURL: u + sumExt, SumKind: kind, Field: field})
		keys := make([]string, 0, len(members))
		for k := range members {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, spec{Name: k, Version: version, Arch: arch, URL: u, SumKind: sumMember,
				Archive: name, Member: members[k], Install: install, Field: field})
		}
	}
	ctrd := map[string]string{}
	for _, b := range ContainerdBinaries {
		ctrd[b] = "bin/" + b
	}
	archive("releases.containerd", fmt.Sprintf("containerd-%s-linux-%s.tar.gz", strings.TrimPrefix(w.Containerd, "v"), arch),
		w.Containerd, o.ContainerdMirror, ".sha256sum", sumSidecarSHA256, ctrd, true)

	runcURL := fmt.Sprintf("%s/%s/runc.%s", o.RuncMirror, w.Runc, arch)
	out = append(out, spec{Name: "runc", Version: w.Runc, Arch: arch, URL: runcURL,
		SumURL: fmt.Sprintf("%s/%s/runc.sha256sum", o.RuncMirror, w.Runc), SumKind: sumSHA256SUMS, Install: true, Field: "releases.runc"})

	cni := map[string]string{}
	for _, p := range CNIPlugins {
		cni[CNIPrefix+p] = p
	}
	archive("releases.cniPlugins", fmt.Sprintf("cni-plugins-linux-%s-%s.tgz", arch, w.CNIPlugins),
		w.CNIPlugins, o.CNIPluginsMirror, ".sha512", sumSidecarSHA512, cni, false)

	archive("releases.crictl", fmt.Sprintf("crictl-%s-linux-%s.tar.gz", w.Crictl, arch),
		w.Crictl, o.CrictlMirror, ".sha256", sumSidecarSHA256, map[string]string{"crictl": "crictl"}, true)

	if o.APIServerLB {
		// Traefik publishes one checksums file per release (goreleaser's
		// "<hex>  <file>" lines), not a sidecar per file.
		name := fmt.Sprintf("traefik_%s_linux_%s.tar.gz", w.Traefik, arch)
		u := fmt.Sprintf("%s/%s/%s", o.TraefikMirror, w.Traefik, name)
		out = append(out,
			spec{Name: name, Version: w.Traefik, Arch: arch, URL: u,
				SumURL: fmt.Sprintf("%s/%s/traefik_%s_checksums.txt", o.TraefikMirror, w.Traefik, w.Traefik), SumKind: sumSHA256SUMS, Field: "releases.traefik"},
			spec{Name: TraefikBinary, Version: w.Traefik, Arch: arch, URL: u, SumKind: sumMember,
				Archive: name, Member: TraefikBinary, Install: true, Field: "releases.traefik"})
	}

	for _, im := range o.Images {
		if o.imageArch(im) != arch {
			continue // for the workers of another architecture
		}
		s := spec{Name: ImagePrefix + im.Name, Version: imageTag(im.Name), Arch: arch, URL: im.URL, Image: im.Name, Field: "images"}
		if im.SHA256 != "" {
			s.SumKind, s.Sum = sumInline, strings.ToLower(im.SHA256)
		} else {
			s.SumKind, s.SumURL = sumSHA256SUMS, im.URL[:strings.LastIndex(im.URL, "/")+1]+"SHA256SUMS"
		}
		out = append(out, s)
	}
	return out
}

// imageTag is the tag of an image name: "3.10.2" for registry.k8s.io/pause:3.10.2.
func imageTag(name string) string {
	last := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return ""
}
