package cli

import "github.com/spf13/cobra"

// newUpCmd is a placeholder until its package lands.
func (a *App) newUpCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "up",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("up")
		},
	}
}
