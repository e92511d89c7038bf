package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway"
	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newInitCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "init [FILE]",
		Short: "Write a commented example inventory",
		Long: `Write a commented example inventory to FILE, or to standard output without FILE.
Every key is explained in the file; only controlPlane is required.
An existing FILE is never overwritten unless --force is given.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				_, err := a.Stdout.Write(hardway.ExampleInventory)
				return err
			}
			path := args[0]
			if _, err := os.Stat(path); err == nil && !force {
				return usererr.Errorf("edit it, or pass --force to replace it", "%s already exists", path)
			}
			if err := fsutil.WriteFile(path, hardway.ExampleInventory, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "wrote %s: edit the hosts, then run 'hardway up -i %s'\n", path, path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing file")
	return cmd
}
