package remote_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/remote"
)

func TestReadFiles(t *testing.T) {
	h, _ := connect(t)
	dir := t.TempDir()
	bin := make([]byte, 70000) // longer than one base64 line of most tools
	rand.Read(bin)
	files := map[string][]byte{
		"key":   []byte("-----BEGIN EC PRIVATE KEY-----\nsecret\n-----END EC PRIVATE KEY-----\n"),
		"bin":   bin,
		"empty": {},
		"sp ce": []byte("x"),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{filepath.Join(dir, "key"), filepath.Join(dir, "missing"), filepath.Join(dir, "bin"),
		filepath.Join(dir, "empty"), filepath.Join(dir, "sp ce")}
	got, err := remote.ReadFiles(t.Context(), h, paths)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		want, ok := files[filepath.Base(paths[i])]
		if c.Path != paths[i] || c.Exists != ok || !bytes.Equal(c.Data, want) {
			t.Errorf("%s: exists %v, %d bytes; want %v, %d bytes", paths[i], c.Exists, len(c.Data), ok, len(want))
		}
	}

	_, err = remote.ReadFiles(t.Context(), h, []string{dir})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := remote.ReadFiles(t.Context(), h, []string{"relative"}); err == nil {
		t.Error("a relative path was read")
	}
}
