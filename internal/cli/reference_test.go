package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// docs/cli/ is what WriteReference writes now: a flag or command changed
// without 'make docs' fails here (and so in CI).
func TestCLIReferenceIsCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReference(dir); err != nil {
		t.Fatal(err)
	}
	checked := "../../docs/cli"
	names := func(d string) []string {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		slices.Sort(out)
		return out
	}
	want, got := names(dir), names(checked)
	if !slices.Equal(want, got) {
		t.Fatalf("docs/cli has %v, the CLI makes %v: run 'make docs' and commit docs/cli", got, want)
	}
	for _, n := range want {
		a, _ := os.ReadFile(filepath.Join(dir, n))
		b, _ := os.ReadFile(filepath.Join(checked, n))
		if !bytes.Equal(a, b) {
			t.Errorf("docs/cli/%s is out of date: run 'make docs' and commit docs/cli", n)
		}
	}
}
