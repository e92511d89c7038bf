package release

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/inventory"
)

// mixedOpts are the options of 3 amd64 controllers, an amd64 worker and an
// arm64 worker; the images are listed for each worker architecture.
func mixedOpts(t *testing.T, m *mirror) Options {
	o := workerOpts(t, m)
	o.ControlPlaneArches = []string{"amd64"}
	o.WorkerArches = []string{"amd64", "arm64"}
	base := m.srv.URL
	o.Images = append(o.Images,
		inventory.Image{Name: "registry.k8s.io/pause:3.10.2", URL: base + "/images/pause-arm64.tar", Arch: "arm64"},
		inventory.Image{Name: "hardway.local/hello:v1", URL: base + "/images/hello-arm64.tar", Arch: "arm64"})
	return o
}

// byArch are the set's artifact names per arch, sorted.
func byArch(s *Set) map[string][]string {
	out := map[string][]string{}
	for _, a := range s.Artifacts {
		out[a.Arch] = append(out[a.Arch], a.Name)
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// The worker artifacts of each architecture a worker has; the control
// plane's and etcd only for the architecture the controllers have.
func TestMixedArchSet(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	m.addArch(t, "arm64")
	o := mixedOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, s)
	if !slices.Equal(s.Arches, []string{"amd64", "arm64"}) || s.Arch != "amd64" {
		t.Errorf("set arches %v (arch %s)", s.Arches, s.Arch)
	}
	worker := []string{"cni-bridge", "cni-host-local", "cni-loopback", "cni-plugins-linux-ARCH-v1.10.0.tgz", "cni-portmap",
		"containerd", "containerd-2.4.2-linux-ARCH.tar.gz", "containerd-shim-runc-v2", "crictl", "crictl-v1.37.0-linux-ARCH.tar.gz", "ctr",
		"image:hardway.local/hello:v1", "image:registry.k8s.io/pause:3.10.2", "kube-proxy", "kubelet", "runc", "traefik", "traefik_v3.7.13_linux_ARCH.tar.gz"}
	controlPlane := []string{"etcd", "etcd-v3.6.16-linux-ARCH.tar.gz", "etcdctl", "etcdutl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}
	want := func(arch string, groups ...[]string) []string {
		var out []string
		for _, g := range groups {
			for _, n := range g {
				out = append(out, strings.ReplaceAll(n, "ARCH", arch))
			}
		}
		sort.Strings(out)
		return out
	}
	got := byArch(s)
	if w := want("amd64", worker, controlPlane); !slices.Equal(got["amd64"], w) {
		t.Errorf("amd64 artifacts\n  %v\nwant\n  %v", got["amd64"], w)
	}
	if w := want("arm64", worker); !slices.Equal(got["arm64"], w) {
		t.Errorf("arm64 artifacts (workers only: no etcd, no apiserver)\n  %v\nwant\n  %v", got["arm64"], w)
	}
	// Every file is the one built for its arch, from that arch's URL.
	for _, a := range s.Artifacts {
		if a.Image != nil {
			if a.Image.Arch != a.Arch {
				t.Errorf("%s (%s): image for %s", a.Name, a.Arch, a.Image.Arch)
			}
			continue
		}
		data, err := os.ReadFile(a.Path)
		if err != nil {
			t.Fatal(err)
		}
		if a.Member != "" || a.Install {
			if !bytes.Contains(data[:min(len(data), 80)], []byte(" linux/"+a.Arch+"\n")) {
				t.Errorf("%s (%s) holds %q", a.Name, a.Arch, data[:min(len(data), 40)])
			}
		}
		if !strings.Contains(a.URL, a.Arch) {
			t.Errorf("%s (%s) from %s", a.Name, a.Arch, a.URL)
		}
	}
	if kl, ok := s.Get("arm64", "kubelet"); !ok || !strings.Contains(kl.URL, "/bin/linux/arm64/kubelet") {
		t.Errorf("arm64 kubelet %+v", kl)
	}
	if _, ok := s.Get("arm64", "kube-apiserver"); ok {
		t.Error("an arm64 kube-apiserver for amd64 controllers")
	}
	if e, _ := s.Get("arm64", "etcdctl"); e.Path != "" {
		t.Error("arm64 etcdctl fetched")
	}
	ctr, _ := s.Get("arm64", "ctr")
	if ar, ok := s.ArchiveOf(ctr); !ok || ar.Name != "containerd-2.4.2-linux-arm64.tar.gz" || ar.Arch != "arm64" {
		t.Errorf("archive of the arm64 ctr: %+v", ar)
	}

	// The lock lists both, each entry under its arch.
	data, err := os.ReadFile(o.LockPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\narches:\n  - amd64\n  - arm64\n") || strings.Contains(string(data), "\narch: ") {
		t.Errorf("lock head:\n%s", data[:min(len(data), 600)])
	}
	l, err := ReadLock(o.LockPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Artifacts) != len(s.Artifacts) {
		t.Errorf("%d lock entries for %d artifacts", len(l.Artifacts), len(s.Artifacts))
	}
	for _, a := range s.Artifacts {
		e, ok := l.Entry(a.Arch, a.Name)
		if !ok || e.SHA256 != a.SHA256 || e.Version != a.Version {
			t.Errorf("lock entry %s (%s): %+v", a.Name, a.Arch, e)
		}
	}
	if rs := l.Named("runc"); len(rs) != 2 || rs[0].SHA256 == rs[1].SHA256 {
		t.Errorf("runc entries %+v", rs)
	}

	// Again: nothing downloaded, the lock not rewritten; offline too.
	s2, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range s2.Artifacts {
		if a.Source != "cache" {
			t.Errorf("second run: %s (%s) from %s", a.Name, a.Arch, a.Source)
		}
	}
	if s2.LockWritten {
		t.Error("second run rewrote the lock")
	}
	off := o
	off.Offline = true
	if s3, err := Resolve(ctx, off); err != nil || !slices.Equal(names(s3), names(s)) {
		t.Fatalf("offline: %v", err)
	}

	// The air-gap bundle carries both and imports into an empty cache.
	bundle := filepath.Join(t.TempDir(), "release.tar")
	if err := WriteBundle(s, bundle); err != nil {
		t.Fatal(err)
	}
	entries := tarNames(t, bundle)
	for _, n := range []string{"artifacts/amd64/runc", "artifacts/arm64/runc", "artifacts/arm64/image:registry.k8s.io%2Fpause:3.10.2", "artifacts/amd64/etcd-v3.6.16-linux-amd64.tar.gz"} {
		if !slices.Contains(entries, n) {
			t.Errorf("bundle lacks %s: %v", n, entries)
		}
	}
	m.srv.Close()
	dst := mixedOpts(t, m)
	imp, err := ImportBundle(ctx, bundle, dst)
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, imp)
	for i, a := range imp.Artifacts {
		if a.SHA256 != s.Artifacts[i].SHA256 || a.Arch != s.Artifacts[i].Arch {
			t.Errorf("%s (%s): other bytes after the bundle", a.Name, a.Arch)
		}
	}
	if l2, _ := os.ReadFile(dst.LockPath); string(l2) != string(data) {
		t.Error("imported lock differs")
	}
}

func tarNames(t *testing.T, p string) []string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var out []string
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		out = append(out, h.Name)
	}
}

