package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newRotateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Rotate the cluster's keys without downtime",
		Long: `Rotate a key the cluster depends on, one resumable step at a time, with an
apiserver ready throughout. Each rotation records its progress in the state
directory: a run that is interrupted at any point is finished by the next.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.newRotateEncryptionKeyCmd(), a.newRotateCACmd())
	return cmd
}

type rotateOptions struct {
	provider          string
	dryRun            bool
	output            string
	acceptNewHostKeys bool
	reloadTimeout     time.Duration
}

func (a *App) newRotateEncryptionKeyCmd() *cobra.Command {
	var o rotateOptions
	cmd := &cobra.Command{
		Use:   "encryption-key",
		Short: "Replace the key that encrypts Secrets in etcd, and re-encrypt every Secret",
		Long: `Replace the key that encrypts Secrets at rest, following the documented
procedure in seven steps:

  1 add-key      add the new key second on every control-plane host
  2 wait-loaded  wait until every apiserver has loaded it
  3 key-first    move the new key first
  4 wait-first   wait until every apiserver has loaded that
  5 rewrite      rewrite every Secret through the API (paginated, conflicts retried)
  6 prove        read every Secret's raw value from etcd: each carries the new key's
                 name (k8s:enc:<provider>:v1:<key>:)
  7 remove-old   remove the old key from the hosts

Each step's completion is recorded in encryption-rotation.yaml in the state
directory (atomically, under the state directory's lock); an interrupted run
is finished by running the command again. The state directory's
encryption-config.yaml always holds what the hosts should have, so 'hardway
up' during a rotation pushes the same config and never undoes a step.

The apiservers reread the config by themselves (hardway runs them with
--encryption-provider-config-automatic-reload; they look every minute). A
step waits until each apiserver reports the SHA-256 of the new file in its
metric apiserver_encryption_config_controller_last_config_info, so nothing is
restarted. An apiserver that has not loaded it within --reload-timeout is
restarted, one at a time and only while another apiserver is ready.

The old key is not deleted: it moves to encryption-retired-keys.yaml in the
state directory, because an etcd backup made before the rotation needs it.
'hardway up' refuses a state directory whose encryption config writes with a
retired key (an old copy restored by mistake).

To change the provider (for example aescbc to secretbox), set
encryption.provider in the inventory and run this command: the new key is of
that provider.`,
		Example: `  hardway rotate encryption-key -i inventory.yaml --dry-run
  hardway rotate encryption-key -i inventory.yaml
  hardway rotate encryption-key -i inventory.yaml -o json   # the result on stdout, progress on stderr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(o.output); err != nil {
				return err
			}
			st, c, out, lg, done, err := a.startRotation(cmd, o.output, o.acceptNewHostKeys, "",
				fmt.Sprintf("rotate encryption-key: inventory %s; dry-run=%v provider=%q", a.InventoryPath, o.dryRun, o.provider))
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			rot := c.EncryptionRotation(cluster.RotateOptions{Provider: o.provider, ReloadTimeout: o.reloadTimeout, DryRun: o.dryRun})
			start := time.Now()
			if err := rot.Preflight(ctx); err != nil {
				lg.End(err)
				return runlog.WithPath(err, lg)
			}
			r := &plan.Runner{Out: out, DryRun: o.dryRun}
			pr, err := r.Run(ctx, rot.Steps())
			if err != nil {
				lg.End(err)
				return runlog.WithPath(fmt.Errorf("%w\n(the steps done so far are recorded: rerun 'hardway rotate encryption-key' to go on)", err), lg)
			}
			lg.End(nil)
			res := rot.Result(pr)
			if o.output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			switch {
			case o.dryRun:
				fmt.Fprintf(out, "\n%d changes planned; run without --dry-run to rotate\n", pr.Changes())
			default:
				fmt.Fprintf(out, "\nrotation complete in %s: every Secret is stored with %s (%d rewritten, %d checked in etcd);\n"+
					"%v retired, kept in %s for older backups\n",
					time.Since(start).Round(time.Second), res.Key, res.SecretsRewritten, res.SecretsChecked, res.OldKeys, st.RetiredEncryptionKeys())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.provider, "provider", "", "provider of the new key: secretbox, aesgcm or aescbc (default: the inventory's encryption.provider, which it must match)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&o.acceptNewHostKeys, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.DurationVar(&o.reloadTimeout, "reload-timeout", 2*time.Minute, "how long an apiserver may take to reload the config by itself before it is restarted")
	return cmd
}

