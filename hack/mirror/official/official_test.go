package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/release"
)

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
func sha512hex(b []byte) string { s := sha512.Sum512(b); return hex.EncodeToString(s[:]) }

// site serves files (path -> content) on loopback, like an official site,
// and counts the requests.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func newSite(t *testing.T, files map[string]string) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		body, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	}))
	t.Cleanup(s.Close)
	return s
}

// quick is a Fetcher for tests: one attempt per request, a short probe.
func quick() Fetcher {
	return Fetcher{Probe: 2 * time.Second, Fetcher: &release.Fetcher{Attempts: 1}}
}

// empty says whether dir holds no file at all (temporary files included).
func empty(t *testing.T, dir string) bool {
	t.Helper()
	n := 0
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
			t.Logf("left in the mirror: %s", p)
		}
		return nil
	})
	return n == 0
}

func TestOfficialReleaseTakenAndVerified(t *testing.T) {
	tgz := "containerd tarball bytes"
	name := "containerd-9.9.9-linux-amd64.tar.gz"
	sums := sha256hex([]byte(tgz)) + "  " + name + "\n"
	s := newSite(t, map[string]string{"v9.9.9/" + name: tgz, "v9.9.9/" + name + ".sha256sum": sums})
	mirror := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), &out, quick(), mirror, "amd64", []string{"containerd=v9.9.9"}, map[string]string{"containerd": s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "official containerd\n" {
		t.Fatalf("stdout %q, want official containerd", out.String())
	}
	got, err := os.ReadFile(filepath.Join(mirror, "containerd", "v9.9.9", name))
	if err != nil || string(got) != tgz {
		t.Fatalf("mirror file: %q, %v", got, err)
	}
	// the published checksum file itself, byte for byte, beside it
	if got, _ := os.ReadFile(filepath.Join(mirror, "containerd", "v9.9.9", name+".sha256sum")); string(got) != sums {
		t.Fatalf("checksum file %q, want the published %q", got, sums)
	}
}

// dl.k8s.io's layout: one binary, a .sha256 and a .sha512 holding a bare hex
// digest each; binaries become executable.
func TestKubernetesSidecarsBothChecked(t *testing.T) {
	files := map[string]string{}
	c, err := Layout("kubernetes", "v1.99.0", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.Files {
		b := "binary " + f.Path
		files[f.Path] = b
		files[f.Path+".sha256"] = sha256hex([]byte(b))
		files[f.Path+".sha512"] = sha512hex([]byte(b))
	}
	mirror := t.TempDir()
	check := func(wantOfficial bool) error {
		s := newSite(t, files)
		c.Base = s.URL
		o, err := quick().Fetch(context.Background(), c, mirror)
		if err == nil && o.Official != wantOfficial {
			t.Fatalf("outcome %+v", o)
		}
		return err
	}
	if err := check(true); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mirror, "kubernetes", "release", "v1.99.0", "bin", "linux", "amd64", "kube-apiserver")
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v, %v; want mode 0755", p, fi, err)
	}

	// a .sha512 that disagrees with the .sha256 (the bytes match the sha256):
	// refused, though one of the two would pass
	bad := c.Files[0].Path + ".sha512"
	files[bad] = sha512hex([]byte("other bytes"))
	mirror = t.TempDir()
	if err := check(false); !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want a checksum mismatch", err)
	}
	if !empty(t, mirror) {
		t.Fatal("a refused download left files in the mirror")
	}
}

