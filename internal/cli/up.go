package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/state"
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
}

func (a *App) newUpCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build or converge the cluster described by the inventory",
		Long: `Bring the cluster to what the inventory describes, step by step:

  preflight      SSH with verified host keys; Linux, systemd, arch, clock skew,
                 ports, free disk and the etcd disk's fsync latency
  identity       the hosts' CAs, service-account key and encryption key match
                 the state directory (reads only; see below)
  pki            CA, certificates, service-account key, encryption config, kubeconfigs
  fetch          release binaries, verified against checksums and hardway.lock
  render         systemd units and configs for the inventory's versions
  push           every file, atomically; files already equal are not sent
  etcd           start members (all together on a new cluster) or restart them
                 one at a time, keeping quorum; check health and the member list
  control-plane  kube-apiserver, kube-controller-manager, kube-scheduler,
                 host by host, waiting for /readyz or /healthz before the next
  rbac           the RBAC that lets the apiserver reach kubelets
  workers        on every host in workers: containerd, the image tarballs it
                 lacks (compared by image ID), the Node registered with its pod
                 subnet, kubelet, kube-proxy and the pod routes (also on the
                 control-plane hosts); new workers start together, running ones
                 restart one at a time; each Node is waited for until Ready,
                 and a timeout says why (runtime down, CNI config missing,
                 certificate refused)

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
'hardway state pull --from HOST' rebuilds the state directory from the hosts.
--replace-identity replaces the hosts' identity with the state directory's on
purpose: every certificate, service-account token and stored Secret made with
the old one stops working. --only and --skip never bypass the check.`,
		Example: `  hardway up -i inventory.yaml
  hardway up -i inventory.yaml --dry-run
  hardway up -i inventory.yaml --only push,control-plane`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			st := a.stateDir(inv)
			lock, err := a.lockState(cmd.Context(), cmd, st)
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
	c := cluster.New(inv, cluster.Options{
		State: st, Out: out, AcceptNewHostKeys: o.acceptNewHostKeys, Release: ro,
		Progress: release.NewProgress(a.Stderr, isTerm), RemoveStaleMembers: o.removeStaleMembers,
		ReplaceIdentity: o.replaceIdentity,
	})
	defer c.Close()
	start := time.Now()
	r := &plan.Runner{Out: out, DryRun: o.dryRun, Only: o.only, Skip: o.skip}
	res, err := r.Run(ctx, c.Steps())
	if err != nil {
		return err
	}
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
	switch {
	case res.Changes() == 0:
		fmt.Fprintf(out, "no changes (%s)\n", time.Since(start).Round(time.Millisecond))
	case o.dryRun:
		fmt.Fprintf(out, "%d changes planned; run without --dry-run to apply\n", res.Changes())
	default:
		fmt.Fprintf(out, "%d changes applied in %s\n", res.Changes(), time.Since(start).Round(time.Second))
	}
	if !o.dryRun {
		fmt.Fprintf(out, "\nnext:\n  hardway verify -i %s\n  export KUBECONFIG=%s\n  kubectl get --raw /readyz\n", a.InventoryPath, st.Kubeconfig("admin"))
	}
	return nil
}
