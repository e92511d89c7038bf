// Package upgrade runs `hardway upgrade apply`: the plan, a backup first,
// every new release file checked, the inventory and lock rewritten, then
// the phases (pkg/cluster's ApplyUpgrade), recorded so that a stopped run
// goes on. The CLI parses the flags, asks for the backup's keys and prints.
package upgrade

import (
	"context"
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

// Options are apply's inputs: its flags, and what the CLI provides.
type Options struct {
	To             string // a minor or an exact version; "" the next minor (or the recorded target)
	DryRun         bool
	NoBackup       bool
	AllowDowngrade bool
	Offline        bool
	BackupDir      string // default backups/ next to the inventory
	CacheDir       string
	DrainTimeout   time.Duration
	ServiceTimeout time.Duration

	// Recipients are the backup's keys, asked for only when a backup is
	// taken (before the plan is shown).
	Recipients func() ([]age.Recipient, error)
	// PrintPlan writes the plan as `hardway upgrade plan` does.
	PrintPlan      func(io.Writer, *cluster.UpgradePlan) error
	HardwayVersion string // for the backup's manifest
	InventoryPath  string // as the user wrote it, for messages
	Out            io.Writer
	ProgressOut    io.Writer // the downloads' progress
}

// Result is what apply did (its -o json).
type Result struct {
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

// Apply runs `hardway upgrade apply` on the cluster inv describes, with its
// state directory st locked by the caller. A nil Result and no error: there
// was nothing to upgrade.
func Apply(ctx context.Context, inv *inventory.Inventory, st state.Dir, f Options) (*Result, error) {
	start := time.Now()
	out := f.Out
	if out == nil {
		out = io.Discard
	}
	lg, err := runlog.OpenUnless(f.DryRun, st.LogDir(), "upgrade", time.Now())
	if err != nil {
		return nil, err
	}
	out = io.MultiWriter(out, lg)
	fail := func(err error) (*Result, error) {
		lg.End(err)
		return nil, runlog.WithPath(err, lg)
	}
	ro := release.OptionsFor(inv)
	ro.CacheDir, ro.Offline = f.CacheDir, f.Offline
	if ro.CacheDir == "" {
		d, err := release.DefaultCacheDir()
		if err != nil {
			return fail(err)
		}
		ro.CacheDir = d
	}
	opts := cluster.Options{State: st, Out: out, Release: ro, Trace: lg.Command, Upgrading: true, ServiceTimeout: f.ServiceTimeout,
		Progress: release.NewProgress(f.ProgressOut, false)}
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
	backupFirst := !f.NoBackup && (rec == nil || rec.Backup == "" && len(rec.Done) == 0)
	var recipients []age.Recipient
	if backupFirst && !f.DryRun {
		if recipients, err = f.Recipients(); err != nil {
			return fail(err)
		}
		if len(recipients) == 0 {
			return fail(usererr.WithCode(errors.New("upgrade apply takes a backup first, and it has no passphrase or recipient"), usererr.CodeUsage,
				"set "+backup.PassphraseEnv+", or --passphrase-file FILE, or --recipient age1…; --no-backup skips the backup"))
		}
	}
	if rec != nil {
		if f.To != "" && !sameTarget(f.To, rec.To) {
			return fail(usererr.WithCode(fmt.Errorf("--to %s, but %s", f.To, rec.Summary()), usererr.CodeUsage,
				"run 'hardway upgrade apply' without --to to finish it first"))
		}
		fmt.Fprintln(out, "going on: "+rec.Summary())
	} else {
		opt := cluster.UpgradeOptions{To: f.To, AllowDowngrade: f.AllowDowngrade}
		if !f.Offline {
			opt.LatestPatch = func(ctx context.Context, minor string) (*goversion.Version, error) {
				return release.LatestPatch(ctx, inv.Releases.Kubernetes, minor)
			}
		}
		p, err := c.PlanUpgrade(ctx, opt)
		if err != nil {
			return fail(err)
		}
		if err := f.PrintPlan(out, p); err != nil {
			return fail(err)
		}
		if p.Blocked() {
			return fail(usererr.New(fmt.Errorf("upgrade to %s blocked: %d rule(s) broken", p.Target.Kubernetes, len(p.Violations)),
				"each blocked line above has its own hint; nothing was changed"))
		}
		if !moves(p) {
			fmt.Fprintf(out, "\nnothing to upgrade: every component already runs its %s target\n", p.Target.Kubernetes)
			lg.End(nil)
			return nil, nil
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
	if to, err = inventory.Parse(f.InventoryPath, inv.Path, newData); err != nil {
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

	res := &Result{From: rec.From, To: rec.To, DryRun: f.DryRun, Edits: editLines, Phases: []string{}, Done: append([]string{}, rec.Done...)}
	for _, p := range rec.Phases {
		res.Phases = append(res.Phases, p.Name)
	}
	if f.DryRun {
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
		return res, nil
	}

	if f.NoBackup && len(rec.Done) == 0 {
		fmt.Fprintln(out, "\nno backup (--no-backup): going back means rebuilding from a backup of your own")
	}
	if backupFirst {
		dir := f.BackupDir
		if dir == "" {
			dir = filepath.Join(inv.Dir(), "backups")
		}
		fmt.Fprintln(out, "\n[upgrade] backup before the upgrade")
		b, err := backup.Create(ctx, backup.Options{Source: c, Inventory: inv, State: st, Dir: dir, Recipients: recipients,
			HardwayVersion: f.HardwayVersion, Log: out})
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
	nro.CacheDir, nro.Offline, nro.UpdateLock, nro.NoLockWrite = ro.CacheDir, f.Offline, true, true
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
	times, err := nc.ApplyUpgrade(ctx, rec, cluster.ApplyOptions{DrainTimeout: f.DrainTimeout})
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
		times.Finish.Round(time.Second), usererr.Quote(f.InventoryPath))
	return res, nil
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
