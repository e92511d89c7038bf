package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
)

// loadInventory loads -i and prints its warnings; every command that reads
// the inventory goes through here so warnings look the same everywhere.
func (a *App) loadInventory() (*inventory.Inventory, error) {
	inv, err := inventory.Load(a.InventoryPath)
	if err != nil {
		return nil, err
	}
	for _, w := range inv.Warnings {
		fmt.Fprintln(a.Stderr, w.String())
	}
	return inv, nil
}

// stateDir is --state, or .hardway next to the inventory.
func (a *App) stateDir(inv *inventory.Inventory) state.Dir {
	if a.StateDir != "" {
		return state.Dir(a.StateDir)
	}
	return state.Dir(inv.DefaultStateDir())
}

// isDryRun says whether cmd was asked only to plan (--dry-run).
func isDryRun(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("dry-run")
	return f != nil && f.Value.String() == "true"
}

// loadLocked loads the inventory and takes its state directory's lock, for
// a command that writes the state or pushes from it, so that two hardway
// processes never mix generations of keys. The caller unlocks.
func (a *App) loadLocked(cmd *cobra.Command) (*inventory.Inventory, state.Dir, *state.Lock, error) {
	inv, err := a.loadInventory()
	if err != nil {
		return nil, "", nil, err
	}
	dir := a.stateDir(inv)
	what := fmt.Sprintf("%s -i %s", cmd.CommandPath(), a.InventoryPath)
	// A plan only reads: it leaves a killed run's unfinished pair write to
	// the next real run (Lock finishes it), and says so.
	if isDryRun(cmd) {
		lock, err := dir.LockReadOnly(cmd.Context(), state.DefaultLockWait)
		if err != nil {
			return nil, "", nil, err
		}
		if p := dir.PendingPairs(); len(p) > 0 {
			fmt.Fprintf(a.Stderr, "warning: a killed run left the write of %s unfinished; the next run without --dry-run finishes it first, and this plan reads the pair as it is\n", strings.Join(p, ", "))
		}
		return inv, dir, lock, nil
	}
	lock, err := dir.Lock(cmd.Context(), what, state.DefaultLockWait)
	if err != nil {
		return nil, "", nil, err
	}
	return inv, dir, lock, nil
}
