package e2e

import (
	"os"
	"testing"
)

// sideBySide runs the calling suite in parallel with the other one when
// HARDWAY_E2E_PARALLEL=1 (`make e2e` decides). TestControlPlane, TestEtcdCA
// and TestWorkers can: each has its own lab prefix and /24, its own state and
// download cache, and neither changes the test process's environment or
// working directory (the backup scenario gives the passphrase to a hardway
// process of its own).
func sideBySide(t *testing.T) {
	if os.Getenv("HARDWAY_E2E_PARALLEL") == "1" {
		t.Parallel()
	}
}
