package cli

import "github.com/spf13/cobra"

// newLabCmd is a placeholder until its package lands.
func (a *App) newLabCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "lab",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("lab")
		},
	}
}
