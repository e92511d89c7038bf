package release

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/platform"
)

// The images hack/mirror/build.sh makes, by the names a worker's containerd
// knows them.
var realImages = map[string]string{
	"registry.k8s.io/pause:3.10.2":            "pause-3.10.2.tar",
	"registry.k8s.io/coredns/coredns:v1.14.7": "coredns-v1.14.7.tar",
	"hardway.local/hello:v1":                  "hello-v1.tar",
}

// TestRealMirror resolves the whole worker set from the mirror
// hack/mirror/build.sh lays out: the real binaries, their real checksum
// files, the real image tarballs. It runs the verified binaries' --version
// to prove each is what its name says. Skipped without the mirror unless
// HARDWAY_MIRROR is set (as `make test` does).
func TestRealMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("reads ~500 MB")
	}
	root := mirrortest.Dir()
	w, _ := inventory.DefaultWorkerVersions(nil)
	arch := runtime.GOARCH
	need := []string{
		"kubernetes/release/" + mirrortest.Kubernetes + "/bin/linux/" + arch + "/kubelet.sha512",
		"etcd/" + mirrortest.Etcd + "/SHA256SUMS",
		"containerd/" + w.Containerd + "/containerd-" + strings.TrimPrefix(w.Containerd, "v") + "-linux-" + arch + ".tar.gz.sha256sum",
		"runc/" + w.Runc + "/runc.sha256sum",
		"cni-plugins/" + w.CNIPlugins + "/cni-plugins-linux-" + arch + "-" + w.CNIPlugins + ".tgz.sha512",
		"crictl/" + w.Crictl + "/crictl-" + w.Crictl + "-linux-" + arch + ".tar.gz.sha256",
		"traefik/" + w.Traefik + "/traefik_" + w.Traefik + "_checksums.txt",
		"images/SHA256SUMS",
	}
	for _, p := range need {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			msg := "the release mirror lacks " + p + ": build it with 'make mirror' (hack/mirror/build.sh)"
			if os.Getenv("HARDWAY_MIRROR") == "" {
				t.Skip(msg)
			}
			t.Fatal(msg)
		}
	}
	u := "file://" + root
	dir := t.TempDir()
	o := Options{
		Kubernetes: mirrortest.Kubernetes, Etcd: mirrortest.Etcd, Arch: arch, Workers: true, APIServerLB: true,
		KubernetesMirror: u + "/kubernetes", EtcdMirror: u + "/etcd",
		ContainerdMirror: u + "/containerd", RuncMirror: u + "/runc", CNIPluginsMirror: u + "/cni-plugins", CrictlMirror: u + "/crictl",
		TraefikMirror: u + "/traefik",
		LockPath:      filepath.Join(dir, LockFileName), CacheDir: filepath.Join(dir, "cache"),
	}
	for n, f := range realImages {
		o.Images = append(o.Images, inventory.Image{Name: n, URL: u + "/images/" + f})
	}
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if *s.Workers != w {
		t.Errorf("worker versions %+v, want the tested %+v", *s.Workers, w)
	}
	// The verified binaries say what they are (running them is fine: their checksums matched).
	for n, want := range map[string][]string{
		"containerd":              {"--version", w.Containerd},
		"containerd-shim-runc-v2": {"-v", w.Containerd},
		"ctr":                     {"--version", w.Containerd},
		"runc":                    {"--version", "runc version " + strings.TrimPrefix(w.Runc, "v"), "libseccomp: "},
		"crictl":                  {"--version", w.Crictl},
		"kubelet":                 {"--version", "Kubernetes " + mirrortest.Kubernetes},
		"kube-proxy":              {"--version", "Kubernetes " + mirrortest.Kubernetes},
		"traefik":                 {"version", "Version:", w.Traefik},
	} {
		a, ok := s.Get(arch, n)
		if !ok {
			t.Errorf("set has no %s", n)
			continue
		}
		bin := filepath.Join(dir, n)
		data, _ := os.ReadFile(a.Path)
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, want[0]).CombinedOutput()
		for _, w := range want[1:] {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s %s: %v, %q does not say %q", n, want[0], err, out, w)
			}
		}
	}
	for _, p := range CNIPlugins {
		a, ok := s.Get(arch, CNIPrefix+p)
		if data, _ := os.ReadFile(a.Path); !ok || !bytes.HasPrefix(data, []byte("\x7fELF")) {
			t.Errorf("%s%s is not an ELF binary", CNIPrefix, p)
		}
	}
	for _, a := range s.Images() {
		if a.Image.Arch != arch || a.Image.OS != "linux" || !strings.HasPrefix(a.Image.ID, "sha256:") {
			t.Errorf("%s: %+v", a.Name, a.Image)
		}
	}
	// Every binary is an ELF file for the arch, as the push checks: the
	// architecture table's ELF machines are those of the real builds.
	checkRealELF(t, s, arch)
	if len(s.Images()) != len(realImages) {
		t.Errorf("%d images, want %d", len(s.Images()), len(realImages))
	}

	// Offline, from the cache and the lock just written.
	o.Offline = true
	s2, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range s2.Artifacts {
		if a.SHA256 != s.Artifacts[i].SHA256 {
			t.Errorf("%s: offline gave other bytes", a.Name)
		}
	}
}

