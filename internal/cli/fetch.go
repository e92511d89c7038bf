package cli

import "github.com/spf13/cobra"

// newFetchCmd is a placeholder until its package lands.
func (a *App) newFetchCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "fetch",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("fetch")
		},
	}
}