// A checksums file listing every file of the release (Traefik's, etcd's
// SHA256SUMS, runc's): only the line of the file taken counts.
func TestChecksumFileWithManyLines(t *testing.T) {
	tgz := "traefik tarball"
	name := "traefik_v3.9.9_linux_amd64.tar.gz"
	sums := fmt.Sprintf("%s  traefik_v3.9.9_linux_arm64.tar.gz\n%s  %s\n%s  traefik_v3.9.9_windows_amd64.zip\n",
		sha256hex([]byte("arm")), sha256hex([]byte(tgz)), name, sha256hex([]byte("win")))
	s := newSite(t, map[string]string{"v3.9.9/" + name: tgz, "v3.9.9/traefik_v3.9.9_checksums.txt": sums})
	var out bytes.Buffer
	if err := run(context.Background(), &out, quick(), t.TempDir(), "amd64", []string{"traefik=v3.9.9"}, map[string]string{"traefik": s.URL}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "official traefik\n" {
		t.Fatalf("stdout %q", out.String())
	}
}

// No site at the address (the port refuses): the source build, at once, and
// the mirror untouched.
func TestUnreachableFallsBackToSource(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	l.Close()
	mirror := t.TempDir()
	var out bytes.Buffer
	err = run(context.Background(), &out, quick(), mirror, "amd64", []string{"runc=v1.0.0", "crictl=v1.0.0"},
		map[string]string{"runc": base, "crictl": base})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "source runc\nsource crictl\n" {
		t.Fatalf("stdout %q, want both from source", out.String())
	}
	if !empty(t, mirror) {
		t.Fatal("the fallback left files in the mirror")
	}
}

// A site that accepts the connection and never answers (a black-holing
// proxy): the probe gives up, and the second component from the same site
// does not ask again.
func TestSilentSiteProbedOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int64
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { <-done; c.Close() }()
		}
	}()
	base := "http://" + l.Addr().String()
	f := quick()
	f.Probe = 200 * time.Millisecond
	var out bytes.Buffer
	err = run(context.Background(), &out, f, t.TempDir(), "amd64", []string{"cni=v1.0.0", "crictl=v1.0.0"},
		map[string]string{"cni": base, "crictl": base})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "source cni\nsource crictl\n" {
		t.Fatalf("stdout %q", out.String())
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("%d connections to the silent site, want 1 (one probe)", n)
	}
}

// A site that answers, but not with the files (404, a portal's 403): the
// source build, with the answer as the reason; the next component still asks.
func TestErrorAnswerFallsBackToSource(t *testing.T) {
	s := newSite(t, map[string]string{})
	mirror := t.TempDir()
	c, _ := Layout("etcd", "v3.0.0", "amd64")
	c.Base = s.URL
	o, err := quick().Fetch(context.Background(), c, mirror)
	if err != nil {
		t.Fatal(err)
	}
	if o.Official || o.Unreachable || !strings.Contains(o.Reason, "404") {
		t.Fatalf("outcome %+v, want a fallback naming the 404", o)
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, quick(), mirror, "amd64", []string{"etcd=v3.0.0", "coredns=v1.0.0"},
		map[string]string{"etcd": s.URL, "coredns": s.URL}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "source etcd\nsource coredns\n" || s.hits.Load() != 3 {
		t.Fatalf("stdout %q after %d requests, want both from source, each asked", out.String(), s.hits.Load())
	}
	if !empty(t, mirror) {
		t.Fatal("the fallback left files in the mirror")
	}
}

// The bytes are not the published ones: an error, never a quiet source build.
func TestMismatchIsAnError(t *testing.T) {
	name := "crictl-v1.0.0-linux-amd64.tar.gz"
	s := newSite(t, map[string]string{"v1.0.0/" + name: "tampered", "v1.0.0/" + name + ".sha256": sha256hex([]byte("original"))})
	mirror := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), &out, quick(), mirror, "amd64", []string{"crictl=v1.0.0"}, map[string]string{"crictl": s.URL})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want a checksum mismatch", err)
	}
	if out.Len() != 0 || !empty(t, mirror) {
		t.Fatalf("stdout %q; a refused download must leave nothing", out.String())
	}
}

// A transfer that breaks off after the checksum came: the source build, and
// no half file in the mirror.
func TestBrokenTransferFallsBack(t *testing.T) {
	name := "coredns_1.0.0_linux_amd64.tgz"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".sha256") {
			fmt.Fprintf(w, "%s  %s\n", sha256hex([]byte("whole file")), name)
			return
		}
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("whole"))
		if h, ok := w.(http.Hijacker); ok {
			c, _, _ := h.Hijack()
			c.Close()
		}
	}))
	defer srv.Close()
	mirror := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), &out, quick(), mirror, "amd64", []string{"coredns=v1.0.0"}, map[string]string{"coredns": srv.URL}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "source coredns\n" || !empty(t, mirror) {
		t.Fatalf("stdout %q; want source and an untouched mirror", out.String())
	}
}

