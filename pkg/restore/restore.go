// Package restore runs `hardway restore`: the backup checked whole, its
// inventory and lock written where there are none, up's steps with the
// restore in them, and verify until it passes. The CLI only parses the
// flags, asks for the passphrase and prints the result.
package restore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// Options are restore's inputs.
type Options struct {
	From       string         // the backup file
	Identities []age.Identity // none for a plain .tar.gz
	// InventoryPath is where the inventory is, or where the backup's is
	// written when there is none (and hardway.lock beside it).
	InventoryPath string
	// Load loads and locks the inventory's state once the inventory is in
	// place; unlock releases the lock.
	Load func() (inv *inventory.Inventory, st state.Dir, unlock func(), err error)

	CacheDir          string // default release.DefaultCacheDir
	Offline           bool
	DryRun            bool
	ReplaceData       bool // restore over members whose etcd holds data
	ReplaceIdentity   bool
	Force             bool // replace local state files that differ; another cluster's backup
	AcceptNewHostKeys bool
	VerifyTimeout     time.Duration

	Out io.Writer // progress
}

// Result is what restore did (restore's -o json).
type Result struct {
	Backup   backup.Manifest `json:"backup"`
	Steps    *plan.Result    `json:"steps"`
	Verify   *verify.Report  `json:"verify,omitempty"`
	Duration time.Duration   `json:"durationNanos"`
}

// Run restores the cluster from o.From.
func Run(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	var result Result
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	// 1. The backup, all of it, before anything else.
	arc, err := backup.Open(o.From, o.Identities, "")
	if err != nil {
		return result, err
	}
	defer arc.Close()
	m := arc.Manifest
	result.Backup = m
	fmt.Fprintf(out, "[backup] %s: whole (%d files; etcd snapshot of %s from %s, %d bytes, sha256 ok), cluster %q, taken %s\n",
		o.From, len(m.Files), m.Snapshot.EtcdVersion, m.Snapshot.Member, m.Snapshot.Size, m.Cluster, m.Created.Format(time.RFC3339))

	// 2. The inventory: the one given, or the backup's when there is none.
	if err := writeInventory(arc, o.InventoryPath, out, o.DryRun); err != nil {
		return result, err
	}
	inv, st, unlock, err := o.Load()
	if err != nil {
		return result, err
	}
	defer unlock()
	if inv.Cluster != m.Cluster && !o.Force {
		return result, usererr.New(fmt.Errorf("the backup is of cluster %q, the inventory describes %q", m.Cluster, inv.Cluster),
			"use the inventory of the cluster the backup was taken from, or --force")
	}

	// 3. up's steps with the restore in them.
	ro := release.OptionsFor(inv)
	ro.CacheDir, ro.Offline = o.CacheDir, o.Offline
	if ro.CacheDir == "" {
		if ro.CacheDir, err = release.DefaultCacheDir(); err != nil {
			return result, err
		}
	}
	lg, err := runlog.OpenUnless(o.DryRun, st.LogDir(), "restore", time.Now())
	if err != nil {
		return result, err
	}
	lg.Printf("restore from %s (%s); dry-run=%v replace-etcd-data=%v", o.From, m.Snapshot.SHA256, o.DryRun, o.ReplaceData)
	out = io.MultiWriter(out, lg)
	c := cluster.New(inv, cluster.Options{State: st, Out: out, AcceptNewHostKeys: o.AcceptNewHostKeys, Release: ro,
		ReplaceIdentity: o.ReplaceIdentity, Trace: lg.Command})
	defer c.Close()
	r := &plan.Runner{Out: out, DryRun: o.DryRun}
	res, err := r.Run(ctx, c.RestoreSteps(cluster.RestoreOptions{Archive: arc, ReplaceData: o.ReplaceData, ForceState: o.Force}))
	if err != nil {
		lg.End(err)
		return result, runlog.WithPath(err, lg)
	}
	result.Steps = res
	for _, s := range res.Steps {
		if !s.Skipped {
			fmt.Fprintf(out, "  %-14s %d change(s)  %s\n", s.Name, len(s.Actions), s.Duration.Round(time.Millisecond))
		}
	}
	if o.DryRun {
		fmt.Fprintf(out, "%d changes planned; run without --dry-run to restore\n", res.Changes())
		lg.End(nil)
		result.Duration = time.Since(start)
		return result, nil
	}

	// 4. verify, until it passes: the restored controllers take a moment.
	rep, err := verifyUntil(ctx, c, o.VerifyTimeout)
	result.Verify = rep
	if rep != nil {
		rep.WriteTable(out)
	}
	if err != nil {
		lg.End(err)
		return result, runlog.WithPath(err, lg)
	}
	lg.End(nil)
	fmt.Fprintf(out, "restored in %s; verify passes\n", time.Since(start).Round(time.Second))
	result.Duration = time.Since(start)
	return result, nil
}

// writeInventory writes the backup's inventory to invPath when there is no
// file there, and its hardway.lock beside it when there is none.
func writeInventory(arc *backup.Archive, invPath string, out io.Writer, dryRun bool) error {
	write := func(name, dst string) error {
		if _, err := os.Stat(dst); err == nil {
			if name == backup.LockName {
				want, _ := os.ReadFile(arc.FilePath(name))
				if !fsutil.SameContent(dst, want) {
					fmt.Fprintf(out, "[backup] note: %s differs from the backup's; the local one is used\n", dst)
				}
			}
			return nil
		}
		if !arc.Has(name) {
			return nil
		}
		if dryRun {
			fmt.Fprintf(out, "[backup] would write the backup's %s to %s\n", name, dst)
			return nil
		}
		b, err := os.ReadFile(arc.FilePath(name))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "[backup] wrote the backup's %s to %s\n", name, dst)
		return fsutil.WriteFile(dst, b, 0o644)
	}
	if err := write(backup.InventoryName, invPath); err != nil {
		return err
	}
	return write(backup.LockName, filepath.Join(filepath.Dir(invPath), release.LockFileName))
}

// verifyUntil runs verify's checks until all pass or timeout; the last
// report either way.
func verifyUntil(ctx context.Context, c *cluster.Cluster, timeout time.Duration) (*verify.Report, error) {
	deadline := time.Now().Add(timeout)
	for {
		rep := verify.Run(ctx, c.Checks(), 4, time.Minute)
		if rep.OK() {
			return rep, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var failed []string
			for _, r := range rep.Results {
				if r.Status == verify.Fail {
					failed = append(failed, strings.TrimSpace(r.Check+" "+r.Host))
				}
			}
			return rep, usererr.New(fmt.Errorf("verify after the restore: %d check(s) failed: %s", rep.Fail, strings.Join(failed, ", ")),
				"each failed line above has its own hint; 'hardway verify' runs them again")
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}
