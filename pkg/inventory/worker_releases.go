package inventory

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/platform"
)

// WorkerVersions are the versions of the components a worker runs besides
// kubelet and kube-proxy (which follow kubernetesVersion).
type WorkerVersions struct {
	Containerd string `json:"containerd"`
	Runc       string `json:"runc"`
	CNIPlugins string `json:"cniPlugins"`
	Crictl     string `json:"crictl"`
	// Traefik is the node-local apiserver load balancer (network.apiServerLoadBalancer).
	Traefik string `json:"traefik,omitempty"`
}

// workerTable is the tested worker components per Kubernetes minor. 1.36 was
// run end to end (pods, cross-node traffic, Services, logs, exec) with these
// exact versions, and 1.35 with the same ones (the upgrade test's cluster
// before and during its move to 1.36); other minors get the nearest row
// and a warning.
var workerTable = map[int]WorkerVersions{
	35: {Containerd: "v2.4.2", Runc: "v1.5.3", CNIPlugins: "v1.10.0", Crictl: "v1.37.0", Traefik: "v3.7.13"},
	36: {Containerd: "v2.4.2", Runc: "v1.5.3", CNIPlugins: "v1.10.0", Crictl: "v1.37.0", Traefik: "v3.7.13"},
}

// DefaultWorkerVersions returns the tested worker versions for a Kubernetes
// version and whether that minor has its own row (false: the nearest one).
func DefaultWorkerVersions(k8s *version.Version) (WorkerVersions, bool) {
	minor := 36
	if k8s != nil {
		if s := k8s.Segments(); len(s) >= 2 && s[0] == 1 {
			minor = s[1]
		}
	}
	if row, ok := workerTable[minor]; ok {
		return row, true
	}
	best, bestD := 0, 1<<30
	for m := range workerTable {
		d := m - minor
		if d < 0 {
			d = -d
		}
		if d < bestD || (d == bestD && m > best) {
			best, bestD = m, d
		}
	}
	return workerTable[best], false
}

// WorkerVersions are the inventory's worker component versions (defaults
// filled in by Load).
func (inv *Inventory) WorkerVersions() WorkerVersions {
	return WorkerVersions{Containerd: inv.ContainerdVersion, Runc: inv.RuncVersion, CNIPlugins: inv.CNIPluginsVersion, Crictl: inv.CrictlVersion, Traefik: inv.TraefikVersion}
}

