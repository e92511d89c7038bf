package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
)

type upOptions struct {
	dryRun bool
	only   []string
	skip   []string
}

func (a *App) newUpCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build or converge the control plane described by the inventory",
		Long: `Bring the cluster to what the inventory describes, step by step. Each step
first plans (reads only), then acts; a step with nothing to do says "up to date".
Running up twice changes nothing the second time.

With --dry-run every step prints what it would do and nothing is changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			return a.runUp(cmd.Context(), inv, a.stateDir(inv), o)
		},
	}
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().StringSliceVar(&o.only, "only", nil, "run only these steps (comma-separated)")
	cmd.Flags().StringSliceVar(&o.skip, "skip", nil, "skip these steps (comma-separated)")
	return cmd
}

// upSteps are the steps of `hardway up`, in order.
func (a *App) upSteps(_ context.Context, _ *inventory.Inventory, _ state.Dir) []plan.Step {
	return []plan.Step{}
}

func (a *App) runUp(ctx context.Context, inv *inventory.Inventory, st state.Dir, o upOptions) error {
	r := &plan.Runner{Out: a.Stdout, DryRun: o.dryRun, Only: o.only, Skip: o.skip}
	res, err := r.Run(ctx, a.upSteps(ctx, inv, st))
	if err != nil {
		return err
	}
	switch {
	case res.Changes() == 0:
		fmt.Fprintln(a.Stdout, "no changes")
	case o.dryRun:
		fmt.Fprintf(a.Stdout, "%d changes planned; run without --dry-run to apply\n", res.Changes())
	default:
		fmt.Fprintf(a.Stdout, "%d changes applied\n", res.Changes())
	}
	return nil
}
