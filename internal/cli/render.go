package cli

import "github.com/spf13/cobra"

// newRenderCmd is a placeholder until its package lands.
func (a *App) newRenderCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "render",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("render")
		},
	}
}
