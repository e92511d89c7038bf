package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	goversion "github.com/hashicorp/go-version"
	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newUpgradeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Plan and apply a Kubernetes upgrade, one minor at a time",
		Long: `upgrade moves a running cluster to a newer Kubernetes, one minor at a time.

'hardway upgrade plan' reads what the hosts run and says whether the move is
possible; it changes nothing. 'hardway upgrade apply' takes a backup, then
moves etcd, each apiserver, the controllers and each worker (drained) in
turn, and can be run again to go on after a failure or a kill.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.newUpgradePlanCmd(), a.newUpgradeApplyCmd())
	return cmd
}

// upgradePlanLong is the plan's --help: what it reads and the rules, from
// the rule table itself.
func upgradePlanLong() string {
	var b strings.Builder
	b.WriteString(`plan reads the versions the hosts really run — not only what the inventory
says — and prints, per host and component, now → target; then what changes in
each unit (flags and config settings the target adds or drops, from the
component tables' version gates); then every rule the move would break, each
as one 'blocked:' line with a 'hint:' that fixes it.

What it reads, and only reads (nothing is written to any host, nor to the
inventory or hardway.lock):
  - on every control-plane host: etcd, kube-apiserver, kube-controller-manager
    and kube-scheduler --version (the binaries the units run);
  - on every worker: containerd, runc, kubelet and kube-proxy --version;
  - through the API: each worker's Node (status.nodeInfo.kubeletVersion),
    the kubelet that really runs.
A host or Node that cannot be read is shown and blocks the plan.

The target: --to 1.36 (the newest 1.36 patch the release mirror publishes;
the inventory's own 1.36 version when the mirror cannot be asked) or
--to v1.36.3; without --to, the minor after the running control plane. etcd,
containerd and runc follow the target's tested defaults unless the inventory
pins them.

The rules:
`)
	for _, r := range skew.Rules() {
		fmt.Fprintf(&b, "  %-29s %s\n", r.Name, r.Doc)
	}
	b.WriteString(`
Exit code 0 when the upgrade is possible, 1 when it is blocked.

Example:
  hardway upgrade plan -i inventory.yaml --to 1.36
  hardway upgrade plan -i inventory.yaml -o json | jq '.violations'`)
	return b.String()
}

func (a *App) newUpgradePlanCmd() *cobra.Command {
	var to, output string
	var allowDowngrade, offline bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what an upgrade would move and whether the version-skew rules allow it",
		Long:  upgradePlanLong(),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			if to != "" {
				if _, err := release.ParseRequested(to, true); err != nil {
					return usageError{fmt.Errorf("--to: %w", err)}
				}
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			st := a.stateDir(inv)
			// A plan only reads, locally too: no run log is written.
			lg := runlog.Discard()
			c := cluster.New(inv, cluster.Options{State: st, Trace: lg.Command})
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			opt := cluster.UpgradeOptions{To: to, AllowDowngrade: allowDowngrade}
			if !offline {
				opt.LatestPatch = func(ctx context.Context, minor string) (*goversion.Version, error) {
					return release.LatestPatch(ctx, inv.Releases.Kubernetes, minor)
				}
			}
			p, err := c.PlanUpgrade(ctx, opt)
			if err == nil {
				if output == "json" {
					err = writeUpgradePlanJSON(a.Stdout, p)
				} else {
					err = writeUpgradePlan(a.Stdout, p)
				}
			}
			if err == nil && p.Blocked() {
				err = usererr.New(fmt.Errorf("upgrade to %s blocked: %d rule(s) broken", p.Target.Kubernetes, len(p.Violations)),
					"each blocked line above has its own hint; nothing was changed")
			}
			return err
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "target Kubernetes: a minor (1.36) or an exact version (v1.36.3); default: the minor after the running control plane")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (tables) or json")
	cmd.Flags().BoolVar(&allowDowngrade, "allow-downgrade", false, "plan a target older than what runs without refusing it")
	cmd.Flags().BoolVar(&offline, "offline", false, "do not ask the release mirror for the newest patch of a --to minor")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "time limit for reading every host")
	return cmd
}

// writeUpgradePlan prints the moves, the unit changes and the violations.
func writeUpgradePlan(w io.Writer, p *cluster.UpgradePlan) error {
	target := "target: Kubernetes " + p.Target.Kubernetes + ", etcd " + p.Target.Etcd
	if p.Target.Containerd != "" {
		target += ", containerd " + p.Target.Containerd + ", runc " + p.Target.Runc
	}
	fmt.Fprintln(w, target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCOMPONENT\tNOW\tTARGET\tCHANGE")
	for _, m := range p.Moves {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Host, m.Component, m.Now, m.Target, m.Change)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Changes) > 0 {
		fmt.Fprintln(w, "\nunit changes:")
		last := ""
		for _, c := range p.Changes {
			if c.Component != last {
				fmt.Fprintf(w, "  %s:\n", c.Component)
				last = c.Component
			}
			line := "    " + c.Text()
			if c.Reason != "" {
				line += "  (" + c.Reason + ")"
			}
			fmt.Fprintln(w, line+"  ["+strings.Join(c.Hosts, ",")+"]")
		}
	} else {
		fmt.Fprintln(w, "\nunit changes: none beyond the binaries")
	}
	for _, n := range p.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
	if len(p.Violations) == 0 {
		_, err := fmt.Fprintln(w, "\nthe upgrade is possible: every version-skew rule holds")
		return err
	}
	fmt.Fprintln(w)
	for _, v := range p.Violations {
		fmt.Fprintf(w, "blocked: %s: %s\n  hint: %s\n", v.Rule, v.Message, v.Fix)
	}
	return nil
}

func writeUpgradePlanJSON(w io.Writer, p *cluster.UpgradePlan) error {
	out := struct {
		*cluster.UpgradePlan
		Possible bool `json:"possible"`
	}{p, !p.Blocked()}
	if out.Changes == nil {
		out.Changes = []units.Change{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write the plan as JSON: %w", err)
	}
	return nil
}
