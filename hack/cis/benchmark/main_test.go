package main

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type checkYAML struct {
	ID          string `yaml:"id"`
	Audit       string `yaml:"audit"`
	AuditConfig string `yaml:"audit_config"`
	Tests       struct {
		BinOp     string           `yaml:"bin_op"`
		TestItems []map[string]any `yaml:"test_items"`
	} `yaml:"tests"`
	Scored bool `yaml:"scored"`
}

func checks(t *testing.T, text string) map[string]checkYAML {
	t.Helper()
	var doc struct {
		Groups []struct {
			Checks []checkYAML `yaml:"checks"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]checkYAML{}
	for _, g := range doc.Groups {
		for _, c := range g.Checks {
			out[c.ID] = c
		}
	}
	return out
}

// The real cis-1.11 and cis-1.12 of kube-bench v0.16.0 (the benchmarks
// versions.sh maps hardway's minors to): every edit lands once, the result
// is still YAML kube-bench reads, and nothing else changed.
func TestApplyOnTheRelease(t *testing.T) {
	for _, b := range []string{"cis-1.11", "cis-1.12"} {
		t.Run(b, func(t *testing.T) { applyOnTheRelease(t, "testdata/master-"+b+"-v0.16.0.yaml") })
	}
}

func applyOnTheRelease(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got, err := apply(string(b))
	if err != nil {
		t.Fatal(err)
	}
	before, after := checks(t, string(b)), checks(t, got)
	if len(before) != len(after) || len(after) < 60 {
		t.Fatalf("%d checks before, %d after", len(before), len(after))
	}
	changed := map[string]bool{}
	for _, e := range edits {
		changed[e.id] = true
	}
	for id, c := range before {
		a := after[id]
		if changed[id] {
			if a.Audit == c.Audit && a.AuditConfig == c.AuditConfig && a.Tests.BinOp == c.Tests.BinOp {
				t.Errorf("%s: unchanged", id)
			}
			if strings.Contains(a.Audit, "/etc/kubernetes/") {
				t.Errorf("%s: still names kubeadm's files: %s", id, a.Audit)
			}
			if a.Scored != c.Scored {
				t.Errorf("%s: scored changed", id)
			}
			continue
		}
		if a.Audit != c.Audit || len(a.Tests.TestItems) != len(c.Tests.TestItems) {
			t.Errorf("%s changed, but no edit names it", id)
		}
	}
	if c := after["1.1.13"]; c.Tests.BinOp != "or" || len(c.Tests.TestItems) != 2 || c.Tests.TestItems[1]["set"] != false {
		t.Errorf("1.1.13: %+v", c.Tests)
	}
	if c := after["1.4.1"]; c.AuditConfig != "/bin/cat "+schedulerConfig || c.Tests.TestItems[0]["path"] != "{.enableProfiling}" {
		t.Errorf("1.4.1: %+v", c)
	}
}

// A release whose text moved stops the run rather than edit something else.
func TestApplyRefusesAnotherText(t *testing.T) {
	b, err := os.ReadFile("testdata/master-cis-1.12-v0.16.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"an audit changed", "find /etc/kubernetes/pki/ | xargs stat -c %U:%G", "find /etc/kubernetes/pki -type f | xargs stat -c %U:%G"},
		{"a check gone", "      - id: 1.4.1\n", "      - id: 1.4.9\n"},
	} {
		if _, err := apply(strings.Replace(string(b), tc.from, tc.to, 1)); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
