package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

type resetOptions struct {
	hosts  []string
	yes    bool
	dryRun bool
	output string
}

func (a *App) newResetCmd() *cobra.Command {
	var o resetOptions
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove from the hosts what 'up' put there; the state directory stays",
		Long: `reset takes off the hosts what 'hardway up' installed, step by step:

` + stepList(cluster.ResetStepDocs()) + `
What is removed is what the inventory renders for each host and every row of
the component table for its role (a unit, binary or config an earlier
inventory wanted too): see 'hardway render'. Each step first reads the hosts
and plans, then acts; a step with nothing left to remove says "up to date".

It never touches the state directory (the CA, keys, kubeconfigs, backups) or
hardway.lock: a later 'hardway up' builds the same cluster identity onto the
reset hosts, with etcd empty ('hardway restore --from FILE' rebuilds it with
a backup's data instead). Reset ends with what it leaves and how to remove that: rules of
iptables and nftables that are not kube-proxy's nor hardway's, packages and
firewall ports the host step added, the kernel modules and sysctls as they
are until the next boot, directories holding files of someone else's, etcd
data a restore moved aside, an etcd user hardway did not make.

Without --yes, reset prints the plan and asks for the cluster's name on the
terminal; when stdin is not a terminal it refuses. --dry-run prints the
plan and changes nothing. --host resets only the hosts named; part of a
control plane of several hosts needs --yes, since etcd's member list keeps
them (see the warning it prints).`,
		Example: `  hardway reset -i inventory.yaml --dry-run
  hardway reset -i inventory.yaml
  hardway reset -i inventory.yaml --host worker-2 --yes
  hardway reset -i inventory.yaml --yes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runReset(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.hosts, "host", nil, "reset only this host (repeat, or comma-separated; default: every host of the inventory)")
	f.BoolVar(&o.yes, "yes", false, "reset without asking (a script; needed to reset part of a control plane)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress and the question go to stderr)")
	return cmd
}

func (a *App) runReset(ctx context.Context, o resetOptions) error {
	if err := checkOutputFlag(o.output); err != nil {
		return err
	}
	inv, err := a.loadInventory()
	if err != nil {
		return err
	}
	st := a.stateDir(inv)
	out := a.Stdout
	if o.output == "json" {
		out = a.Stderr // progress; the result goes to stdout
	}
	c := cluster.New(inv, cluster.Options{State: st, Out: out, Connect: a.connect})
	defer c.Close()
	hosts, err := c.ResetHosts(o.hosts)
	if err != nil {
		return err
	}
	warnings, needYes := c.ResetWarnings(hosts)
	if !o.dryRun && !o.yes {
		if needYes {
			return usererr.WithCode(fmt.Errorf("reset of %s: %s", hostNames(hosts), warnings[0]), usererr.CodeUsage,
				"add --yes to reset them all the same, or reset every control-plane host; --dry-run shows the plan")
		}
		if !isTerminal(a.Stdin) {
			return usererr.WithCode(errors.New("reset asks for the cluster's name on a terminal, and stdin is not one"), usererr.CodeUsage,
				"add --yes to reset without asking (a script), or --dry-run to see the plan")
		}
	}
	// A shared lock, as a plan takes: no 'up' or daemon repair runs
	// meanwhile, and the state directory gets nothing written, not even a
	// lock file or the holder's note.
	lock, err := st.LockReadOnly(ctx, state.DefaultLockWait)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	steps := c.ResetSteps(hosts)
	if o.dryRun || !o.yes {
		res, err := (&plan.Runner{Out: out, DryRun: true}).Run(ctx, steps)
		if err != nil {
			return err
		}
		left, err := c.ResetLeft(ctx, hosts, false)
		if err != nil {
			return err
		}
		r := c.NewResetResult(res, hosts, warnings, left)
		if o.dryRun {
			return a.printReset(out, o, r)
		}
		if res.Changes() == 0 {
			return a.printReset(out, o, r)
		}
		printResetLeft(out, r, true)
		if err := a.confirmReset(inv, hosts, res.Changes()); err != nil {
			return err
		}
	}
	res, err := (&plan.Runner{Out: out}).Run(ctx, steps)
	if err != nil {
		if usererr.HintOf(err) == "" {
			err = usererr.New(err, "fix the cause and run 'hardway reset' again: each step reads the hosts anew and goes on from what is left")
		}
		return err
	}
	left, err := c.ResetLeft(ctx, hosts, true)
	if err != nil {
		return err
	}
	return a.printReset(out, o, c.NewResetResult(res, hosts, warnings, left))
}

// confirmReset asks for the cluster's name on the terminal.
func (a *App) confirmReset(inv *inventory.Inventory, hosts []inventory.Host, changes int) error {
	fmt.Fprintf(a.Stderr, "\nThis removes what hardway put on %s (%d change(s)).\nType the cluster's name (%s) to go on, anything else stops: ", hostNames(hosts), changes, inv.Cluster)
	line, err := bufio.NewReader(a.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the answer: %w", err)
	}
	if got := strings.TrimSpace(line); got != inv.Cluster {
		return usererr.New(fmt.Errorf("reset stopped: %q is not the cluster's name; nothing was changed", got),
			"type the name of 'cluster:' in "+a.InventoryPath+" ("+inv.Cluster+"), or pass --yes")
	}
	return nil
}

func hostNames(hosts []inventory.Host) string {
	var ns []string
	for _, h := range hosts {
		ns = append(ns, h.Name)
	}
	return strings.Join(ns, ", ")
}

func (a *App) printReset(out io.Writer, o resetOptions, r *cluster.ResetResult) error {
	if o.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintln(out)
	for _, h := range r.Hosts {
		fmt.Fprintf(out, "  %-14s %-14s %d change(s)\n", h.Name, h.Role, h.Changes)
	}
	printResetLeft(out, r, r.DryRun)
	fmt.Fprintf(out, "The state directory %s (CA, keys, kubeconfigs, backups) and %s are untouched: 'hardway up -i %s' builds the same cluster onto the hosts again, with etcd empty.\n",
		usererr.Quote(r.StateDir), usererr.Quote(r.LockFile), usererr.Quote(a.InventoryPath))
	fmt.Fprintln(out, r.Summary)
	return nil
}

// printResetLeft lists what the reset leaves (will leave, before it ran),
// each with the command that removes it.
func printResetLeft(out io.Writer, r *cluster.ResetResult, before bool) {
	if len(r.Left) == 0 {
		return
	}
	if before {
		fmt.Fprintln(out, "\nReset will leave:")
	} else {
		fmt.Fprintln(out, "\nReset left:")
	}
	for _, l := range r.Left {
		where := "every host reset"
		if l.Host != "" {
			where = l.Host
		}
		fmt.Fprintf(out, "  %s: %s\n", where, l.What)
		if l.Command != "" {
			fmt.Fprintf(out, "      %s\n", l.Command)
		}
	}
	fmt.Fprintln(out)
}
