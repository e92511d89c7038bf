package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
// naming the last), etcd version etcdV, all for amd64.
func newMirror(t testing.TB, etcdV string, k8s ...string) *mirror {
	t.Helper()
	m := &mirror{root: t.TempDir(), hits: map[string]int{}}
	for _, v := range k8s {
		m.addKubernetes(t, v, "amd64")
		writeFile(t, filepath.Join(m.root, "kubernetes", "release", "stable-"+strings.Join(strings.Split(strings.TrimPrefix(v, "v"), ".")[:2], ".")+".txt"), []byte(v+"\n"))
	}
	m.addEtcd(t, etcdV, "amd64", etcdTarball(t, etcdV, "amd64", nil))
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
	writeFile(t, filepath.Join(m.root, "etcd", ver, "SHA256SUMS"),
		[]byte(fmt.Sprintf("%s  %s\n%s  etcd-%s-linux-other.zip\n", hexSHA256(tgz), name, strings.Repeat("0", 64), ver)))
}

func (m *mirror) httpOpts(t testing.TB, k8s string) Options {
	return m.opts(t, k8s, m.srv.URL+"/kubernetes", m.srv.URL+"/etcd")
}

func (m *mirror) fileOpts(t testing.TB, k8s string) Options {
	return m.opts(t, k8s, "file://"+filepath.Join(m.root, "kubernetes"), "file://"+filepath.Join(m.root, "etcd"))
}

func (m *mirror) opts(t testing.TB, k8s, k8sURL, etcdURL string) Options {
	dir := t.TempDir()
	return Options{
		Kubernetes: k8s, Etcd: "v3.6.16", Arch: "amd64",
		KubernetesMirror: k8sURL, EtcdMirror: etcdURL,
		LockPath: filepath.Join(dir, LockFileName),
		CacheDir: filepath.Join(dir, "cache"),
		Fetcher:  &Fetcher{Backoff: time.Millisecond, StallTimeout: 2 * time.Second},
	}
}
