package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hardway/hardway/pkg/inventory"
)

// mirror is a test mirror on disk laid out exactly like dl.k8s.io and the
// etcd GitHub releases, with small generated files standing in for binaries.
type mirror struct {
	root string // <root>/kubernetes, <root>/etcd
	// srv serves root over HTTP; hook, if set, may answer a request itself.
	srv  *httptest.Server
	mu   sync.Mutex
	hook func(w http.ResponseWriter, r *http.Request) bool
	hits map[string]int
	// What addArch lays out for another architecture.
	k8s  []string
	etcd string
}

func fakeBinary(name, ver, arch string, size int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "#!fake %s %s linux/%s\n", name, ver, arch)
	for b.Len() < size {
		fmt.Fprintf(&b, "%s-%d\n", name, b.Len())
	}
	return b.Bytes()[:size]
}

func hexSHA512(b []byte) string { s := sha512.Sum512(b); return hex.EncodeToString(s[:]) }
func hexSHA256(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func writeFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// newMirror makes a mirror with Kubernetes versions k8s (stable-X.Y.txt
// naming the last), etcd version etcdV, all for amd64 (addArch adds
// another architecture).
func newMirror(t testing.TB, etcdV string, k8s ...string) *mirror {
	t.Helper()
	m := &mirror{root: t.TempDir(), hits: map[string]int{}, k8s: k8s, etcd: etcdV}
	for _, v := range k8s {
		m.addKubernetes(t, v, "amd64")
		writeFile(t, filepath.Join(m.root, "kubernetes", "release", "stable-"+strings.Join(strings.Split(strings.TrimPrefix(v, "v"), ".")[:2], ".")+".txt"), []byte(v+"\n"))
	}
	m.addEtcd(t, etcdV, "amd64", etcdTarball(t, etcdV, "amd64", nil))
	m.addWorkerComponents(t, testWorkers, "amd64")
	m.addImage(t, "pause.tar", testImage(t, "registry.k8s.io/pause:3.10.2", "amd64", "pause"), true)
	m.addImage(t, "hello.tar", testImage(t, "hardway.local/hello:v1", "amd64", "hello"), false)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		if r.Method == http.MethodGet {
			m.hits[r.URL.Path]++
		}
		hook := m.hook
		m.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		http.FileServer(http.Dir(m.root)).ServeHTTP(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// addArch lays out the same releases for another architecture, as the
// official sites do: the binaries under their own paths, each project's
// checksum files listing both; and the images built for it as
// images/<name>-<arch>.tar, listed in the same SHA256SUMS.
func (m *mirror) addArch(t testing.TB, arch string) {
	t.Helper()
	for _, v := range m.k8s {
		m.addKubernetes(t, v, arch)
	}
	m.addEtcd(t, m.etcd, arch, etcdTarball(t, m.etcd, arch, nil))
	m.addWorkerComponents(t, testWorkers, arch)
	m.addImage(t, "pause-"+arch+".tar", testImage(t, "registry.k8s.io/pause:3.10.2", arch, "pause"), true)
	m.addImage(t, "hello-"+arch+".tar", testImage(t, "hardway.local/hello:v1", arch, "hello"), true)
}

// mergeSum puts "<hex>  <file>" into the checksums file at p, in place of
// any line for file; decoy leaves a line that is there alone (the decoys
// stand for the other files an official checksums file lists).
func mergeSum(t testing.TB, p, hex, file string, decoy bool) {
	old, _ := os.ReadFile(p)
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
		if l == "" {
			continue
		}
		if strings.HasSuffix(l, "  "+file) {
			if decoy {
				return
			}
			continue
		}
		keep = append(keep, l)
	}
	writeFile(t, p, []byte(strings.Join(append(keep, hex+"  "+file), "\n")+"\n"))
}

func (m *mirror) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = h
}

func (m *mirror) hitsOf(p string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits[p]
}

func (m *mirror) binPath(ver, arch, bin string) string {
	return filepath.Join(m.root, "kubernetes", "release", ver, "bin", "linux", arch, bin)
}

func (m *mirror) addKubernetes(t testing.TB, ver, arch string) {
	for _, b := range append(append([]string{}, controlPlaneBinaries...), workerBinaries...) {
		m.setBinary(t, ver, arch, b, fakeBinary(b, ver, arch, 3000+len(b)*100))
	}
}

// setBinary writes a binary and its published checksums.
func (m *mirror) setBinary(t testing.TB, ver, arch, bin string, data []byte) {
	p := m.binPath(ver, arch, bin)
	writeFile(t, p, data)
	writeFile(t, p+".sha512", []byte(hexSHA512(data)))
	writeFile(t, p+".sha256", []byte(hexSHA256(data)))
}

type tarEntry struct {
	hdr  tar.Header
	body []byte
}

// etcdTarball builds an official-looking etcd release archive; extra
// entries are appended after the real ones.
func etcdTarball(t testing.TB, ver, arch string, extra []tarEntry) []byte {
	top := fmt.Sprintf("etcd-%s-linux-%s", ver, arch)
	entries := []tarEntry{
		{hdr: tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: top + "/README.md", Typeflag: tar.TypeReg, Mode: 0o644}, body: []byte("# etcd\n")},
		{hdr: tar.Header{Name: top + "/Documentation/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: top + "/Documentation/dev-guide.md", Typeflag: tar.TypeReg, Mode: 0o644}, body: []byte("guide\n")},
	}
	for _, b := range EtcdBinaries {
		entries = append(entries, tarEntry{hdr: tar.Header{Name: top + "/" + b, Typeflag: tar.TypeReg, Mode: 0o755}, body: fakeBinary(b, ver, arch, 2000+len(b)*10)})
	}
	return makeTarGz(t, append(entries, extra...))
}

func makeTarGz(t testing.TB, entries []tarEntry) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if len(e.body) > 0 {
			if _, err := tw.Write(e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Flush rather than Close: an entry whose declared size was never
	// written (the oversized case) must still reach the buffer.
	_ = tw.Flush()
	_ = tw.Close()
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func (m *mirror) addEtcd(t testing.TB, ver, arch string, tgz []byte) {
	name := fmt.Sprintf("etcd-%s-linux-%s.tar.gz", ver, arch)
	writeFile(t, filepath.Join(m.root, "etcd", ver, name), tgz)
	sums := filepath.Join(m.root, "etcd", ver, "SHA256SUMS")
	mergeSum(t, sums, hexSHA256(tgz), name, false)
	mergeSum(t, sums, strings.Repeat("0", 64), "etcd-"+ver+"-linux-other.zip", true)
}

func (m *mirror) httpOpts(t testing.TB, k8s string) Options {
	return m.opts(t, k8s, m.srv.URL+"/kubernetes", m.srv.URL+"/etcd")
}

func (m *mirror) fileOpts(t testing.TB, k8s string) Options {
	return m.opts(t, k8s, "file://"+filepath.Join(m.root, "kubernetes"), "file://"+filepath.Join(m.root, "etcd"))
}

func (m *mirror) opts(t testing.TB, k8s, k8sURL, etcdURL string) Options {
	dir := t.TempDir()
	base := strings.TrimSuffix(k8sURL, "/kubernetes")
	return Options{
		Kubernetes: k8s, Etcd: "v3.6.16", Arch: "amd64",
		KubernetesMirror: k8sURL, EtcdMirror: etcdURL,
		WorkerVersions:   testWorkers,
		ContainerdMirror: base + "/containerd", RuncMirror: base + "/runc",
		CNIPluginsMirror: base + "/cni-plugins", CrictlMirror: base + "/crictl",
		TraefikMirror: base + "/traefik",
		Images: []inventory.Image{
			{Name: "registry.k8s.io/pause:3.10.2", URL: base + "/images/pause.tar"},
			{Name: "hardway.local/hello:v1", URL: base + "/images/hello.tar", SHA256: m.imageSHA256(t, "hello.tar")},
		},
		LockPath: filepath.Join(dir, LockFileName),
		CacheDir: filepath.Join(dir, "cache"),
		Fetcher:  &Fetcher{Backoff: time.Millisecond, StallTimeout: 2 * time.Second},
	}
}

var testWorkers = inventory.WorkerVersions{Containerd: "v2.4.2", Runc: "v1.5.3", CNIPlugins: "v1.10.0", Crictl: "v1.37.0", Traefik: "v3.7.13"}

// workerPaths are the mirror paths of the worker components, relative to
// the mirror's root, laid out like their GitHub release downloads.
func workerPaths(w inventory.WorkerVersions, arch string) (containerd, runc, runcSums, cni, crictl string) {
	return fmt.Sprintf("containerd/%s/containerd-%s-linux-%s.tar.gz", w.Containerd, strings.TrimPrefix(w.Containerd, "v"), arch),
		fmt.Sprintf("runc/%s/runc.%s", w.Runc, arch),
		fmt.Sprintf("runc/%s/runc.sha256sum", w.Runc),
		fmt.Sprintf("cni-plugins/%s/cni-plugins-linux-%s-%s.tgz", w.CNIPlugins, arch, w.CNIPlugins),
		fmt.Sprintf("crictl/%s/crictl-%s-linux-%s.tar.gz", w.Crictl, w.Crictl, arch)
}

// addWorkerComponents writes official-looking containerd, runc, CNI and
// crictl releases with their checksum files in each project's format.
func (m *mirror) addWorkerComponents(t testing.TB, w inventory.WorkerVersions, arch string) {
	ctrd, runc, runcSums, cni, crictl := workerPaths(w, arch)
	reg := func(n string, body []byte) tarEntry {
		return tarEntry{hdr: tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755}, body: body}
	}
	ce := []tarEntry{{hdr: tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}}}
	for _, b := range append(append([]string{}, ContainerdBinaries...), "containerd-stress") {
		ce = append(ce, reg("bin/"+b, fakeBinary(b, w.Containerd, arch, 1500+len(b)*10)))
	}
	m.setSidecar(t, ctrd, makeTarGz(t, ce), ".sha256sum", hexSHA256, true)

	rb := fakeBinary("runc", w.Runc, arch, 1800)
	writeFile(t, filepath.Join(m.root, runc), rb)
	mergeSum(t, filepath.Join(m.root, runcSums), strings.Repeat("1", 64), "runc.tar.xz", true)
	mergeSum(t, filepath.Join(m.root, runcSums), hexSHA256(rb), "runc."+arch, false)
	mergeSum(t, filepath.Join(m.root, runcSums), strings.Repeat("2", 64), "runc.other", true)

	pe := []tarEntry{{hdr: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "./LICENSE", Typeflag: tar.TypeReg, Mode: 0o644}, body: []byte("license\n")}}
	for _, p := range append(append([]string{}, CNIPlugins...), "macvlan") {
		pe = append(pe, reg("./"+p, fakeBinary(p, w.CNIPlugins, arch, 1200+len(p)*10)))
	}
	tgz := makeTarGz(t, pe)
	m.setSidecar(t, cni, tgz, ".sha512", hexSHA512, true)
	writeFile(t, filepath.Join(m.root, cni+".sha256"), []byte(hexSHA256(tgz)+"  "+filepath.Base(cni)+"\n"))

	m.setSidecar(t, crictl, makeTarGz(t, []tarEntry{reg("crictl", fakeBinary("crictl", w.Crictl, arch, 1600))}), ".sha256", hexSHA256, false)

	// Traefik: LICENSE.md and CHANGELOG.md beside the binary, one checksums
	// file for the whole release (goreleaser's).
	trTar, trSums := traefikPaths(w, arch)
	tr := makeTarGz(t, []tarEntry{
		{hdr: tar.Header{Name: "CHANGELOG.md", Typeflag: tar.TypeReg, Mode: 0o644}, body: []byte("changes\n")},
		{hdr: tar.Header{Name: "LICENSE.md", Typeflag: tar.TypeReg, Mode: 0o644}, body: []byte("license\n")},
		reg("traefik", fakeBinary("traefik", w.Traefik, arch, 1700))})
	writeFile(t, filepath.Join(m.root, trTar), tr)
	sums := filepath.Join(m.root, trSums)
	mergeSum(t, sums, hexSHA256(tr), filepath.Base(trTar), false)
	mergeSum(t, sums, strings.Repeat("3", 64), "traefik_"+w.Traefik+"_linux_arm64.tar.gz", true)
	mergeSum(t, sums, strings.Repeat("4", 64), "traefik_"+w.Traefik+"_windows_amd64.zip", true)
}

// traefikPaths are Traefik's release tarball and checksums file, relative to
// the mirror's root.
func traefikPaths(w inventory.WorkerVersions, arch string) (tarball, sums string) {
	return fmt.Sprintf("traefik/%s/traefik_%s_linux_%s.tar.gz", w.Traefik, w.Traefik, arch),
		fmt.Sprintf("traefik/%s/traefik_%s_checksums.txt", w.Traefik, w.Traefik)
}

// setSidecar writes a file and its checksum file: "<hex>  <name>" when
// named (containerd, CNI), the bare hex otherwise.
func (m *mirror) setSidecar(t testing.TB, rel string, data []byte, ext string, sum func([]byte) string, named bool) {
	writeFile(t, filepath.Join(m.root, rel), data)
	line := sum(data)
	if named {
		line += "  " + filepath.Base(rel)
	}
	writeFile(t, filepath.Join(m.root, rel+ext), []byte(line+"\n"))
}

// testImage is a real one-layer docker-archive holding ref, like the
// mirror's mkimage writes.
func testImage(t testing.TB, ref, arch, content string) []byte {
	t.Helper()
	var lb bytes.Buffer
	tw := tar.NewWriter(&lb)
	body := fakeBinary(content, "v1", arch, 700)
	tw.WriteHeader(&tar.Header{Name: content, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
	tw.Write(body)
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lb.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Entrypoint = []string{"/" + content}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tarball.Write(tag, img, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func imageID(t testing.TB, data []byte) v1.Hash {
	img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// addImage writes images/<file>; listed adds its line to images/SHA256SUMS.
func (m *mirror) addImage(t testing.TB, file string, data []byte, listed bool) {
	writeFile(t, filepath.Join(m.root, "images", file), data)
	sums := filepath.Join(m.root, "images", "SHA256SUMS")
	if listed {
		mergeSum(t, sums, hexSHA256(data), file, false)
		return
	}
	old, _ := os.ReadFile(sums)
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
		if l != "" && !strings.HasSuffix(l, "  "+file) {
			keep = append(keep, l)
		}
	}
	writeFile(t, sums, []byte(strings.Join(keep, "\n")+"\n"))
}

func (m *mirror) imageSHA256(t testing.TB, file string) string {
	data, err := os.ReadFile(filepath.Join(m.root, "images", file))
	if err != nil {
		t.Fatal(err)
	}
	return hexSHA256(data)
}
