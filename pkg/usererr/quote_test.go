package usererr

import (
	"os/exec"
	"testing"
)

// Quote makes one shell word of anything, and leaves safe words alone.
func TestQuote(t *testing.T) {
	for _, s := range []string{"controller-1", "/var/lib/x.yaml", "10.240.0.11:22", "a b", "it's", "$(id)", "`id`", "a;b", "x\ny", "", "*", "-n"} {
		q := Quote(s)
		out, err := exec.Command("sh", "-c", "printf %s "+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s: sh printed %q (%v)", s, q, out, err)
		}
	}
	for _, s := range []string{"controller-1", "/var/lib/x.yaml", "10.240.0.11:22", "root@jump"} {
		if Quote(s) != s {
			t.Errorf("Quote(%q) = %s", s, Quote(s))
		}
	}
}
