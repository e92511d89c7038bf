package cli

import "github.com/spf13/cobra"

// newCertsCmd is a placeholder until its package lands.
func (a *App) newCertsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "certs",
		Short:  "(not yet implemented)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return errNotYet("certs")
		},
	}
}
