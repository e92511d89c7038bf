package cli

import (
	"fmt"

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

// loadLocked loads the inventory and takes its state directory's lock, for
// a command that writes the state or pushes from it, so that two hardway
// processes never mix generations of keys. The caller unlocks.
func (a *App) loadLocked(cmd *cobra.Command) (*inventory.Inventory, state.Dir, *state.Lock, error) {
	inv, err := a.loadInventory()
	if err != nil {
		return nil, "", nil, err
	}
	dir := a.stateDir(inv)
	lock, err := dir.Lock(cmd.Context(), fmt.Sprintf("%s -i %s", cmd.CommandPath(), a.InventoryPath), state.DefaultLockWait)
	if err != nil {
		return nil, "", nil, err
	}
	return inv, dir, lock, nil
}