// oldLock is hardway.lock as hardway wrote it before hosts had their own
// architecture: one top-level arch, entries sorted by name. Kept here
// verbatim so that its files are proven to read and to stay unchanged.
type oldLock struct {
	Kubernetes string         `yaml:"kubernetes"`
	Etcd       string         `yaml:"etcd"`
	Arch       string         `yaml:"arch"`
	Artifacts  []oldLockEntry `yaml:"artifacts"`
}

type oldLockEntry struct {
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
	Arch    string `yaml:"arch"`
	URL     string `yaml:"url"`
	Member  string `yaml:"member,omitempty"`
	SHA256  string `yaml:"sha256"`
	SHA512  string `yaml:"sha512"`
}

func (l oldLock) marshal(t *testing.T) []byte {
	sort.Slice(l.Artifacts, func(i, j int) bool { return l.Artifacts[i].Name < l.Artifacts[j].Name })
	var buf bytes.Buffer
	buf.WriteString(lockHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&l); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	return buf.Bytes()
}

// A lock of one architecture, written the old way, is accepted as it is
// and never rewritten: an amd64-only inventory's second up changes nothing.
func TestOldLockUnchanged(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	old := oldLock{Kubernetes: s.Kubernetes, Etcd: s.Etcd, Arch: "amd64"}
	for _, a := range s.Artifacts {
		old.Artifacts = append(old.Artifacts, oldLockEntry{Name: a.Name, Version: a.Version, Arch: a.Arch, URL: a.URL, Member: a.Member, SHA256: a.SHA256, SHA512: a.SHA512})
	}
	want := old.marshal(t)
	got, _ := os.ReadFile(o.LockPath)
	if string(got) != string(want) {
		t.Errorf("a one-arch lock is no longer written as before:\n--- now ---\n%s\n--- before ---\n%s", got, want)
	}
	if err := os.WriteFile(o.LockPath, want, 0o644); err != nil {
		t.Fatal(err)
	}
	fi1, _ := os.Stat(o.LockPath)
	for _, offline := range []bool{false, true} {
		o := o
		o.Offline = offline
		s, err := Resolve(ctx, o)
		if err != nil {
			t.Fatalf("offline %v: the old lock refused: %v", offline, err)
		}
		if s.LockWritten {
			t.Errorf("offline %v: the old lock rewritten", offline)
		}
		if data, _ := s.Lock.Marshal(); string(data) != string(want) {
			t.Errorf("offline %v: the set's lock differs from the old one", offline)
		}
	}
	fi2, _ := os.Stat(o.LockPath)
	if !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Error("the lock file was touched")
	}
	// An old lock whose entries lack their arch takes the top-level one.
	l, err := ParseLock("x", bytes.ReplaceAll(want, []byte("\n    arch: amd64\n"), []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := l.Entry("amd64", "kubelet"); !ok || e.Arch != "amd64" {
		t.Errorf("entry without arch: %+v", e)
	}
}

// An architecture new to the inventory is pinned on its first resolve, the
// ones pinned before untouched; when no host uses it any more it leaves the
// lock, which is then the same file as before it came.
func TestLockGainsAndLosesArch(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	m.addArch(t, "arm64")
	o := workerOpts(t, m)
	if _, err := Resolve(ctx, o); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(o.LockPath)
	lb, _ := ParseLock("before", before)

	mixed := mixedOpts(t, m)
	mixed.LockPath, mixed.CacheDir = o.LockPath, o.CacheDir
	s, err := Resolve(ctx, mixed)
	if err != nil {
		t.Fatalf("adding an arm64 worker: %v", err)
	}
	if !s.LockWritten {
		t.Error("arm64 not pinned")
	}
	la, _ := ReadLock(o.LockPath)
	for _, e := range lb.Artifacts {
		if got, ok := la.Entry(e.Arch, e.Name); !ok || got != e {
			t.Errorf("%s (%s) moved: %+v -> %+v", e.Name, e.Arch, e, got)
		}
	}
	if _, ok := la.Entry("arm64", "kubelet"); !ok {
		t.Error("no arm64 kubelet pinned")
	}
	for _, a := range s.Artifacts {
		if a.Arch == "amd64" && a.Source != "cache" {
			t.Errorf("amd64 %s downloaded again", a.Name)
		}
	}
	if _, err := Resolve(ctx, o); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(o.LockPath); string(after) != string(before) {
		t.Error("without the arm64 worker the lock is not what it was")
	}

	// A tampered arm64 file is refused against the arm64 pin alone.
	if _, err := Resolve(ctx, mixed); err != nil {
		t.Fatal(err)
	}
	m.setBinary(t, "v1.36.3", "arm64", "kubelet", fakeBinary("kubelet", "v1.36.3", "evil", 4000))
	mixed.CacheDir = t.TempDir()
	_, err = Resolve(ctx, mixed)
	wantErr(t, err, "kubelet", "/bin/linux/arm64/kubelet", "does not match", "--update-lock")
}

// An arch only controllers have gets no worker binaries; one only workers
// have no etcd; an image listed for no worker's arch is fetched for none.
func TestArchesPerRole(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	m.addArch(t, "arm64")
	o := mixedOpts(t, m)
	o.ControlPlaneArches = []string{"arm64"}
	o.WorkerArches = []string{"amd64"}
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	got := byArch(s)
	if !slices.Contains(got["arm64"], "kube-apiserver") || !slices.Contains(got["arm64"], "etcd") || slices.Contains(got["arm64"], "kubelet") ||
		slices.Contains(got["arm64"], "image:registry.k8s.io/pause:3.10.2") {
		t.Errorf("arm64 (controllers): %v", got["arm64"])
	}
	if slices.Contains(got["amd64"], "kube-apiserver") || slices.Contains(got["amd64"], "etcd") || !slices.Contains(got["amd64"], "kubelet") ||
		!slices.Contains(got["amd64"], "image:registry.k8s.io/pause:3.10.2") {
		t.Errorf("amd64 (workers): %v", got["amd64"])
	}
	if n := len(s.Images()); n != 2 {
		t.Errorf("%d images, want the 2 amd64 ones", n)
	}
}

// An image listed for arm64 whose tarball holds amd64 is refused, naming
// both and the fix.
func TestImageArchMismatch(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	m.addArch(t, "arm64")
	o := mixedOpts(t, m)
	o.Images[2].URL = m.srv.URL + "/images/pause.tar" // the amd64 tarball, listed for arm64
	_, err := Resolve(ctx, o)
	wantErr(t, err, "image:registry.k8s.io/pause:3.10.2", "the image is for linux/amd64", "listed for are linux/arm64", "set arch: amd64")
}

// A bundle an earlier hardway wrote (artifacts/<name>, one arch) imports.
func TestOldBundleImports(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	lockData, _ := os.ReadFile(o.LockPath)
	bundle := filepath.Join(t.TempDir(), "old.tar")
	f, err := os.Create(bundle)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	put := func(name string, r io.Reader, size int64) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Size: size, Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, r); err != nil {
			t.Fatal(err)
		}
	}
	put(LockFileName, bytes.NewReader(lockData), int64(len(lockData)))
	for _, a := range s.Artifacts {
		if a.Member != "" {
			continue
		}
		af, err := os.Open(a.Path)
		if err != nil {
			t.Fatal(err)
		}
		put(bundleDir+strings.ReplaceAll(a.Name, "/", "%2F"), af, a.Size)
		af.Close()
	}
	tw.Close()
	f.Close()
	m.srv.Close()
	got, err := ImportBundle(ctx, bundle, workerOpts(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(got), names(s)) {
		t.Errorf("imported %v", names(got))
	}
}

func TestLockParseArch(t *testing.T) {
	entry := func(name, arch string) string {
		return "  - name: " + name + "\n    version: v1\n    arch: " + arch + "\n    url: file:///x\n    sha256: " + strings.Repeat("a", 64) + "\n    sha512: " + strings.Repeat("b", 128) + "\n"
	}
	head := "kubernetes: v1.36.3\netcd: v3.6.16\n"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"two arches of one name", "arches: [amd64, arm64]\nartifacts:\n" + entry("runc", "amd64") + entry("runc", "arm64"), ""},
		{"twice for one arch", "arches: [amd64, arm64]\nartifacts:\n" + entry("runc", "arm64") + entry("runc", "arm64"), "artifacts[1] (runc): listed twice"},
		{"no arch anywhere", "artifacts:\n" + entry("runc", `""`), "artifacts[0] (runc): no arch"},
		{"unknown arch", "arch: amd64\nartifacts:\n" + entry("runc", "s390x"), `"s390x" is not a supported architecture`},
		{"both", "arch: amd64\narches: [amd64]\nartifacts:\n" + entry("runc", "amd64"), "both arch and arches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLock("hardway.lock", []byte(head+tc.body))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, tc.want, "restore it from version control")
		})
	}
}
