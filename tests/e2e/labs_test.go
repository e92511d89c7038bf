package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestLabsDoNotShareANetwork: the suites run side by side (make e2e), so no
// two of them may take the same lab prefix or /24; a clash fails the later
// one at lab up, and only when their runs happen to overlap.
func TestLabsDoNotShareANetwork(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	lab := regexp.MustCompile(`(?:Prefix: |setup\(t, )"(hw[a-z]*)",\s*(?:Net: )?"(10\.240\.\d+)"`)
	prefixes, nets := map[string]string{}, map[string]string{}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lab.FindAllStringSubmatch(string(b), -1) {
			n++
			where := f + " (" + m[1] + " " + m[2] + ")"
			if o, ok := prefixes[m[1]]; ok {
				t.Errorf("lab prefix %s in %s and %s", m[1], o, where)
			}
			if o, ok := nets[m[2]]; ok {
				t.Errorf("lab network %s in %s and %s", m[2], o, where)
			}
			prefixes[m[1]], nets[m[2]] = where, where
		}
	}
	if n < 5 {
		t.Errorf("found %d labs in the suites, want the five of make e2e: the pattern no longer matches how they start", n)
	}
}
