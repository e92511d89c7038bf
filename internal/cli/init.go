package cli

import "github.com/spf13/cobra"

// newInitCmd is a placeholder until its package lands.
func (a *App) newInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "init",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("init")
		},
	}
}
