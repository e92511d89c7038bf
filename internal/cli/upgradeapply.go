package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	goversion "github.com/hashicorp/go-version"
	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
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

// upgradeResult is apply's JSON result.
type upgradeResult struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	Backup   string   `json:"backup,omitempty"`
	Phases   []string `json:"phases"`
	Done     []string `json:"done"`
	DryRun   bool     `json:"dryRun"`
	Edits    []string `json:"inventoryEdits"`
	Seconds  float64  `json:"seconds"`
	CPSecs   float64  `json:"controlPlaneSeconds"`
	WorkSecs float64  `json:"workersSeconds"`
}

func (a *App) runUpgradeApply(ctx context.Context, inv *inventory.Inventory, st state.Dir, f upgradeApplyFlags) error {
	start := time.Now()
	out := a.Stdout
	if f.output == "json" {
		out = a.Stderr
	}
	lg, err := runlog.OpenUnless(f.dryRun, st.LogDir(), "upgrade", time.Now())
	if err != nil {
		return err
	}
	out = io.MultiWriter(out, lg)
	fail := func(err error) error {
		lg.End(err)
		return runlog.WithPath(err, lg)
	}
	ro := release.OptionsFor(inv)
	ro.CacheDir, ro.Offline = f.cacheDir, f.offline
	if ro.CacheDir == "" {
		d, err := release.DefaultCacheDir()
		if err != nil {
			return fail(err)
		}
		ro.CacheDir = d
	}
	opts := cluster.Options{State: st, Out: out, Release: ro, Trace: lg.Command, Upgrading: true, ServiceTimeout: f.serviceTimeout,
		Progress: release.NewProgress(a.Stderr, false)}
	c := cluster.New(inv, opts)
	defer c.Close()

	rec, err := cluster.LoadUpgrade(st)
	if err != nil {
		return fail(err)
	}
	// A backup first, once: a run that goes on after a kill or a failure
	// has it (or went without on purpose). Its keys are checked before the
	// plan: a missing passphrase must not stop the upgrade after its plan
	// was shown.
	backupFirst := !f.noBackup && (rec == nil || rec.Backup == "" && len(rec.Done) == 0)
	var recipients []age.Recipient
	if backupFirst && !f.dryRun {
		if recipients, err = f.keys.keys(a).EncryptTo(); err != nil {
			return fail(err)
		}
		if len(recipients) == 0 {
			return fail(usererr.WithCode(errors.New("upgrade apply takes a backup first, and it has no passphrase or recipient"), usererr.CodeUsage,
				"set "+backup.PassphraseEnv+", or --passphrase-file FILE, or --recipient age1…; --no-backup skips the backup"))
		}
	}
	if rec != nil {
		if f.to != "" && !sameTarget(f.to, rec.To) {
			return fail(usererr.WithCode(fmt.Errorf("--to %s, but %s", f.to, rec.Summary()), usererr.CodeUsage,
				"run 'hardway upgrade apply' without --to to finish it first"))
		}
		fmt.Fprintln(out, "going on: "+rec.Summary())
	} else {
		opt := cluster.UpgradeOptions{To: f.to, AllowDowngrade: f.allowDowngrade}
		if !f.offline {
			opt.LatestPatch = func(ctx context.Context, minor string) (*goversion.Version, error) {
				return release.LatestPatch(ctx, inv.Releases.Kubernetes, minor)
			}
		}
		p, err := c.PlanUpgrade(ctx, opt)
		if err != nil {
			return fail(err)
		}
		if err := writeUpgradePlan(out, p); err != nil {
			return fail(err)
		}
		if p.Blocked() {
			return fail(usererr.New(fmt.Errorf("upgrade to %s blocked: %d rule(s) broken", p.Target.Kubernetes, len(p.Violations)),
				"each blocked line above has its own hint; nothing was changed"))
		}
		if !moves(p) {
			fmt.Fprintf(out, "\nnothing to upgrade: every component already runs its %s target\n", p.Target.Kubernetes)
			lg.End(nil)
			return nil
		}
		rec = c.NewUpgradeRecord(ctx, p)
	}

	// The inventory at the target, and the file's edit.
	to, err := cluster.UpgradeInventory(inv, rec.To)
	if err != nil {
		return fail(err)
	}
	data, err := os.ReadFile(inv.Path)
	if err != nil {
		return fail(fmt.Errorf("read the inventory: %w", err))
	}
	set, add := cluster.InventoryEdits(inv, to)
	newData, edits, err := inventory.SetTopLevel(data, set, add)
	if err != nil {
		return fail(usererr.New(err, "edit the versions in the inventory by hand to "+rec.To+", then run 'hardway upgrade apply' again"))
	}
	if to, err = inventory.Parse(a.InventoryPath, inv.Path, newData); err != nil {
		return fail(fmt.Errorf("the inventory at %s: %w", rec.To, err))
	}
	var editLines []string
	for _, e := range edits {
		old := e.Old
		if old == "" {
			old = "(not set)"
		}
		editLines = append(editLines, fmt.Sprintf("%s: %s → %s", e.Key, old, e.New))
	}
	fmt.Fprintln(out, "\ninventory "+inv.Path+":")
	if len(editLines) == 0 {
		fmt.Fprintln(out, "  already at "+rec.To)
	}
	for _, l := range editLines {
		fmt.Fprintln(out, "  "+l)
	}

	res := upgradeResult{From: rec.From, To: rec.To, DryRun: f.dryRun, Edits: editLines, Phases: []string{}, Done: append([]string{}, rec.Done...)}
	for _, p := range rec.Phases {
		res.Phases = append(res.Phases, p.Name)
	}
	if f.dryRun {
		fmt.Fprintln(out, "\nthe upgrade would:")
		if backupFirst {
			fmt.Fprintln(out, "  take a backup ('hardway backup')")
		}
		fmt.Fprintf(out, "  download and check every %s release file; write hardway.lock and the inventory\n", rec.To)
		for i, p := range rec.Phases {
			state := ""
			if slices.Contains(rec.Done, p.Name) {
				state = " (done)"
			}
			fmt.Fprintf(out, "  phase %d/%d: %s%s\n", i+1, len(rec.Phases), p.Desc, state)
		}
		fmt.Fprintln(out, "nothing was changed (--dry-run)")
		return a.upgradeJSON(f, res)
	}

	if f.noBackup && len(rec.Done) == 0 {
		fmt.Fprintln(out, "\nno backup (--no-backup): going back means rebuilding from a backup of your own")
	}
	if backupFirst {
		dir := f.backupDir
		if dir == "" {
			dir = filepath.Join(inv.Dir(), "backups")
		}
		fmt.Fprintln(out, "\n[upgrade] backup before the upgrade")
		b, err := backup.Create(ctx, backup.Options{Source: c, Inventory: inv, State: st, Dir: dir, Recipients: recipients,
			HardwayVersion: version(), Log: out})
		if err != nil {
			return fail(usererr.New(fmt.Errorf("the backup before the upgrade failed (nothing was changed): %w", err),
				"fix what the error names and run again, or --no-backup to upgrade without one"))
		}
		rec.Backup = b.Path
		fmt.Fprintf(out, "[upgrade] backup %s (sha256 %s)\n", b.Path, b.SHA256)
	}
	res.Backup = rec.Backup

	// Every new file is downloaded and checked before a host is touched.
	nro := release.OptionsFor(to)
	nro.CacheDir, nro.Offline, nro.UpdateLock, nro.NoLockWrite = ro.CacheDir, f.offline, true, true
	nro.Progress = opts.Progress
	fmt.Fprintln(out, "[upgrade] release files for "+rec.To)
	set2, err := release.Resolve(ctx, nro)
	if err != nil {
		return fail(fmt.Errorf("fetch %s (nothing was changed on the hosts): %w", rec.To, err))
	}
	if err := cluster.SaveUpgrade(st, rec); err != nil {
		return fail(err)
	}
	if changed, err := release.WriteLock(set2.LockPath, set2.Lock); err != nil {
		return fail(err)
	} else if changed {
		fmt.Fprintln(out, "[upgrade] wrote "+set2.LockPath)
	}
	if len(edits) > 0 {
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(inv.Path); err == nil {
			mode = fi.Mode().Perm()
		}
		if err := fsutil.WriteFile(inv.Path, newData, mode); err != nil {
			return fail(err)
		}
		fmt.Fprintln(out, "[upgrade] wrote "+inv.Path+": "+strings.Join(editLines, ", "))
	}

	opts.Release = nro
	opts.Release.UpdateLock, opts.Release.NoLockWrite = false, false
	nc := cluster.New(to, opts)
	defer nc.Close()
	times, err := nc.ApplyUpgrade(ctx, rec, cluster.ApplyOptions{DrainTimeout: f.drainTimeout})
	res.Done = append([]string{}, rec.Done...)
	if err != nil {
		return fail(err)
	}
	if err := cluster.FinishUpgrade(st); err != nil {
		return fail(err)
	}
	lg.End(nil)
	res.Seconds = time.Since(start).Seconds()
	res.CPSecs, res.WorkSecs = times.ControlPlane.Seconds(), times.Workers.Seconds()
	fmt.Fprintf(out, "\nupgraded to %s in %s (control plane %s, workers %s, add-ons and the rest %s)\nnext:\n  hardway verify -i %s\n",
		rec.To, time.Since(start).Round(time.Second), times.ControlPlane.Round(time.Second), times.Workers.Round(time.Second),
		times.Finish.Round(time.Second), usererr.Quote(a.InventoryPath))
	return a.upgradeJSON(f, res)
}

func (a *App) upgradeJSON(f upgradeApplyFlags, res upgradeResult) error {
	if f.output != "json" {
		return nil
	}
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// moves says whether any component changes.
func moves(p *cluster.UpgradePlan) bool {
	for _, m := range p.Moves {
		if m.Change != skew.Same {
			return true
		}
	}
	return false
}

// sameTarget says whether --to names the recorded target (a minor names
// any of its patches).
func sameTarget(to, rec string) bool {
	t := strings.TrimPrefix(strings.TrimSpace(to), "v")
	r := strings.TrimPrefix(rec, "v")
	return t == r || strings.HasPrefix(r, t+".") && strings.Count(t, ".") == 1
}
