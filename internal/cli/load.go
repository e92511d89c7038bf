package cli

import (
	"context"
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

// lockState takes the state directory's lock for a command that writes it
// or pushes from it, so that two hardway processes never mix generations
// of keys. The caller unlocks.
func (a *App) lockState(ctx context.Context, cmd *cobra.Command, dir state.Dir) (*state.Lock, error) {
	return dir.Lock(ctx, fmt.Sprintf("%s -i %s", cmd.CommandPath(), a.InventoryPath), state.DefaultLockWait)
}
