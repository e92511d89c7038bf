package upgrade

import "testing"

// --to names the recorded target when it is that version, or its minor.
func TestSameTarget(t *testing.T) {
	for _, tc := range []struct {
		to, rec string
		want    bool
	}{
		{"1.36", "v1.36.3", true},
		{"v1.36.3", "v1.36.3", true},
		{"1.36.3", "v1.36.3", true},
		{" v1.36 ", "v1.36.3", true},
		{"1.3", "v1.36.3", false},
		{"1.36.2", "v1.36.3", false},
		{"1.35", "v1.36.3", false},
	} {
		if got := sameTarget(tc.to, tc.rec); got != tc.want {
			t.Errorf("sameTarget(%q, %q) = %v, want %v", tc.to, tc.rec, got, tc.want)
		}
	}
}
