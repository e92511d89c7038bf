package cli

import "github.com/spf13/cobra"

// newPKICmd is a placeholder until its package lands.
func (a *App) newPKICmd() *cobra.Command {
	return &cobra.Command{
		Use:    "pki",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("pki")
		},
	}
}
