package cli

import (
	"os"
	"strings"
	"testing"
)

func TestStatePullUsage(t *testing.T) {
	inv, st := pkiSetup(t)
	if code, _, stderr := run(t, "state", "pull", "-i", inv, "--state", st); code != 2 || !strings.Contains(stderr, `"from" not set`) {
		t.Errorf("without --from: exit %d: %s", code, stderr)
	}
	code, _, stderr := run(t, "state", "pull", "-i", inv, "--state", st, "--from", "worker-1")
	if code != 2 || !strings.Contains(stderr, "not a control-plane host") || !strings.Contains(stderr, "controller-0") {
		t.Errorf("--from a worker: exit %d: %s", code, stderr)
	}
	// Refused before any host is dialled or any file written (the lock file aside).
	if es, _ := os.ReadDir(st); len(es) != 1 || es[0].Name() != "lock" {
		t.Errorf("state directory after a refusal: %v", es)
	}
	code, out, _ := run(t, "up", "--help")
	if code != 0 || !strings.Contains(out, "--replace-identity") || !strings.Contains(out, "hardway state pull --from HOST") {
		t.Errorf("up --help: %s", out)
	}
}
