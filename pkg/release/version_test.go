package release

import "testing"

func TestParseRequested(t *testing.T) {
	for _, tc := range []struct {
		in      string
		minorOK bool
		tag     string
		minor   bool
		bad     bool
	}{
		{"v1.36.3", true, "v1.36.3", false, false},
		{"1.36.3", false, "v1.36.3", false, false},
		{"1.36", true, "v1.36.0", true, false},
		{"v1.36", true, "v1.36.0", true, false},
		{"1.36", false, "", false, true},
		{"1", true, "", false, true},
		{"v1.36.x", true, "", false, true},
		{"v1.37.0-rc.1", true, "v1.37.0-rc.1", false, false},
	} {
		r, err := ParseRequested(tc.in, tc.minorOK)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if Tag(r.V) != tc.tag || r.Minor != tc.minor {
			t.Errorf("%q: %s minor=%v err=%v, want %s minor=%v", tc.in, Tag(r.V), r.Minor, err, tc.tag, tc.minor)
		}
	}
}

func TestSatisfies(t *testing.T) {
	minor, _ := ParseRequested("1.36", true)
	exact, _ := ParseRequested("v1.36.3", true)
	for _, tc := range []struct {
		r    Requested
		v    string
		want bool
	}{
		{minor, "1.36.3", true}, {minor, "1.36.0", true}, {minor, "1.37.0", false}, {minor, "1.36.4-rc.0", false},
		{exact, "1.36.3", true}, {exact, "1.36.4", false},
	} {
		v, _ := ParseRequested(tc.v, false)
		if got := tc.r.Satisfies(v.V); got != tc.want {
			t.Errorf("%s satisfies %s: %v, want %v", tc.r.Raw, tc.v, got, tc.want)
		}
	}
}