type rotateCAOptions struct {
	which             string
	dryRun            bool
	output            string
	acceptNewHostKeys bool
	cacheDir          string
	stopAfter         string
}

func (a *App) newRotateCACmd() *cobra.Command {
	var o rotateCAOptions
	var whiches, trusted []string
	for _, t := range pki.CATargets() {
		whiches = append(whiches, t.Which)
		trusted = append(trusted, fmt.Sprintf("  %-11s %s signs %s;\n              trusted by %s", t.Which, t.CA, strings.Join(t.Leaves(), ", "), t.Trusted))
	}
	cmd := &cobra.Command{
		Use:   "ca --which " + strings.Join(whiches, "|"),
		Short: "Replace a CA with trust bundles, host by host, without downtime",
		Long: `Replace a CA and every certificate it signed, in the documented order, so
that every member and client trusts what the others present at every moment:

  1 trust-both  make the new CA; the trust bundle (old + new CA) goes to
                everything that verifies these certificates
  2 reissue     reissue the CA's certificates from the new CA and push them
  3 drop-old    the trust bundle becomes the new CA alone

Each phase pushes only its files, then restarts what reads them with up's
own gates: an etcd member only while every other member is healthy, waiting
for its health (the quorum holds); then the apiservers one at a time, each
waiting for /readyz (the API stays up). A push leaves a restart marker on the
host, so a run killed between a push and its restart is finished by the next.

The progress is recorded in ca-rotation-<which>.yaml in the state directory
(0600: it holds the new key until the CA files are written). An interrupted
rotation is finished by running the command again; until then 'hardway up',
'hardway certs generate' and 'hardway certs renew' refuse to run, and verify warns.

The old CA's certificate and key stay in the state directory, under
pki/retired/<ca>-<serial>.{crt,key}: older backups still make sense.

What can be rotated (--which):
` + strings.Join(trusted, "\n") + `

--which kubernetes (the cluster CA) goes further: the bundle also goes into
every kubeconfig and to the kubelets (clientCAFile), each phase restarts the
workers' kubelet and kube-proxy one worker at a time, each waiting for its
Node to be Ready and its kubelet's next Lease renewal, and phases 1 and 3 wait until the ConfigMap kube-root-ca.crt
in every namespace holds the bundle, then restart CoreDNS (rolling). Pods of
your own that read the CA once at start (client-go's in-cluster config does)
must be restarted after phase 1, before phase 2 changes the apiservers'
serving certificates: run with --stop-after trust-both, restart them (a
rollout restart of each Deployment is enough), then run again.
Service-account tokens keep working (they are signed with the
service-account key, not the CA). Every kubeconfig in the
state directory is rewritten: copies you made of admin.kubeconfig stop
working after phase 3. Run 'hardway up' with this hardway first: it points
the apiservers and controller-managers at the bundle.

A cluster made by a hardway older than the etcd CA has none: its etcd trusts
the cluster CA, which also signs the workers' kubelet and kube-proxy
certificates, so any of them can read and write etcd past RBAC ('hardway
verify' warns). 'rotate ca --which etcd' is its migration: the first etcd CA
is made, and the cluster CA (which keeps signing everything else) leaves
etcd's trust bundle in phase 3. Run 'hardway up' with this hardway first: it
points the apiservers' --etcd-cafile at the bundle.`,
		Example: `  hardway rotate ca --which etcd -i inventory.yaml --dry-run
  hardway rotate ca --which etcd -i inventory.yaml
  hardway rotate ca --which kubernetes -i inventory.yaml
  hardway rotate ca --which etcd -i inventory.yaml -o json   # the result on stdout, progress on stderr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(o.output); err != nil {
				return err
			}
			if o.which == "" {
				return usererr.WithCode(fmt.Errorf("rotate ca: --which is required"), usererr.CodeUsage, "name the CA: --which "+strings.Join(whiches, "|"))
			}
			if _, err := pki.LookupCATarget(o.which); err != nil {
				return err
			}
			stopAt := 0
			if o.stopAfter != "" {
				stopAt = slices.Index(pki.CAPhases[:pki.PhaseDropOld], o.stopAfter)
				if stopAt < 1 {
					return usererr.WithCode(fmt.Errorf("--stop-after %q: no such phase", o.stopAfter), usererr.CodeUsage,
						"stop after "+pki.CAPhases[pki.PhaseTrustBoth]+" or "+pki.CAPhases[pki.PhaseReissue]+"; a rerun without it goes on")
				}
			}
			_, c, out, lg, done, err := a.startRotation(cmd, o.output, o.acceptNewHostKeys, o.cacheDir,
				fmt.Sprintf("rotate ca: inventory %s; which=%s dry-run=%v", a.InventoryPath, o.which, o.dryRun))
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			rot := c.CARotation(cluster.CARotateOptions{Which: o.which, DryRun: o.dryRun})
			start := time.Now()
			if err := rot.Preflight(ctx); err != nil {
				lg.End(err)
				return runlog.WithPath(err, lg)
			}
			var steps []plan.StepResult
			changes := 0
			for _, ph := range rot.Phases() {
				fmt.Fprintf(out, "\n== phase %d of 3: %s\n", ph.N, ph.Name)
				r := &plan.Runner{Out: out, DryRun: o.dryRun}
				pr, err := r.Run(ctx, ph.Steps)
				if pr != nil {
					steps = append(steps, pr.Steps...)
					changes += pr.Changes()
				}
				if err != nil {
					lg.End(err)
					return runlog.WithPath(fmt.Errorf("%w\n(the phases done so far are recorded: rerun 'hardway rotate ca --which %s' to go on)", err, o.which), lg)
				}
				if ph.N == stopAt {
					fmt.Fprintf(out, "\nstopped after phase %d %s (--stop-after): rerun 'hardway rotate ca --which %s' to go on\n", ph.N, ph.Name, o.which)
					break
				}
			}
			lg.End(nil)
			res := rot.Result(steps)
			if o.output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			if o.dryRun {
				fmt.Fprintf(out, "\n%d changes planned; run without --dry-run to rotate\n", changes)
				return nil
			}
			if !res.Complete {
				return nil
			}
			fmt.Fprintf(out, "\nCA rotation complete in %s: %s is the new %s (%s); every member and apiserver trusts it alone\n",
				time.Since(start).Round(time.Second), res.CA, o.which, res.New)
			if res.Retired != "" {
				fmt.Fprintf(out, "the old %s (%s) is kept in %s for older backups\n", res.OldCA, res.Old, res.Retired)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.which, "which", "", "the CA to rotate: "+strings.Join(whiches, ", "))
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&o.acceptNewHostKeys, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "download cache, where the workers' images are looked up (default $XDG_CACHE_HOME/hardway); never written")
	f.StringVar(&o.stopAfter, "stop-after", "", "stop once this phase is done (trust-both or reissue), e.g. to restart workloads that read the cluster CA at start; a rerun goes on")
	return cmd
}

// startRotation is what both rotations set up: the state directory's lock,
// a run log that starts with header, and a cluster whose progress goes to
// stdout and the log (to stderr with -o json, whose result is stdout's).
// done closes the cluster and releases the lock. The release cache
// (cacheDir, default the user's) is only read, never downloaded into: the
// workers step of a CA rotation compares the workers' images with it.
func (a *App) startRotation(cmd *cobra.Command, output string, acceptNewHostKeys bool, cacheDir, header string) (
	st state.Dir, c *cluster.Cluster, out io.Writer, lg *runlog.Log, done func(), err error) {
	inv, st, lock, err := a.loadLocked(cmd)
	if err != nil {
		return "", nil, nil, nil, nil, err
	}
	ro := release.OptionsFor(inv)
	ro.CacheDir, ro.Offline = cacheDir, true
	if ro.CacheDir == "" {
		if ro.CacheDir, err = release.DefaultCacheDir(); err != nil {
			lock.Unlock()
			return "", nil, nil, nil, nil, err
		}
	}
	lg, err = runlog.OpenUnless(isDryRun(cmd), st.LogDir(), "rotate", time.Now())
	if err != nil {
		lock.Unlock()
		return "", nil, nil, nil, nil, err
	}
	lg.Printf("%s", header)
	out = a.Stdout
	if output == "json" {
		out = a.Stderr
	}
	out = io.MultiWriter(out, lg)
	c = cluster.New(inv, cluster.Options{State: st, Out: out, AcceptNewHostKeys: acceptNewHostKeys, Trace: lg.Command, Release: ro})
	return st, c, out, lg, func() { c.Close(); lock.Unlock() }, nil
}