// validateWorkerReleases fills in and checks the worker component versions,
// their mirrors and the image list.
func (l *loader) validateWorkerReleases(inv *Inventory) {
	r := &inv.Releases
	for _, m := range []struct {
		field *string
		def   string
		path  string
	}{
		{&r.Containerd, DefaultContainerdMirror, "releases.containerd"},
		{&r.Runc, DefaultRuncMirror, "releases.runc"},
		{&r.CNIPlugins, DefaultCNIPluginsMirror, "releases.cniPlugins"},
		{&r.Crictl, DefaultCrictlMirror, "releases.crictl"},
		{&r.Traefik, DefaultTraefikMirror, "releases.traefik"},
	} {
		if *m.field == "" {
			*m.field = m.def
		}
		*m.field = strings.TrimRight(*m.field, "/")
		if !isMirrorURL(*m.field) {
			l.errorf(m.path, "use an http://, https:// or file:/// URL of a mirror laid out like the official GitHub release downloads",
				"%q is not a mirror URL", *m.field)
		}
	}

	def, tested := DefaultWorkerVersions(inv.K8s)
	if !tested && inv.K8s != nil && len(inv.Workers) > 0 {
		l.warnf("kubernetesVersion", "set containerdVersion, runcVersion, cniPluginsVersion and crictlVersion to versions known to work with it",
			"the worker components are tested with Kubernetes 1.36 only; using containerd %s, runc %s, CNI plugins %s, crictl %s",
			def.Containerd, def.Runc, def.CNIPlugins, def.Crictl)
	}
	for _, v := range []struct {
		field *string
		def   string
		path  string
		what  string
	}{
		{&inv.ContainerdVersion, def.Containerd, "containerdVersion", "containerd"},
		{&inv.RuncVersion, def.Runc, "runcVersion", "runc"},
		{&inv.CNIPluginsVersion, def.CNIPlugins, "cniPluginsVersion", "CNI plugins"},
		{&inv.CrictlVersion, def.Crictl, "crictlVersion", "crictl"},
		{&inv.TraefikVersion, def.Traefik, "traefikVersion", "Traefik"},
	} {
		if *v.field == "" {
			*v.field = v.def
			continue
		}
		got, _, err := parseVersion(*v.field, false)
		if err != nil {
			l.errorf(v.path, "write an exact version such as "+v.def+", or leave it out for the tested one", "%v", err)
			continue
		}
		// The mirrors' directories are release tags: "v" + the version.
		*v.field = "v" + got.String()
		if tested && *v.field != v.def {
			l.warnf(v.path, "leave "+v.path+" out to use the tested "+v.def,
				"%s %s with Kubernetes %s is not a tested pairing", v.what, *v.field, inv.KubernetesVersion)
		}
	}

	seen := map[string]string{}
	workerArches := inv.ArchesOf(inv.Workers)
	for i, im := range inv.Images {
		p := fmt.Sprintf("images[%d]", i)
		switch ref, err := name.NewTag(im.Name, name.WeakValidation); {
		case im.Name == "":
			l.errorf(p+".name", "the name the image's tarball carries, e.g. registry.k8s.io/pause:3.10.2", "a name is required")
		case err != nil:
			l.errorf(p+".name", "write a name with a tag, e.g. registry.k8s.io/pause:3.10.2", "%q is not an image name: %v", im.Name, err)
		case !hasExplicitTag(im.Name):
			l.errorf(p+".name", "write the tag the tarball carries, e.g. "+im.Name+":v1", "%q has no tag", im.Name)
		default:
			// Once per architecture: the same name may be listed for amd64
			// and for arm64 workers, each with its own tarball.
			key := ref.Name() + " " + inv.ImageArch(im)
			if prev, dup := seen[key]; dup {
				l.errorf(p+".name", "list every image once per architecture", "%q for %s is already listed at %s", im.Name, inv.ImageArch(im), prev)
			}
			seen[key] = p
		}
		if im.Arch != "" {
			l.validateArch(p+".arch", im.Arch)
		}
		if a := inv.ImageArch(im); len(inv.Workers) > 0 && platform.Supported(a) && !slices.Contains(workerArches, a) {
			at := p + ".arch"
			if im.Arch == "" {
				at = p + ".name"
			}
			l.warnf(at, "set the image's arch: to that of the workers it is for (a tarball holds one architecture), or remove it",
				"the image is for %s and no worker is %s: it is not fetched or imported anywhere", a, a)
		}
		if im.URL == "" {
			l.errorf(p+".url", "the http(s) or file URL of the image's docker-archive tarball", "a URL is required")
		} else if !isMirrorURL(im.URL) || strings.HasSuffix(im.URL, "/") {
			l.errorf(p+".url", "use an http://, https:// or file:/// URL of a docker-archive tarball", "%q is not a file URL", im.URL)
		}
		if im.SHA256 != "" {
			h := strings.TrimPrefix(strings.ToLower(im.SHA256), "sha256:")
			if !isHexDigest(h, 64) {
				l.errorf(p+".sha256", "write the 64 hex digits of the tarball's sha256, or leave it out to use SHA256SUMS beside the URL",
					"%q is not a sha256 digest", im.SHA256)
			} else {
				inv.Images[i].SHA256 = h
			}
		}
	}
}

func isMirrorURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "file") && (u.Scheme == "file" || u.Host != "")
}

// hasExplicitTag: the part after the last '/' has a ':' (a registry's
// host:port is before it); a digest reference is not a tag.
func hasExplicitTag(s string) bool {
	last := s[strings.LastIndex(s, "/")+1:]
	return strings.Contains(last, ":") && !strings.Contains(s, "@")
}

func isHexDigest(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
