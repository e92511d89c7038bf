package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/upgrade"
)

type upgradeApplyFlags struct {
	to, output, backupDir, cacheDir  string
	dryRun, noBackup, allowDowngrade bool
	offline                          bool
	drainTimeout, serviceTimeout     time.Duration
	keys                             keyFlags
}

const upgradeApplyLong = `apply moves the cluster to the target Kubernetes, one minor at a time,
keeping the API served and the workloads' PodDisruptionBudgets respected:

  1. the plan: the versions the hosts run, checked against every
     version-skew rule ('hardway upgrade plan'); a blocked plan stops here;
  2. a backup ('hardway backup': etcd snapshot, state directory, inventory,
     lock), unless --no-backup; it needs the passphrase or recipients as
     'hardway backup' does;
  3. every new release file downloaded and checked against its published
     checksum, before any host is touched;
  4. the inventory's versions and hardway.lock rewritten (the inventory keeps
     its comments and layout), so that a later 'up' keeps the new versions;
  5. the phases, each a run of 'up' narrowed to what it moves:
       etcd, member by member: followers first, the leader last;
       each kube-apiserver, waiting for /readyz before the next;
       the controller-managers and schedulers, host by host;
       each worker: cordon, drain through evictions (PodDisruptionBudgets
       respected; DaemonSet pods stay), containerd and runc if they move,
       kubelet and kube-proxy, wait for Ready with the new kubelet, uncordon;
       a last whole 'up': the files no component reads and the add-ons.

Progress is recorded in upgrade.yaml in the state directory after every
phase: a run that is killed or fails goes on from where it stopped when
'hardway upgrade apply' runs again (no --to needed). Until then 'up' refuses
to run (it would move every host left at once) and 'hardway verify' reports
the upgrade as half-way. A failure stops at its phase; every later host is
left as it was, and the message says how to go on or go back.

A downgrade is refused unless --allow-downgrade; its phases run the other
way round (workers first).

--dry-run prints the plan, the inventory edit and the phases, and changes
nothing anywhere.`

func (a *App) newUpgradeApplyCmd() *cobra.Command {
	var f upgradeApplyFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Upgrade the cluster: backup, then etcd, apiservers, controllers, each worker drained",
		Long:  upgradeApplyLong,
		Example: `  HARDWAY_BACKUP_PASSPHRASE=… hardway upgrade apply -i inventory.yaml --to 1.36
  hardway upgrade apply -i inventory.yaml --to v1.36.3 --dry-run
  hardway upgrade apply -i inventory.yaml        # go on with an upgrade that stopped`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(f.output); err != nil {
				return err
			}
			if f.to != "" {
				if _, err := release.ParseRequested(f.to, true); err != nil {
					return usageError{fmt.Errorf("--to: %w", err)}
				}
			}
			if f.drainTimeout <= 0 {
				return usageError{fmt.Errorf("--drain-timeout %s: give a positive duration", f.drainTimeout)}
			}
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			return a.runUpgradeApply(cmd.Context(), inv, st, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.to, "to", "", "target Kubernetes: a minor (1.36) or an exact version (v1.36.3); default: the minor after the running control plane; not needed to go on with an upgrade that stopped")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan, the inventory edit and the phases; change nothing")
	fl.BoolVar(&f.noBackup, "no-backup", false, "do not take a backup first (the output says so)")
	fl.StringVar(&f.backupDir, "backup-dir", "", "directory for the backup (default: backups/ next to the inventory)")
	fl.StringVar(&f.keys.passphraseFile, "passphrase-file", "", "the backup's passphrase: first line of FILE (or set "+backup.PassphraseEnv+")")
	fl.StringSliceVar(&f.keys.recipients, "recipient", nil, "encrypt the backup to this age public key instead of a passphrase; repeatable")
	fl.StringSliceVar(&f.keys.recipientFiles, "recipients-file", nil, "encrypt the backup to the age public keys in FILE")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 5*time.Minute, "how long a worker's drain may wait for PodDisruptionBudgets to allow its evictions")
	fl.DurationVar(&f.serviceTimeout, "service-timeout", 0, "how long one restarted service may take to become healthy (default: up's)")
	fl.BoolVar(&f.allowDowngrade, "allow-downgrade", false, "allow a target older than what runs (the phases then run workers first)")
	fl.BoolVar(&f.offline, "offline", false, "use the download cache only, and do not ask the release mirror for the newest patch of a --to minor")
	fl.StringVar(&f.cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway)")
	fl.StringVarP(&f.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	return cmd
}

func (a *App) runUpgradeApply(ctx context.Context, inv *inventory.Inventory, st state.Dir, f upgradeApplyFlags) error {
	out := a.Stdout
	if f.output == "json" {
		out = a.Stderr
	}
	res, err := upgrade.Apply(ctx, inv, st, upgrade.Options{
		To: f.to, DryRun: f.dryRun, NoBackup: f.noBackup, AllowDowngrade: f.allowDowngrade, Offline: f.offline,
		BackupDir: f.backupDir, CacheDir: f.cacheDir, DrainTimeout: f.drainTimeout, ServiceTimeout: f.serviceTimeout,
		Recipients: f.keys.keys(a).EncryptTo, PrintPlan: writeUpgradePlan, HardwayVersion: version(),
		InventoryPath: a.InventoryPath, Out: out, ProgressOut: a.Stderr,
	})
	if err != nil || res == nil || f.output != "json" {
		return err
	}
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
