package units

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGolden renders testdata/<case>/inventory.yaml and compares the whole
// tree 'hardway render --out' writes, plus the --explain text, with
// testdata/<case>/golden/. Run with -update to accept a change, then read
// the diff: it is exactly what changes on the hosts.
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "*", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("found %d golden cases, want one per minor 1.30 … 1.37", len(cases))
	}
	for _, invPath := range cases {
		dir := filepath.Dir(invPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			inv, err := inventory.Load(invPath)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := render(t, inv)
			if err != nil {
				t.Fatal(err)
			}
			got := t.TempDir()
			if err := WriteTree(got, ms); err != nil {
				t.Fatal(err)
			}
			var explain bytes.Buffer
			if err := Explain(&explain, ms); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(got, "explain.txt"), explain.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "golden")
			if *update {
				if err := os.RemoveAll(golden); err != nil {
					t.Fatal(err)
				}
				if err := os.CopyFS(golden, os.DirFS(got)); err != nil {
					t.Fatal(err)
				}
				return
			}
			compareTrees(t, golden, got)
		})
	}
}

func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatalf("read %s: %v (run 'go test ./pkg/units -run TestGolden -update' to create it)", root, err)
	}
	return out
}

func compareTrees(t *testing.T, want, got string) {
	t.Helper()
	w, g := readTree(t, want), readTree(t, got)
	for name, wb := range w {
		gb, ok := g[name]
		switch {
		case !ok:
			t.Errorf("%s: no longer rendered", name)
		case !bytes.Equal(wb, gb):
			t.Errorf("%s differs from golden (-update to accept):\n--- got ---\n%s", name, gb)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: rendered but not in golden (-update to accept)", name)
		}
	}
}
