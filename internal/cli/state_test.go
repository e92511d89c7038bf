package cli

import (
	"os"
	"strings"
	"testing"
)

func TestStatePullUsage(t *testing.T) {
	inv, st := pkiSetup(t)
	if code, _, stderr := run(t, "state", "pull", "-i", inv, "--state", st); code != 2 || !strings.Contains(stderr, "state pull needs a HOST") || !strings.Contains(stderr, "hardway state pull controller-1") {
		t.Errorf("without HOST: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, "state", "pull", "-i", inv, "--state", st, "controller-0", "--from", "controller-1"); code != 2 || !strings.Contains(stderr, "two hosts") {
		t.Errorf("HOST and another --from: exit %d: %s", code, stderr)
	}
	// HOST, and --from, its earlier spelling.
	for _, args := range [][]string{{"worker-1"}, {"--from", "worker-1"}} {
		code, _, stderr := run(t, append([]string{"state", "pull", "-i", inv, "--state", st}, args...)...)
		if code != 2 || !strings.Contains(stderr, "not a control-plane host") || !strings.Contains(stderr, "controller-0") {
			t.Errorf("%v, a worker: exit %d: %s", args, code, stderr)
		}
	}
	// Refused before any host is dialled or any file written (the lock file aside).
	if es, _ := os.ReadDir(st); len(es) != 1 || es[0].Name() != "lock" {
		t.Errorf("state directory after a refusal: %v", es)
	}
	code, out, _ := run(t, "up", "--help")
	if code != 0 || !strings.Contains(out, "--replace-identity") || !strings.Contains(out, "hardway state pull HOST") {
		t.Errorf("up --help: %s", out)
	}
}
