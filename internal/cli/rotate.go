package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/runlog"
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
	cmd.AddCommand(a.newRotateEncryptionKeyCmd())
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
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			ctx := cmd.Context()
			out := a.Stdout
			if o.output == "json" {
				out = a.Stderr
			}
			lg, err := runlog.Open(st.LogDir(), "rotate", time.Now())
			if err != nil {
				return err
			}
			lg.Printf("rotate encryption-key: inventory %s; dry-run=%v provider=%q", a.InventoryPath, o.dryRun, o.provider)
			out = io.MultiWriter(out, lg)
			c := cluster.New(inv, cluster.Options{State: st, Out: out, AcceptNewHostKeys: o.acceptNewHostKeys, Trace: lg.Command})
			defer c.Close()
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
