// Package cli holds hardway's cobra commands. It is the only place that
// prints errors and picks exit codes: packages return errors (with hints, see
// pkg/usererr) and this package shows them.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/usererr"
)

// App carries what every command needs; there are no package globals.
type App struct {
	Stdout io.Writer
	Stderr io.Writer
	// Stdin is where a command that asks reads the answer (nil: none; a
	// reader that is not a terminal is never asked).
	Stdin io.Reader

	// Global flags.
	InventoryPath string // -i, --inventory
	StateDir      string // --state; default .hardway next to the inventory

	// connect opens the connection to a host for reset (nil: SSH); tests
	// pass fakes.
	connect func(ctx context.Context, cfg remote.Config) (remote.Host, error)
}

// Main runs hardway with args and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &App{Stdout: stdout, Stderr: stderr, Stdin: os.Stdin}
	root := app.newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	return app.printError(err)
}

// pkiAlias is `hardway certs generate`, the earlier spelling of `certs generate`:
// hidden from help, working as before.
func (a *App) pkiAlias() *cobra.Command {
	c := a.newPKICmd()
	c.Use, c.Hidden = "pki", true
	c.Short += " (the earlier spelling of 'hardway certs generate')"
	return c
}

// usageError marks errors from flag and argument parsing (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func (a *App) printError(err error) int {
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		// A usage error that knows its fix says it; the others point at --help.
		hint := usererr.HintOf(err)
		if hint == "" {
			hint = "see 'hardway --help' or 'hardway <command> --help'"
		}
		fmt.Fprintf(a.Stderr, "error: %v\nhint:  %s\n", err, hint)
		return usererr.CodeUsage
	}
	fmt.Fprintf(a.Stderr, "error: %v\n", err)
	if h := usererr.HintOf(err); h != "" {
		lines := strings.Split(strings.TrimRight(h, "\n"), "\n")
		fmt.Fprintf(a.Stderr, "hint:  %s\n", lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(a.Stderr, "       %s\n", l)
		}
	}
	var le *runlog.Error
	if errors.As(err, &le) {
		fmt.Fprintf(a.Stderr, "log:   %s\n", le.Path)
	}
	return usererr.CodeOf(err)
}

// isCobraUsage recognises the errors cobra itself returns for bad input; it
// has no typed errors for them.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag",
		"flag needs an argument", "invalid argument", "accepts ", "requires at least", "required flag"} {
		if strings.HasPrefix(s, p) || strings.Contains(s, " "+p) {
			return true
		}
	}
	return false
}

func (a *App) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "hardway",
		Short: "Build a Kubernetes control plane the hard way, reproducibly",
		Long: `hardway builds etcd, kube-apiserver, kube-controller-manager and kube-scheduler
as plain systemd services on your hosts, from one inventory file.

Every file it writes is one you can read: certificates under .hardway/pki,
kubeconfigs, the encryption config, and the systemd units it pushes
(see 'hardway render'). Running it twice changes nothing.

Start with:
  hardway init > inventory.yaml     # edit the hosts, or let init read them:
  hardway init --hosts root@10.0.0.11,root@10.0.0.12,root@10.0.0.13 inventory.yaml
  hardway up -i inventory.yaml
  hardway verify -i inventory.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVarP(&a.InventoryPath, "inventory", "i", "inventory.yaml", "inventory file")
	root.PersistentFlags().StringVar(&a.StateDir, "state", "", "state directory (default: .hardway next to the inventory)")
	for _, c := range []*cobra.Command{
		a.newVersionCmd(),
		a.newInitCmd(),
		a.pkiAlias(),
		a.newCertsCmd(),
		a.newUpCmd(),
		a.newVerifyCmd(),
		a.newSmokeCmd(),
		a.newKubeconfigCmd(),
		a.newFetchCmd(),
		a.newRenderCmd(),
		a.newLabCmd(),
		a.newDaemonCmd(),
		a.newStateCmd(),
		a.newEtcdCmd(),
		a.newBackupCmd(),
		a.newRestoreCmd(),
		a.newResetCmd(),
		a.newRotateCmd(),
		a.newUpgradeCmd(),
	} {
		root.AddCommand(c)
	}
	return root
}