func TestDigestFor(t *testing.T) {
	h := strings.Repeat("ab", 32)
	h2 := strings.Repeat("cd", 32)
	for _, c := range []struct {
		body, name, want string
		ok               bool
	}{
		{h + "\n", "kubectl", h, true},                                         // dl.k8s.io sidecar
		{h + "  f.tgz\n", "f.tgz", h, true},                                    // sha256sum's format
		{h + " *f.tgz\n", "f.tgz", h, true},                                    // binary mode
		{h + "  ./f.tgz\n", "f.tgz", h, true},                                  // with ./
		{h2 + "  g.tgz\n" + h + "  f.tgz\n", "f.tgz", h, true},                 // many files
		{h2 + "  g.tgz\n", "f.tgz", "", false},                                 // not named
		{h + "\n" + h2 + "\n", "f.tgz", "", false},                             // two bare digests: whose?
		{"not-hex  f.tgz\n", "f.tgz", "", false},                               // garbage
		{strings.ToUpper(h) + "  f.tgz\n", "f.tgz", h, true},                   // upper case
		{strings.Repeat("ef", 64) + "\n", "x", strings.Repeat("ef", 64), true}, // sha512
	} {
		got, ok := digestFor([]byte(c.body), c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("digestFor(%q, %q) = %q, %v; want %q, %v", c.body, c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestLayoutRefusesUnknown(t *testing.T) {
	if _, err := Layout("images", "v1", "amd64"); err == nil {
		t.Fatal("images have no official release; want an error")
	}
	if _, err := Layout("etcd", "3.6.16", "amd64"); err == nil {
		t.Fatal("a version without v: want an error")
	}
}

// The conformance suite's tarball: dl.k8s.io has it beside the release's
// binaries, with a .sha256 and a .sha512; the mirror keeps it where the site does.
func TestKubernetesTestLayout(t *testing.T) {
	c, err := Layout("kubernetes-test", "v1.36.3", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	p := "release/v1.36.3/kubernetes-test-linux-arm64.tar.gz"
	if c.Dir != "kubernetes" || c.Base != "https://dl.k8s.io" || len(c.Files) != 1 ||
		c.Files[0].Path != p || c.Files[0].Exec ||
		strings.Join(c.Files[0].Sums, " ") != p+".sha256 "+p+".sha512" {
		t.Fatalf("layout %+v", c)
	}
}

// tgz is a gzipped tarball of files (name -> content), in the order given;
// a name ending in / is a directory, a content starting with "->" a symlink
// to the rest.
func tgz(t *testing.T, files ...[2]string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f[0], Mode: 0o755, Size: int64(len(f[1])), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(f[1], "->"); ok {
			h = &tar.Header{Name: f[0], Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: target}
		}
		if strings.HasSuffix(f[0], "/") {
			h = &tar.Header{Name: f[0], Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(f[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// What hack/conformance/build.sh does: the tarball from the site, verified,
// then e2e.test and ginkgo out of it. Tampered bytes under the same published
// digests are refused and leave nothing.
func TestKubernetesTestTarballFetchedAndExtracted(t *testing.T) {
	body := tgz(t,
		[2]string{"kubernetes/", ""}, // a directory entry, as upstream's has
		[2]string{"kubernetes/test/bin/e2e_node.test", "not wanted"},
		[2]string{"kubernetes/test/bin/e2e.test", "#!/bin/sh\necho v9.9.9\n"},
		[2]string{"kubernetes/test/bin/ginkgo", "ginkgo binary"})
	p := "release/v9.9.9/kubernetes-test-linux-amd64.tar.gz"
	files := map[string]string{p: string(body), p + ".sha256": sha256hex(body), p + ".sha512": sha512hex(body)}
	s := newSite(t, files)
	mirror := t.TempDir()
	var out bytes.Buffer
	err := run(context.Background(), &out, quick(), mirror, "amd64", []string{"kubernetes-test=v9.9.9"}, map[string]string{"kubernetes-test": s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "official kubernetes-test\n" {
		t.Fatalf("stdout %q", out.String())
	}
	tarball := filepath.Join(mirror, "kubernetes", filepath.FromSlash(p))
	for _, e := range []string{"", ".sha256", ".sha512"} {
		if got, err := os.ReadFile(tarball + e); err != nil || string(got) != files[p+e] {
			t.Fatalf("%s%s in the mirror: %v; not the published bytes", tarball, e, err)
		}
	}

	bin := t.TempDir()
	if err := Extract(tarball, bin, []string{"kubernetes/test/bin/e2e.test", "./kubernetes/test/bin/ginkgo"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"e2e.test": "#!/bin/sh\necho v9.9.9\n", "ginkgo": "ginkgo binary"} {
		got, err := os.ReadFile(filepath.Join(bin, name))
		fi, serr := os.Stat(filepath.Join(bin, name))
		if err != nil || serr != nil || string(got) != want || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %q, %v, %v; want %q, mode 0755", name, got, err, fi, want)
		}
	}
	if ents, _ := os.ReadDir(bin); len(ents) != 2 {
		t.Fatalf("%d files extracted, want only e2e.test and ginkgo", len(ents))
	}

	files[p] = string(tgz(t, [2]string{"kubernetes/test/bin/e2e.test", "something else"}))
	mirror = t.TempDir()
	out.Reset()
	err = run(context.Background(), &out, quick(), mirror, "amd64", []string{"kubernetes-test=v9.9.9"}, map[string]string{"kubernetes-test": s.URL})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want a checksum mismatch", err)
	}
	if out.Len() != 0 || !empty(t, mirror) {
		t.Fatalf("stdout %q; a refused download must leave nothing", out.String())
	}
}

// A tarball without what was asked for, or with it as a link (which could
// point anywhere): refused, and the directory left empty.
func TestExtractRefuses(t *testing.T) {
	for _, c := range []struct {
		name    string
		tarball []byte
		members []string
		want    string
	}{
		{"missing", tgz(t, [2]string{"kubernetes/test/bin/e2e.test", "x"}),
			[]string{"kubernetes/test/bin/e2e.test", "kubernetes/test/bin/ginkgo"}, "has no kubernetes/test/bin/ginkgo"},
		{"symlink", tgz(t, [2]string{"kubernetes/test/bin/ginkgo", "x"}, [2]string{"kubernetes/test/bin/e2e.test", "->/etc/passwd"}),
			[]string{"kubernetes/test/bin/e2e.test", "kubernetes/test/bin/ginkgo"}, "not a regular file"},
		{"twice", tgz(t, [2]string{"kubernetes/test/bin/ginkgo", "x"}, [2]string{"./kubernetes/test/bin/ginkgo", "y"}),
			[]string{"kubernetes/test/bin/ginkgo"}, "twice"},
		{"not gzip", []byte("plain bytes"), []string{"kubernetes/test/bin/ginkgo"}, "gzip"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tarball := filepath.Join(t.TempDir(), "t.tar.gz")
			if err := os.WriteFile(tarball, c.tarball, 0o644); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			err := Extract(tarball, dir, c.members)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
			if !empty(t, dir) {
				t.Fatal("a refused extraction left files behind")
			}
		})
	}
}

// -elf and -uname answer from pkg/platform's table.
func TestArchTool(t *testing.T) {
	var out strings.Builder
	if err := archTool(&out, "", "arm64", nil); err != nil || out.String() != "aarch64\n" {
		t.Errorf("-uname arm64: %q %v", out.String(), err)
	}
	if err := archTool(&out, "", "mips", nil); err == nil {
		t.Error("-uname mips passed")
	}
	dir := t.TempDir()
	arm := filepath.Join(dir, "arm")
	if err := os.WriteFile(arm, platform.FakeELF("arm64"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := archTool(&out, "arm64", "", []string{arm}); err != nil {
		t.Errorf("-elf arm64 on an arm64 file: %v", err)
	}
	if err := archTool(&out, "amd64", "", []string{arm}); err == nil || !strings.Contains(err.Error(), "built for arm64") {
		t.Errorf("-elf amd64 on an arm64 file: %v", err)
	}
}
