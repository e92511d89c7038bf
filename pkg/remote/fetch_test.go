package remote_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/remote"
)

// The host (this machine, through the real sshd) downloads from an HTTP
// server on loopback with its own curl, checks with its own sha256sum and
// tar, and installs; a tampered download is deleted and nothing installed.

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func tgz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range []string{"./", "./bridge", "bin/ctr", "README.md"} {
		data, ok := files[name]
		if !ok && name != "./" {
			continue
		}
		hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}
		if name == "./" {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// leftovers lists files hardway's temporaries would leave in dirs.
func leftovers(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".hardway-") || strings.HasPrefix(e.Name(), ".fetch-") {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

func TestFetchOnHost(t *testing.T) {
	h, _ := connect(t)
	ctx := context.Background()
	kubectl := bytes.Repeat([]byte("kubectl binary "), 70000) // about 1 MB
	bridge, ctr := []byte("#!bridge plugin\n"), []byte("ctr binary bytes")
	archive := tgz(t, map[string][]byte{"./bridge": bridge, "bin/ctr": ctr, "README.md": []byte("not installed")})
	tampered := append([]byte{}, kubectl...)
	tampered[len(tampered)/2] ^= 1
	files := map[string][]byte{"/release/kubectl": kubectl, "/release/a.tgz": archive, "/evil/kubectl": tampered}
	var mu sync.Mutex
	var hits []string
	nhits := func() int { mu.Lock(); defer mu.Unlock(); return len(hits) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.URL.Path)
		mu.Unlock()
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()

	base := t.TempDir()
	bin, cni, work := filepath.Join(base, "bin"), filepath.Join(base, "opt/cni/bin"), filepath.Join(base, "work")
	cache := filepath.Join(base, "sums")
	marker := filepath.Join(base, "restart/kubectl")
	target := filepath.Join(bin, "kubectl")
	file := func(p string, b []byte) remote.File {
		return remote.File{Path: p, Mode: 0o755, SHA256: sum(b), Size: int64(len(b))}
	}

	t.Run("a plain file: downloaded next to its target, checked, installed", func(t *testing.T) {
		d := remote.Download{Name: "kubectl", URL: srv.URL + "/release/kubectl", SHA256: sum(kubectl), Size: int64(len(kubectl)),
			Installs: []remote.Install{{File: file(target, kubectl)}}, WorkDir: work}
		n0 := remote.HostFetched()
		if err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{Markers: []string{marker}, Cache: cache}); err != nil {
			t.Fatal(err)
		}
		if n := remote.HostFetched() - n0; n != int64(len(kubectl)) {
			t.Errorf("counted %d bytes fetched, want %d", n, len(kubectl))
		}
		got, err := os.ReadFile(target)
		if err != nil || !bytes.Equal(got, kubectl) {
			t.Fatalf("installed %d bytes (%v), want %d", len(got), err, len(kubectl))
		}
		if m, _, _, _ := stat(t, target); m != 0o755 {
			t.Errorf("mode %o", m)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("marker: %v", err)
		}
		if c, _ := os.ReadFile(cache); !strings.Contains(string(c), target+" ") || !strings.Contains(string(c), sum(kubectl)) {
			t.Errorf("stat cache lacks the file: %q", c)
		}
		if l := leftovers(t, bin, work); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})

	t.Run("an archive: checked, then each member unpacked and checked, byte-identical", func(t *testing.T) {
		// A work directory a killed run left an hour ago goes; a young one stays.
		lost, young := filepath.Join(work, ".fetch-lost"), filepath.Join(work, ".fetch-young")
		os.MkdirAll(lost, 0o700)
		os.MkdirAll(young, 0o700)
		old := time.Now().Add(-2 * time.Hour)
		os.Chtimes(lost, old, old)
		d := remote.Download{Name: "cni.tgz", URL: srv.URL + "/release/a.tgz", SHA256: sum(archive), Size: int64(len(archive)), Archive: true,
			Installs: []remote.Install{{File: file(filepath.Join(cni, "bridge"), bridge), Member: "bridge"},
				{File: file(filepath.Join(bin, "ctr"), ctr), Member: "bin/ctr"}}, WorkDir: work}
		if err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{Cache: cache}); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string][]byte{filepath.Join(cni, "bridge"): bridge, filepath.Join(bin, "ctr"): ctr} {
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %q %v", p, got, err)
			}
		}
		if _, err := os.Stat(filepath.Join(cni, "README.md")); err == nil {
			t.Error("an unwanted member was unpacked")
		}
		if _, err := os.Stat(lost); err == nil {
			t.Error("a lost work directory stays")
		}
		if err := os.Remove(young); err != nil {
			t.Errorf("a young work directory: %v", err)
		}
		if l := leftovers(t, bin, cni, work); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})

	t.Run("a tampered download is deleted on the host and nothing is installed", func(t *testing.T) {
		before, _ := os.ReadFile(target)
		newTarget := filepath.Join(bin, "kubectl-new")
		for _, d := range []remote.Download{
			// straight to the target's directory
			{Name: "kubectl", URL: srv.URL + "/evil/kubectl", SHA256: sum(kubectl), Size: int64(len(kubectl)),
				Installs: []remote.Install{{File: file(newTarget, kubectl)}}, WorkDir: work},
			// through the work directory (two targets)
			{Name: "kubectl", URL: srv.URL + "/evil/kubectl", SHA256: sum(kubectl), Size: int64(len(kubectl)),
				Installs: []remote.Install{{File: file(newTarget, kubectl)}, {File: file(target, kubectl)}}, WorkDir: work},
		} {
			err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{})
			var de *remote.DigestError
			if !errors.As(err, &de) {
				t.Fatalf("want a DigestError, got %v", err)
			}
			if de.Got != sum(tampered) || de.Want != sum(kubectl) || de.Name != "kubectl" || de.URL != d.URL || de.Host != "controller-1" {
				t.Errorf("%+v", de)
			}
			if !strings.Contains(err.Error(), "deleted, nothing installed") {
				t.Errorf("message: %v", err)
			}
			if _, err := os.Stat(newTarget); err == nil {
				t.Fatal("the tampered file was installed")
			}
			if got, _ := os.ReadFile(target); !bytes.Equal(got, before) {
				t.Fatal("the installed file changed")
			}
			if l := leftovers(t, bin, work); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
		}
	})

	t.Run("a member that is not the pinned one: no member of the archive is installed", func(t *testing.T) {
		other := filepath.Join(base, "other")
		d := remote.Download{Name: "cni.tgz", URL: srv.URL + "/release/a.tgz", SHA256: sum(archive), Size: int64(len(archive)), Archive: true,
			Installs: []remote.Install{{File: file(filepath.Join(other, "ctr"), ctr), Member: "bin/ctr"},
				{File: file(filepath.Join(other, "bridge"), []byte("pinned other bytes")), Member: "bridge"}}, WorkDir: work}
		err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{})
		var de *remote.DigestError
		if !errors.As(err, &de) || de.Name != "cni.tgz:bridge" || de.Want != sum([]byte("pinned other bytes")) || de.Got != sum(bridge) {
			t.Fatalf("want a DigestError for the member, got %v", err)
		}
		if ents, _ := os.ReadDir(other); len(ents) != 0 {
			t.Fatalf("installed despite the mismatch: %v", ents)
		}
		if l := leftovers(t, work); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})

	t.Run("a missing file fails with the server's answer", func(t *testing.T) {
		d := remote.Download{Name: "kubectl", URL: srv.URL + "/nothing", SHA256: sum(kubectl), Size: 1,
			Installs: []remote.Install{{File: file(filepath.Join(bin, "nothing"), kubectl)}}}
		err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{})
		var de *remote.DigestError
		if err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "404") {
			t.Fatalf("want curl's 404, got %v", err)
		}
		if l := leftovers(t, bin); len(l) > 0 {
			t.Errorf("left behind: %v", l)
		}
	})

	t.Run("only http and https, and only pinned bytes", func(t *testing.T) {
		for _, d := range []remote.Download{
			{Name: "x", URL: "file:///etc/passwd", SHA256: sum(kubectl), Size: 1, Installs: []remote.Install{{File: file(target, kubectl)}}},
			{Name: "x", URL: srv.URL + "/release/kubectl", Size: 1, Installs: []remote.Install{{File: file(target, kubectl)}}},
			{Name: "x", URL: srv.URL + "/release/kubectl", SHA256: sum(kubectl), Size: 1, Installs: []remote.Install{{File: remote.File{Path: target}}}},
		} {
			n := nhits()
			if err := remote.FetchOnHost(ctx, h, d, remote.PutOptions{}); err == nil {
				t.Errorf("%+v: accepted", d)
			}
			if nhits() != n {
				t.Errorf("%+v: the host downloaded", d)
			}
		}
	})
}
