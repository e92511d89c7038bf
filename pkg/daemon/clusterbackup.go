package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"

	"github.com/hardway/hardway/pkg/backup"
)

// BackupOptions say where the daemon's backups go and to whom they are
// encrypted: the same file as 'hardway backup' writes.
type BackupOptions struct {
	Dir            string // "": backups/ next to the inventory, as 'hardway backup'
	Keep           int    // the newest Keep are kept; 0: all
	Recipients     []age.Recipient
	HardwayVersion string
}

// BackupDir is where t's backups go.
func (t *ClusterTarget) BackupDir(o BackupOptions) string {
	if o.Dir != "" {
		return o.Dir
	}
	return filepath.Join(t.inv.Dir(), "backups")
}

// Backup takes one backup as 'hardway backup' does: under the state
// directory's lock (waiting up to 30 s for a pki, up or repair to finish),
// the leader's snapshot through SSH, the file written atomically, the
// oldest beyond Keep removed.
func (t *ClusterTarget) Backup(ctx context.Context, o BackupOptions, log io.Writer) (BackupInfo, error) {
	lock, err := t.state.Lock(ctx, "hardway daemon (scheduled backup)", 30*time.Second)
	if err != nil {
		return BackupInfo{}, err
	}
	defer lock.Unlock()
	res, err := backup.Create(ctx, backup.Options{Source: t.c, Inventory: t.inv, State: t.state, Dir: t.BackupDir(o), Keep: o.Keep,
		Recipients: o.Recipients, HardwayVersion: o.HardwayVersion, Log: log})
	if err != nil {
		return BackupInfo{}, err
	}
	return BackupInfo{Path: res.Path, Size: res.Size, Duration: res.Duration}, nil
}

// NewestBackup is the newest backup of t's cluster in its directory.
func (t *ClusterTarget) NewestBackup(o BackupOptions) (BackupInfo, bool, error) {
	all, err := backup.List(t.BackupDir(o), t.inv.Cluster)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(all) == 0) {
		return BackupInfo{}, false, nil
	}
	if err != nil {
		return BackupInfo{}, false, err
	}
	p := all[len(all)-1]
	fi, err := os.Stat(p)
	if err != nil {
		return BackupInfo{}, false, err
	}
	return BackupInfo{Path: p, Size: fi.Size(), Time: fi.ModTime()}, true, nil
}

// ClusterBackups schedules backups of ClusterTargets every interval.
func ClusterBackups(interval time.Duration, o BackupOptions) *Backups {
	where := o.Dir
	if where == "" {
		where = "backups/ next to the inventory"
	}
	keep := "all kept"
	if o.Keep > 0 {
		keep = fmt.Sprintf("the newest %d kept", o.Keep)
	}
	return &Backups{
		Interval: interval,
		Describe: fmt.Sprintf("every %s to %s, %s", interval, where, keep),
		Take: func(ctx context.Context, t Target, log io.Writer) (BackupInfo, error) {
			ct, ok := t.(*ClusterTarget)
			if !ok {
				return BackupInfo{}, fmt.Errorf("backup: %T cannot take backups", t)
			}
			return ct.Backup(ctx, o, log)
		},
		Newest: func(t Target) (BackupInfo, bool, error) {
			ct, ok := t.(*ClusterTarget)
			if !ok {
				return BackupInfo{}, false, nil
			}
			return ct.NewestBackup(o)
		},
	}
}