// checkRealELF checks every binary of the set (what is installed, and the
// CNI plugins) against arch with the push's check, and that the check
// refuses it for every other arch.
func checkRealELF(t *testing.T, s *Set, arch string) {
	t.Helper()
	n := 0
	for _, a := range s.Artifacts {
		if plugin := a.Member != "" && strings.HasPrefix(a.Name, CNIPrefix); !a.Install && !plugin {
			continue // archives and images
		}
		n++
		if err := platform.CheckELF(a.Path, arch); err != nil {
			t.Errorf("%s (%s): %v", a.Name, a.Arch, err)
		}
		for _, other := range platform.Names() {
			if other != arch && platform.CheckELF(a.Path, other) == nil {
				t.Errorf("%s (%s) passes for %s too", a.Name, a.Arch, other)
			}
		}
	}
	if n < 15 {
		t.Errorf("checked %d binaries", n)
	}
}

// TestRealMirrorOtherArch resolves the set of every other architecture the
// mirror holds (hack/mirror/build.sh with MIRROR_ARCHES="amd64 arm64"):
// the real cross-built or official binaries, each checked to be an ELF file
// for that architecture, the images built for it. A mirror of one
// architecture, the default, skips it.
func TestRealMirrorOtherArch(t *testing.T) {
	if testing.Short() {
		t.Skip("reads ~500 MB")
	}
	root := mirrortest.Dir()
	w, _ := inventory.DefaultWorkerVersions(nil)
	for _, arch := range platform.Names() {
		if arch == runtime.GOARCH {
			continue
		}
		t.Run(arch, func(t *testing.T) {
			probe := filepath.Join(root, "kubernetes/release", mirrortest.Kubernetes, "bin/linux", arch, "kubelet.sha512")
			if _, err := os.Stat(probe); err != nil {
				t.Skip("the release mirror has no " + arch + " build: MIRROR_ARCHES=\"" + runtime.GOARCH + " " + arch + "\" bash hack/mirror/build.sh")
			}
			u := "file://" + root
			dir := t.TempDir()
			o := Options{
				Kubernetes: mirrortest.Kubernetes, Etcd: mirrortest.Etcd, Arch: arch, Workers: true, APIServerLB: true,
				KubernetesMirror: u + "/kubernetes", EtcdMirror: u + "/etcd",
				ContainerdMirror: u + "/containerd", RuncMirror: u + "/runc", CNIPluginsMirror: u + "/cni-plugins", CrictlMirror: u + "/crictl",
				TraefikMirror: u + "/traefik",
				LockPath:      filepath.Join(dir, LockFileName), CacheDir: filepath.Join(dir, "cache"),
			}
			for n, f := range realImages {
				// build.sh names another architecture's images <name>-<arch>.tar
				o.Images = append(o.Images, inventory.Image{Name: n, URL: u + "/images/" + strings.TrimSuffix(f, ".tar") + "-" + arch + ".tar"})
			}
			s, err := Resolve(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if *s.Workers != w {
				t.Errorf("worker versions %+v", *s.Workers)
			}
			checkRealELF(t, s, arch)
			for _, a := range s.Images() {
				if a.Image.Arch != arch {
					t.Errorf("%s: %+v", a.Name, a.Image)
				}
			}
		})
	}
}
