package cli

import (
	"strings"
	"testing"
)

// --stop-after names a phase after which a later run goes on: trust-both or
// reissue; anything else (drop-old ends the rotation anyway) is a usage
// error before the inventory is read.
func TestRotateCAStopAfter(t *testing.T) {
	for _, bad := range []string{"drop-old", "new-ca", "1"} {
		code, _, stderr := run(t, "rotate", "ca", "--which", "kubernetes", "--stop-after", bad, "-i", "/nonexistent/inventory.yaml")
		if code != 2 || !strings.Contains(stderr, "--stop-after") || !strings.Contains(stderr, "trust-both or reissue") {
			t.Errorf("--stop-after %s: exit %d: %s", bad, code, stderr)
		}
	}
}
