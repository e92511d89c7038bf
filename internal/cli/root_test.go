package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/usererr"
)

// run runs hardway with args and returns exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"no-such-command"}, {"init", "a", "b"}} {
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, "hint:") {
			t.Errorf("%v: code %d stderr %q", args, code, stderr)
		}
	}
}

func TestInitWritesTheExampleAndRefusesToOverwrite(t *testing.T) {
	code, out, _ := run(t, "init")
	if code != 0 || out != string(hardway.ExampleInventory) {
		t.Fatalf("init to stdout: code %d", code)
	}
	p := filepath.Join(t.TempDir(), "inv.yaml")
	if code, _, stderr := run(t, "init", p); code != 0 {
		t.Fatalf("init %s: %d %s", p, code, stderr)
	}
	os.WriteFile(p, []byte("mine"), 0o644)
	code, _, stderr := run(t, "init", p)
	if code != 1 || !strings.Contains(stderr, "hint:  edit it, or pass --force") {
		t.Fatalf("overwrite: %d %q", code, stderr)
	}
	if b, _ := os.ReadFile(p); string(b) != "mine" {
		t.Fatal("existing file was overwritten")
	}
}

// The acceptance case of the foundation issue: a misspelt key, an
// overlapping CIDR and a bad IP exit 3 and are all named with line:col.
func TestInvalidInventoryExit3AllProblems(t *testing.T) {
	p := filepath.Join(t.TempDir(), "inventory.yaml")
	os.WriteFile(p, []byte(`cluster: lab
netwrok: {}
network:
  serviceCIDR: 10.200.0.0/24
controlPlane:
  - name: c1
    address: 10.0.0.300
`), 0o644)
	code, _, stderr := run(t, "up", "--dry-run", "-i", p)
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		p + ":2:1: netwrok: unknown key",
		p + ":4:16: network.serviceCIDR: podCIDR 10.200.0.0/16 and serviceCIDR 10.200.0.0/24 overlap",
		p + ":7:14: controlPlane[0].address: \"10.0.0.300\" is not an IP address",
		"hint:",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// A failed run names its log last.
func TestPrintErrorNamesTheRunLog(t *testing.T) {
	var stderr strings.Builder
	a := &App{Stderr: &stderr}
	err := runlog.WithPath(usererr.New(errors.New("etcd did not become healthy"), "see 'journalctl -u etcd'"), logAt(t))
	a.printError(err)
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "log:   ") || !strings.HasSuffix(last, ".log") {
		t.Fatalf("last line %q of\n%s", last, stderr.String())
	}
}

func logAt(t *testing.T) *runlog.Log {
	l, err := runlog.Open(t.TempDir(), "up", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.End(nil) })
	return l
}

// up --help lists every step, from the steps themselves.
func TestUpHelpListsEveryStep(t *testing.T) {
	var out strings.Builder
	Main(context.Background(), []string{"up", "--help"}, &out, &out)
	for _, s := range cluster.StepDocs() {
		if !strings.Contains(out.String(), "\n  "+s.Name+" ") {
			t.Errorf("--help lacks step %s", s.Name)
		}
	}
}
