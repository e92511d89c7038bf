package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/state"
)

// A plan only reads: with --dry-run the lock leaves a killed run's
// unfinished pair write as it is and says so; without it, the write is
// finished before the command reads the pair.
func TestLoadLockedDryRunLeavesAPendingPairWrite(t *testing.T) {
	inv, st := pkiSetup(t)
	if code, _, stderr := run(t, "pki", "-i", inv, "--state", st); code != 0 {
		t.Fatalf("pki: %d %s", code, stderr)
	}
	dir := state.Dir(st)
	// What WritePair leaves when killed after its record: the new pair is
	// in the record only.
	sched, _ := os.ReadFile(dir.Cert("kube-scheduler"))
	schedKey, _ := os.ReadFile(dir.Key("kube-scheduler"))
	rec, _ := json.Marshal(map[string]string{"cert": string(sched), "key": string(schedKey)})
	pending := filepath.Join(dir.PKIDir(), "admin.pending")
	if err := os.WriteFile(pending, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(dir.Cert("admin"))

	for _, dryRun := range []bool{true, false} {
		var stderr strings.Builder
		a := &App{InventoryPath: inv, StateDir: st, Stderr: &stderr}
		cmd := &cobra.Command{Use: "up"}
		cmd.Flags().Bool("dry-run", dryRun, "")
		cmd.SetContext(t.Context())
		_, _, lock, err := a.loadLocked(cmd)
		if err != nil {
			t.Fatal(err)
		}
		lock.Unlock()
		admin, _ := os.ReadFile(dir.Cert("admin"))
		_, recErr := os.Stat(pending)
		if dryRun {
			if recErr != nil || string(admin) != string(before) || !strings.Contains(stderr.String(), "the write of admin unfinished") {
				t.Errorf("--dry-run: record %v, admin changed %v, stderr %q", recErr, string(admin) != string(before), stderr.String())
			}
		} else if !os.IsNotExist(recErr) || string(admin) != string(sched) {
			t.Errorf("a real run: record %v, admin finished %v", recErr, string(admin) == string(sched))
		}
	}
}
