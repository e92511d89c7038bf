package inventory

import (
	"strings"
	"testing"
)

func TestSetTopLevel(t *testing.T) {
	const in = `# my lab
cluster: lab   # the name
kubernetesVersion: "v1.35.4"  # pinned on purpose
etcdVersion: v3.6.16
network:
  podCIDR: 10.200.0.0/16
`
	for _, tc := range []struct {
		name  string
		set   map[string]string
		add   []string
		want  string
		edits int
	}{
		{"quoted value, comment kept", map[string]string{"kubernetesVersion": "v1.36.3"}, nil,
			strings.Replace(in, `"v1.35.4"`, `"v1.36.3"`, 1), 1},
		{"plain value", map[string]string{"etcdVersion": "v3.6.17"}, nil,
			strings.Replace(in, "v3.6.16", "v3.6.17", 1), 1},
		{"already so: no edit", map[string]string{"etcdVersion": "v3.6.16"}, nil, in, 0},
		{"missing key not added unless asked", map[string]string{"runcVersion": "v1.5.3"}, nil, in, 0},
		{"missing key added after cluster", map[string]string{"runcVersion": "v1.5.3"}, []string{"runcVersion"},
			strings.Replace(in, "# the name\n", "# the name\nruncVersion: v1.5.3\n", 1), 1},
		{"a nested key is not top-level", map[string]string{"podCIDR": "10.9.0.0/16"}, nil, in, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, edits, err := SetTopLevel([]byte(in), tc.set, tc.add)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", out, tc.want)
			}
			if len(edits) != tc.edits {
				t.Errorf("edits %v, want %d", edits, tc.edits)
			}
		})
	}
	if _, _, err := SetTopLevel([]byte("kubernetesVersion:\n  - a\n"), map[string]string{"kubernetesVersion": "v1.36.3"}, nil); err == nil {
		t.Error("a list value was edited")
	}
	// No cluster: line: the key goes first.
	out, _, err := SetTopLevel([]byte("controlPlane: []\n"), map[string]string{"kubernetesVersion": "v1.36.3"}, []string{"kubernetesVersion"})
	if err != nil || string(out) != "kubernetesVersion: v1.36.3\ncontrolPlane: []\n" {
		t.Errorf("got %q, %v", out, err)
	}
}
