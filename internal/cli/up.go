package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

type upOptions struct {
	dryRun             bool
	only               []string
	skip               []string
	output             string
	acceptNewHostKeys  bool
	removeStaleMembers bool
	cacheDir           string
	offline            bool
	updateLock         bool
	replaceIdentity    bool
	// renew: `certs renew` of these leaves (the renew steps, not up's).
	renew []string
}

func (a *App) newUpCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build or converge the cluster described by the inventory",
		Long: `Bring the cluster to what the inventory describes, step by step:

` + stepList(cluster.StepDocs()) + `
Each step first plans (reads only), then acts; a step with nothing to do
says "up to date", and a run with nothing to do says "no changes". Only the
services whose files changed are restarted. A run that fails midway leaves
markers on the hosts, and the next run finishes the restarts.

With --dry-run every step prints what it would do (files that would change,
with a short diff) and nothing is changed.

Before anything is written, the identity step compares each host's CA
certificates, service-account public key and encryption key with the state
directory. If the hosts have them and the state directory does not (it was
lost, or this is a fresh clone), or they differ, up stops and names each file:
'hardway state pull HOST' rebuilds the state directory from the hosts.
--replace-identity replaces the hosts' identity with the state directory's on
purpose: every certificate, service-account token and stored Secret made with
the old one stops working. --only and --skip never bypass the check.

Every run writes a log to logs/ in the state directory: each progress line
and each command run on a host, with its timing and its whole stderr. A
failed run's last line is the path of its log.`,
		Example: `  hardway up -i inventory.yaml
  hardway up -i inventory.yaml --dry-run
  hardway up -i inventory.yaml --only push,control-plane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			return a.runUp(cmd.Context(), inv, st, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.StringSliceVar(&o.only, "only", nil, "run only these steps (comma-separated)")
	f.StringSliceVar(&o.skip, "skip", nil, "skip these steps (comma-separated)")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&o.acceptNewHostKeys, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.BoolVar(&o.removeStaleMembers, "remove-stale-members", false, "remove etcd members that are not in the inventory (a rebuilt host)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway)")
	f.BoolVar(&o.offline, "offline", false, "use the download cache only")
	f.BoolVar(&o.updateLock, "update-lock", false, "re-resolve versions and rewrite hardway.lock")
	f.BoolVar(&o.replaceIdentity, "replace-identity", false, "replace the hosts' CAs, service-account key and encryption key with the state directory's (breaks existing certificates, tokens and stored Secrets)")
	return cmd
}

// stepList is the steps for --help, each doc wrapped under its name.
func stepList(steps []plan.Step) string {
	const width, indent = 78, 17
	var b strings.Builder
	for _, s := range steps {
		line := fmt.Sprintf("  %-14s ", s.Name)
		for _, w := range strings.Fields(s.Doc) {
			if len(line)+len(w) > width && len(line) > indent {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				line = strings.Repeat(" ", indent)
			}
			line += w + " "
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

func (a *App) runUp(ctx context.Context, inv *inventory.Inventory, st state.Dir, o upOptions) error {
	if err := checkOutputFlag(o.output); err != nil {
		return err
	}
	out := a.Stdout
	if o.output == "json" {
		out = a.Stderr // progress; the result goes to stdout
	}
	ro := release.OptionsFor(inv)
	ro.CacheDir, ro.Offline, ro.UpdateLock = o.cacheDir, o.offline, o.updateLock
	if ro.CacheDir == "" {
		d, err := release.DefaultCacheDir()
		if err != nil {
			return err
		}
		ro.CacheDir = d
	}
	isTerm := false
	if f, ok := a.Stderr.(*os.File); ok {
		isTerm = term.IsTerminal(int(f.Fd()))
	}
	// The run log gets every progress line and every remote command with
	// its whole stderr. A dry run writes none: a plan changes nothing in
	// the state directory, logs/ included.
	logName := "up"
	if len(o.renew) > 0 {
		logName = "certs-renew"
	}
	lg, err := runlog.OpenUnless(o.dryRun, st.LogDir(), logName, time.Now())
	if err != nil {
		return err
	}
	lg.Printf("inventory %s; dry-run=%v only=%v skip=%v remove-stale-members=%v renew=%v", a.InventoryPath, o.dryRun, o.only, o.skip, o.removeStaleMembers, o.renew)
	out = io.MultiWriter(out, lg)
	c := cluster.New(inv, cluster.Options{
		State: st, Out: out, AcceptNewHostKeys: o.acceptNewHostKeys, Release: ro,
		Progress: release.NewProgress(a.Stderr, isTerm), RemoveStaleMembers: o.removeStaleMembers,
		ReplaceIdentity: o.replaceIdentity,
		Renew:           o.renew,
		Trace:           lg.Command,
	})
	defer c.Close()
	start := time.Now()
	sent0, recv0 := remote.Traffic()
	fetched0 := remote.HostFetched()
	// Ahead: every step's plan starts at once (they only read); on a
	// converged cluster up then waits for its slowest step's reads, not for
	// the sum of all of them.
	r := &plan.Runner{Out: out, DryRun: o.dryRun, Only: o.only, Skip: o.skip, Ahead: true}
	steps := c.Steps()
	if len(o.renew) > 0 {
		steps = c.RenewSteps()
	}
	res, err := r.Run(ctx, steps)
	if err != nil {
		lg.End(err)
		return runlog.WithPath(err, lg)
	}
	defer lg.End(nil)
	if o.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintln(out)
	for _, s := range res.Steps {
		switch {
		case s.Skipped:
			fmt.Fprintf(out, "  %-14s skipped\n", s.Name)
		case len(s.Actions) == 0:
			fmt.Fprintf(out, "  %-14s up to date   %s\n", s.Name, s.Duration.Round(time.Millisecond))
		default:
			fmt.Fprintf(out, "  %-14s %d change(s)  %s\n", s.Name, len(s.Actions), s.Duration.Round(time.Millisecond))
		}
	}
	perHost := map[string]int{}
	var hosts []string
	for _, s := range res.Steps {
		for _, a := range s.Actions {
			h := a.Host
			if h == "" {
				h = "(this machine)"
			}
			if perHost[h] == 0 {
				hosts = append(hosts, h)
			}
			perHost[h]++
		}
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		fmt.Fprintf(out, "  %-14s %d change(s)\n", h, perHost[h])
	}
	if sent, recv := remote.Traffic(); sent+recv > sent0+recv0 {
		sent, recv = sent-sent0, recv-recv0
		// What crossed this machine's link to the hosts.
		fmt.Fprintf(out, "  %-14s %s sent, %s received\n", "ssh", humanBytes(sent), humanBytes(recv))
	}
	if n := remote.HostFetched() - fetched0; n > 0 {
		// releases.fetchOn: hosts: what the hosts downloaded themselves.
		fmt.Fprintf(out, "  %-14s %s from the release URLs, checked on the hosts against hardway.lock\n", "hosts fetched", humanBytes(n))
	}
	switch {
	case res.Changes() == 0:
		fmt.Fprintf(out, "no changes (%s)\n", time.Since(start).Round(time.Millisecond))
	case o.dryRun:
		fmt.Fprintf(out, "%d changes planned; run without --dry-run to apply\n", res.Changes())
	default:
		fmt.Fprintf(out, "%d changes applied in %s\n", res.Changes(), time.Since(start).Round(time.Second))
	}
	if !o.dryRun {
		fmt.Fprintf(out, "\nnext:\n  hardway verify -i %s\n  export KUBECONFIG=%s\n  kubectl get --raw /readyz\n", usererr.Quote(a.InventoryPath), usererr.Quote(st.Kubeconfig("admin")))
	}
	return nil
}

// humanBytes is n in B, kB, MB or GB (powers of 1000, as links are rated).
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
