package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// The steps `hardway restore` adds to those of `up`.
const (
	StepRestoreCheck = "restore-check"
	StepRestoreState = "restore-state"
	StepRestoreEtcd  = "restore-etcd"
)

// DefaultBumpRevision is how far a restore moves etcd's revision forward:
// past every revision the lost cluster may have handed out after the
// snapshot (a week at 1,000 writes a second is 605 million), so that no
// watcher or cache ever sees a revision twice with different data.
const DefaultBumpRevision = 1_000_000_000

// restoreSnapshot is where the snapshot waits on each host for etcdutl.
const restoreSnapshot = units.HardwayDataDir + "/restore/snapshot.db"

// restoreAside is where a restore moves a member's old data: this, then the
// restore's time stamp. 'hardway reset' leaves such directories, and names
// them.
const restoreAside = units.EtcdDataDir + ".before-restore-"

// RestoreOptions say what `hardway restore` restores.
type RestoreOptions struct {
	Archive *backup.Archive // opened and proven whole
	// ReplaceData restores over members whose data dir holds data (moved
	// aside, not deleted); without it such a member stops the restore
	// before anything is written.
	ReplaceData bool
	// ForceState replaces local state files that differ from the backup's.
	ForceState   bool
	BumpRevision uint64 // 0: DefaultBumpRevision
	Token        string // the new cluster's token; "": <cluster>-restore-<time>
	Now          func() time.Time
}

// RestoreSteps are the steps of `hardway restore`: up's steps with three
// more. After preflight, restore-check refuses members that hold data
// (unless ReplaceData) and restore-state writes the backup's state
// directory here, before the identity step compares it with the hosts; so
// up's own pki, push, etcd and control-plane steps push the backup's
// identity and start everything. restore-etcd, after push, stops every
// apiserver, controller-manager and scheduler, then etcd, and restores
// every member from the same snapshot with etcdutl (a new cluster token,
// the revision bumped, old revisions marked compacted so that watchers and
// caches start over).
func (c *Cluster) RestoreSteps(o RestoreOptions) []plan.Step {
	if o.BumpRevision == 0 {
		o.BumpRevision = DefaultBumpRevision
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	stamp := now().UTC().Format("20060102T150405Z")
	if o.Token == "" {
		o.Token = c.Inv.Cluster + "-restore-" + strings.ToLower(stamp)
	}
	var out []plan.Step
	for _, s := range c.upSteps() {
		switch s.Name {
		case StepIdentity:
			out = append(out,
				plan.Step{Name: StepRestoreCheck, Doc: "no member's etcd data dir holds data, unless --replace-etcd-data (reads only)",
					Plan: func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
						return nil, c.checkRestoreData(ctx, o)
					}},
				plan.Step{Name: StepRestoreState, Doc: "the backup's state directory (CAs, keys, encryption keys, kubeconfigs) written here",
					Plan: func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) { return c.planRestoreState(o) }},
				s)
		case StepEtcd:
			out = append(out, plan.Step{Name: StepRestoreEtcd, Doc: "stop every apiserver, controller-manager and scheduler, then etcd; restore every member from the snapshot (etcdutl); old data moved aside",
				Plan: func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
					return c.planRestoreEtcd(ctx, o, stamp)
				}}, s)
		default:
			out = append(out, s)
		}
	}
	return c.guarded(out)
}

// checkRestoreData refuses to restore over members that hold data, naming
// each, unless told to.
func (c *Cluster) checkRestoreData(ctx context.Context, o RestoreOptions) error {
	snaps, err := c.snapshots(ctx, nil)
	if err != nil {
		return err
	}
	var full []string
	for _, h := range c.Inv.ControlPlane {
		if sn := snaps[h.Name]; sn.EtcdData {
			st := "stopped"
			if sn.Units[units.Etcd].Active {
				st = "running"
			}
			full = append(full, fmt.Sprintf("%s (%s)", h.Name, st))
		}
	}
	if len(full) == 0 {
		return nil
	}
	if o.ReplaceData {
		c.planf(ctx, "[%s] etcd holds data on %s: it will be moved aside (--replace-etcd-data)", StepRestoreCheck, strings.Join(full, ", "))
		return nil
	}
	return usererr.New(fmt.Errorf("etcd holds data on %s: restoring would replace the cluster's current data; nothing was changed", strings.Join(full, ", ")),
		"take a backup of it first ('hardway backup'), then restore with --replace-etcd-data (each member's "+units.EtcdDataDir+" is moved aside, not deleted)")
}

func (c *Cluster) planRestoreState(o RestoreOptions) ([]plan.Action, error) {
	p, err := o.Archive.PlanState(c.opt.State)
	if err != nil {
		return nil, err
	}
	if err := p.ConflictError(c.opt.State); err != nil && !o.ForceState {
		return nil, err
	}
	n := len(p.Write) + len(p.Conflicts)
	if n == 0 {
		return nil, nil
	}
	desc := fmt.Sprintf("write %d file(s) of the backup's state into %s", n, c.opt.State)
	if len(p.Conflicts) > 0 {
		desc += fmt.Sprintf(", replacing %d that differ (--force): %s", len(p.Conflicts), strings.Join(p.Conflicts, ", "))
	}
	return []plan.Action{{Kind: plan.Write, Desc: desc, Do: func(context.Context) error {
		_, err := o.Archive.WriteState(c.opt.State, o.ForceState)
		return err
	}}}, nil
}

