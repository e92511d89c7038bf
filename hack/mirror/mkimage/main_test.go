package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// A -file keeps its setuid and setgid bits (nonewprivs' nnp is setuid root);
// other files still get 0755 or 0644, as the existing images' do.
func TestLayerTarFileModes(t *testing.T) {
	dir := t.TempDir()
	for f, mode := range map[string]os.FileMode{
		"plain": 0o600, "exe": 0o700, "suid": 0o755 | os.ModeSetuid, "sgid": 0o711 | os.ModeSetgid,
	} {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // not subject to the umask
			t.Fatal(err)
		}
	}
	var files []string
	for _, f := range []string{"plain", "exe", "suid", "sgid"} {
		files = append(files, filepath.Join(dir, f)+":/usr/local/bin/"+f)
	}
	data, err := layerTar("", files, time.Unix(0, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h.Mode
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: owner %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
	}
	want := map[string]int64{
		"usr/": 0o755, "usr/local/": 0o755, "usr/local/bin/": 0o755,
		"usr/local/bin/plain": 0o644, "usr/local/bin/exe": 0o755,
		"usr/local/bin/suid": 0o4755, "usr/local/bin/sgid": 0o2755,
	}
	for n, m := range want {
		if got[n] != m {
			t.Errorf("%s: mode %o, want %o", n, got[n], m)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
}

// -user is the config's User; without it the config has none.
func TestRunUser(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	const ref = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	for _, user := range []string{"", "1234"} {
		out := filepath.Join(dir, "img"+user+".tar")
		if err := run(ref, "amd64", "2026-01-01T00:00:00Z", "", "/bin/sh", user, "", out, []string{src + ":/f"}); err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(out, &tag)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != user {
			t.Errorf("-user %q: User %q", user, cf.Config.User)
		}
		if has := bytes.Contains(raw, []byte(`"User"`)); has != (user != "") {
			t.Errorf("-user %q: config %s", user, raw)
		}
	}
}
