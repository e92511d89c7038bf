package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/units"
)

func blockedPlan() *cluster.UpgradePlan {
	return &cluster.UpgradePlan{
		Target: cluster.UpgradeTarget{Kubernetes: "v1.37.0", Etcd: "v3.7.0"},
		Result: skew.Result{
			Moves: []skew.Move{{Host: "c1", Component: "kube-apiserver", Now: "v1.35.4", Target: "v1.37.0", Change: skew.Upgrade}},
			Violations: []skew.Violation{{Rule: "control-plane-one-minor", Host: "c1", Component: "kube-apiserver",
				Message: "kube-apiserver on c1 runs v1.35.4; v1.37.0 skips 1.36", Fix: "upgrade to v1.36.x first: hardway upgrade apply --to 1.36"}},
		},
		Changes: []units.Change{{Component: "etcd", Kind: "flag", Op: "removed", Name: "--snapshot-count", From: "10000", Reason: "3.5's default", Hosts: []string{"c1"}}},
	}
}

// The text form: the moves table, the unit changes, then each violation
// as blocked + hint.
func TestWriteUpgradePlan(t *testing.T) {
	var b bytes.Buffer
	if err := writeUpgradePlan(&b, blockedPlan()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"HOST  COMPONENT       NOW      TARGET   CHANGE\nc1    kube-apiserver  v1.35.4  v1.37.0  upgrade\n",
		"unit changes:\n  etcd:\n    - --snapshot-count=10000  (3.5's default)  [c1]\n",
		"blocked: control-plane-one-minor: kube-apiserver on c1 runs v1.35.4; v1.37.0 skips 1.36\n  hint: upgrade to v1.36.x first: hardway upgrade apply --to 1.36\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	p := blockedPlan()
	p.Violations, p.Changes = nil, nil
	b.Reset()
	writeUpgradePlan(&b, p)
	if !strings.Contains(b.String(), "the upgrade is possible") || strings.Contains(b.String(), "blocked:") {
		t.Errorf("a possible plan:\n%s", b.String())
	}
}

// The JSON form has the same data, and says whether the upgrade is possible.
func TestWriteUpgradePlanJSON(t *testing.T) {
	var b bytes.Buffer
	if err := writeUpgradePlanJSON(&b, blockedPlan()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Possible   bool
		Target     struct{ Kubernetes string }
		Moves      []skew.Move
		Violations []skew.Violation
		Changes    []units.Change
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got.Possible || got.Target.Kubernetes != "v1.37.0" || len(got.Moves) != 1 || len(got.Violations) != 1 ||
		got.Violations[0].Fix == "" || len(got.Changes) != 1 {
		t.Errorf("json:\n%s", b.String())
	}
}

// Bad flags are usage errors (exit 2), before any inventory or host is read.
func TestUpgradePlanUsage(t *testing.T) {
	for _, args := range [][]string{
		{"upgrade", "plan", "--to", "1.x", "-i", "/nonexistent/inventory.yaml"},
		{"upgrade", "plan", "-o", "yaml", "-i", "/nonexistent/inventory.yaml"},
		{"upgrade", "plan", "extra"},
	} {
		if code, _, stderr := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	code, out, _ := run(t, "upgrade", "plan", "--help")
	if code != 0 || !strings.Contains(out, "etcd-patch-floor") || !strings.Contains(out, "Example:") {
		t.Errorf("--help: %d\n%s", code, out)
	}
}

// apply's usage errors stop before the inventory is read; a missing
// backup passphrase stops before any host is asked.
func TestUpgradeApplyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"upgrade", "apply", "--to", "1.x", "-i", "/nonexistent/inventory.yaml"},
		{"upgrade", "apply", "-o", "yaml", "-i", "/nonexistent/inventory.yaml"},
		{"upgrade", "apply", "--drain-timeout", "0s", "-i", "/nonexistent/inventory.yaml"},
		{"upgrade", "apply", "extra"},
	} {
		if code, _, stderr := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte("controlPlane:\n  - {name: c1, address: 192.0.2.1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HARDWAY_BACKUP_PASSPHRASE", "")
	code, _, stderr := run(t, "upgrade", "apply", "-i", inv, "--to", "1.37")
	if code != 2 || !strings.Contains(stderr, "takes a backup first") || !strings.Contains(stderr, "--no-backup") {
		t.Errorf("no passphrase: exit %d\n%s", code, stderr)
	}
	code, out, _ := run(t, "upgrade", "apply", "--help")
	if code != 0 || !strings.Contains(out, "followers first, the leader last") || !strings.Contains(out, "upgrade.yaml") {
		t.Errorf("--help: %d\n%s", code, out)
	}
}