// planRestoreEtcd stops the control plane everywhere, then etcd, then
// restores each member. Nothing may write to etcd while its data is
// replaced, and every member must start from the same snapshot: a member
// left with old data would make a second cluster.
func (c *Cluster) planRestoreEtcd(ctx context.Context, o RestoreOptions, stamp string) ([]plan.Action, error) {
	snaps, err := c.snapshots(ctx, nil)
	if err != nil {
		return nil, err
	}
	var actions []plan.Action
	for _, comp := range []string{units.APIServer, units.ControllerManager, units.Scheduler, units.Etcd} {
		for _, h := range c.Inv.ControlPlane {
			if !snaps[h.Name].Units[comp].Active {
				continue
			}
			sh, err := c.Host(ctx, h.Name)
			if err != nil {
				return nil, err
			}
			unit := comp + ".service"
			actions = append(actions, plan.Action{Host: h.Name, Kind: plan.Stop, Desc: "stop " + comp + " (nothing may use etcd while it is restored)",
				Do: func(ctx context.Context) error {
					_, err := sh.Run(ctx, "systemctl stop "+remote.Quote(unit), nil)
					return withJournal(ctx, sh, unit, err)
				}})
		}
	}
	m := o.Archive.Manifest.Snapshot
	snap := remote.File{Path: restoreSnapshot, Mode: 0o600, DirMode: 0o700, Source: o.Archive.SnapshotPath(), Size: m.Size, SHA256: m.SHA256}
	for _, h := range c.Inv.ControlPlane {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		desc := fmt.Sprintf("restore etcd member %s from the snapshot of %s (revision +%d, compacted, token %s)", h.Name, m.Member, o.BumpRevision, o.Token)
		if snaps[h.Name].EtcdData {
			desc += "; old data to " + restoreAside + stamp
		}
		script := c.restoreScript(h, o, stamp)
		actions = append(actions, plan.Action{Host: h.Name, Kind: plan.Restore, Desc: desc, Do: func(ctx context.Context) error {
			if _, err := remote.WriteFile(ctx, sh, snap); err != nil {
				return err
			}
			out, err := sh.Run(ctx, script, nil)
			if err != nil {
				return usererr.New(err, "the member's old data, if any, is in "+restoreAside+stamp+" on "+h.Name+"; fix the cause and run the restore again")
			}
			if s := strings.TrimSpace(string(out)); s != "" {
				c.logf("[%s] %s: %s", StepRestoreEtcd, h.Name, s)
			}
			return nil
		}})
	}
	return actions, nil
}

// restoreScript restores h's member into a new directory beside the data
// dir and swaps it in only when etcdutl succeeded; the old data dir is moved
// aside (an empty one, as push leaves on a new host, is removed).
func (c *Cluster) restoreScript(h inventory.Host, o RestoreOptions, stamp string) string {
	var cluster []string
	for _, m := range c.Inv.ControlPlane {
		cluster = append(cluster, m.Name+"="+c.etcdPeerURL(m))
	}
	d := units.EtcdDataDir
	sum := o.Archive.Manifest.Snapshot.SHA256
	return fmt.Sprintf(`# restore etcd member %[1]s
set -eu
snap=%[2]s d=%[3]s new=%[3]s.restore-%[4]s aside=%[11]s%[4]s
if systemctl is-active --quiet etcd.service; then echo "etcd is running: not restoring under it" >&2; exit 1; fi
echo "%[5]s  $snap" | sha256sum -c --quiet -
rm -rf -- "$new"
log=$(mktemp)
trap 'rm -f -- "$log"' EXIT
if ! %[6]s snapshot restore "$snap" --name %[1]s --initial-cluster %[7]s --initial-cluster-token %[8]s \
  --initial-advertise-peer-urls %[9]s --data-dir "$new" --bump-revision %[10]d --mark-compacted >"$log" 2>&1; then
  tail -n 20 "$log" >&2; rm -rf -- "$new"; exit 1
fi
[ -d "$new/member" ] || { echo "etcdutl made no member directory" >&2; exit 1; }
chmod 0700 "$new"
if [ -e "$d" ] && ! rmdir -- "$d" 2>/dev/null; then mv -- "$d" "$aside"; echo "old data moved to $aside"; fi
mv -- "$new" "$d"
rm -f -- "$snap"
sync
`, remote.Quote(h.Name), remote.Quote(restoreSnapshot), d, stamp, sum, units.BinPath("etcdutl"),
		remote.Quote(strings.Join(cluster, ",")), remote.Quote(o.Token), remote.Quote(c.etcdPeerURL(h)), o.BumpRevision, restoreAside)
}
