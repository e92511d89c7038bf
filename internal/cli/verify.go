package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

func (a *App) newVerifyCmd() *cobra.Command {
	var output, cacheDir string
	var timeout time.Duration
	var rehash bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Prove, on the live hosts, that the cluster is what the inventory says",
		Long: `verify runs named checks and reports each as pass, warn or fail with a
one-line hint: the local PKI; per host the SSH connection, the binaries
against hardway.lock, every pushed file against the rendered one (drift;
files unchanged since hardway wrote them are known by their stat, --rehash
reads every byte),
units enabled and active, clock skew; etcd health, members (stale ones named
with the command that removes them), leader and alarms; every apiserver's
/livez and /readyz; controller-manager and scheduler /healthz and their
leader leases; the kubelet RBAC and its subject; encryption at rest (a probe
Secret read raw from etcd); version skew; per worker its units (containerd,
kubelet, kube-proxy, pod routes), containerd over CRI, the Node Ready (or
why not: runtime down, CNI config missing, certificate refused), the pod
subnet in the state, the Node and the CNI config alike; a route to every
other worker's pod subnet on every host; and NotReady nodes cluster-wide
with the reason.

It never uses componentstatuses (deprecated, and it probes ports that no
longer exist). Exit code 1 when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			ro := release.OptionsFor(inv)
			ro.CacheDir = cacheDir
			if ro.CacheDir == "" {
				if ro.CacheDir, err = release.DefaultCacheDir(); err != nil {
					return err
				}
			}
			st := a.stateDir(inv)
			lg, err := runlog.Open(st.LogDir(), "verify", time.Now())
			if err != nil {
				return err
			}
			c := cluster.New(inv, cluster.Options{State: st, Release: ro, Trace: lg.Command, Rehash: rehash})
			defer c.Close()
			// Every check at once: they wait on a host or a tunnel, not on
			// this CPU, and each host's commands share its one connection.
			// A fixed bound (16) queued a large cluster's worker checks
			// behind the others.
			checks := c.Checks()
			rep := verify.Run(cmd.Context(), checks, len(checks), timeout)
			rep.WriteTable(lg)
			if output == "json" {
				err = rep.WriteJSON(a.Stdout)
			} else {
				err = rep.WriteTable(a.Stdout)
			}
			if err == nil && !rep.OK() {
				err = usererr.New(errors.New("verify: "+fmt.Sprint(rep.Fail)+" check(s) failed"), "each failed line above has its own hint")
			}
			lg.End(err)
			return runlog.WithPath(err, lg)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (a table) or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "time limit per check")
	cmd.Flags().BoolVar(&rehash, "rehash", false, "read every byte of every pushed file; by default a file whose size, inode, mtime and ctime are those recorded when hardway wrote it is not read again (any change to it moves its ctime; rot on the disk does not)")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway)")
	return cmd
}

func (a *App) newKubeconfigCmd() *cobra.Command {
	var merge bool
	cmd := &cobra.Command{
		Use:   "kubeconfig",
		Short: "Print the admin kubeconfig (or merge it into ~/.kube/config)",
		Long: `Print the admin kubeconfig from the state directory. It embeds the admin
client key (O=system:masters): treat it as a secret.

With --merge it is merged into $KUBECONFIG or ~/.kube/config (0600) with
client-go's rules, and becomes the current context.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			p := a.stateDir(inv).Kubeconfig("admin")
			if merge {
				dst, err := kube.MergeKubeconfig(p)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.Stdout, "merged into %s\n", dst)
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return usererr.New(err, "run 'hardway certs generate' or 'hardway up' first")
			}
			_, err = a.Stdout.Write(b)
			return err
		},
	}
	cmd.Flags().BoolVar(&merge, "merge", false, "merge into $KUBECONFIG or ~/.kube/config")
	return cmd
}
