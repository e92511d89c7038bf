package cli

import (
	"fmt"

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
