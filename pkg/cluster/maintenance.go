package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// etcd maintenance: 'hardway etcd defrag', 'compact' and 'disarm'. Every
// call goes through the same SSH tunnels as verify (no port opened).

// maintAPI is what maintenance asks and does; *etcd.Client is one.
type maintAPI interface {
	etcdAPI
	Defragment(ctx context.Context, endpoint string) error
	MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error
	Compact(ctx context.Context, rev int64) error
	DisarmNoSpace(ctx context.Context) ([]etcd.Alarm, error)
}

// maintHooks replace the real etcd client and the apiserver probe in tests.
type maintHooks struct {
	etcd           func() (maintAPI, error)
	apiserverReady func(ctx context.Context, h inventory.Host) error
}

func (c *Cluster) maintEtcd() (maintAPI, error) {
	if c.maint.etcd != nil {
		return c.maint.etcd()
	}
	cli, err := c.dialEtcd()
	if err != nil {
		return nil, err
	}
	return cli.(*etcd.Client), nil
}

// apiserverReady is one GET of h's /readyz through SSH: the apiserver's own
// verdict, which includes its etcd connection.
func (c *Cluster) apiserverReady(ctx context.Context, h inventory.Host) error {
	if c.maint.apiserverReady != nil {
		return c.maint.apiserverReady(ctx, h)
	}
	return c.probe(ctx, h, units.APIServer)
}

// Defaults of 'hardway etcd defrag': a member is defragmented when at least
// a tenth of its database file is free pages and those are at least 1 MiB —
// less is not worth the pause of a member.
const (
	DefaultDefragThreshold = 0.10
	DefaultDefragMinFree   = 1 << 20
)

// DefragOptions choose which members 'hardway etcd defrag' defragments.
type DefragOptions struct {
	// Threshold is the part of the database file (0..1) that must be free
	// for a member to be defragmented.
	Threshold float64
	// MinFree is the least free bytes worth a defragmentation.
	MinFree int64
	// All defragments every member whatever its fragmentation (the NOSPACE
	// recovery: the file's size is what the quota counts).
	All bool
	// Wait bounds each wait for health before and after a member; default
	// the cluster's ServiceTimeout.
	Wait time.Duration
}

// DefragMember is one member in the plan: its numbers and the decision.
type DefragMember struct {
	Name          string  `json:"name"`
	Endpoint      string  `json:"endpoint"`
	MemberID      string  `json:"memberID"`
	Leader        bool    `json:"leader"`
	DBSize        int64   `json:"dbSize"`
	DBSizeInUse   int64   `json:"dbSizeInUse"`
	Free          int64   `json:"free"`          // dbSize - dbSizeInUse
	Fragmentation float64 `json:"fragmentation"` // free / dbSize
	Defrag        bool    `json:"defrag"`
	Reason        string  `json:"reason"`
	// DBSizeAfter is the file's size after the run (filled by the caller).
	DBSizeAfter int64 `json:"dbSizeAfter,omitempty"`
}

// DefragPlan is what 'hardway etcd defrag' would do: followers first, one
// at a time, then leadership moved away and the old leader last.
type DefragPlan struct {
	Members []DefragMember `json:"members"`
	Actions []plan.Action  `json:"-"`
}

// Step wraps the plan for plan.Runner, so --dry-run prints it as up does.
func (p *DefragPlan) Step() plan.Step {
	return plan.Step{Name: "defrag", Doc: "defragment etcd members one at a time, leader last",
		Plan: func(context.Context, plan.Planned) ([]plan.Action, error) { return p.Actions, nil }}
}

// memberState is one member's answer during maintenance.
type memberState struct {
	h   inventory.Host
	ep  string
	st  etcd.Status
	err error
}

// memberStates asks every member for its health and status, each under its
// own short timeout.
func (c *Cluster) memberStates(ctx context.Context, cli etcdAPI) []memberState {
	out := make([]memberState, len(c.Inv.ControlPlane))
	for i, h := range c.Inv.ControlPlane {
		ep := c.etcdEndpoint(h)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cli.Health(sctx, ep)
		var st etcd.Status
		if err == nil {
			st, err = cli.Status(sctx, ep)
		}
		cancel()
		out[i] = memberState{h: h, ep: ep, st: st, err: err}
	}
	return out
}

// leaderOf is the leader the members of the newest raft term name (0: none).
func leaderOf(ms []memberState) uint64 {
	var term, leader uint64
	for _, m := range ms {
		if m.err == nil && m.st.Leader != 0 && m.st.RaftTerm >= term {
			term, leader = m.st.RaftTerm, m.st.Leader
		}
	}
	return leader
}

// PlanDefrag reads every member's status and plans the defragmentation. It
// only reads. It refuses while a member is unhealthy: a member busy
// defragmenting beside one that is down could cost the quorum.
func (c *Cluster) PlanDefrag(ctx context.Context, o DefragOptions) (*DefragPlan, error) {
	cli, err := c.maintEtcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ms := c.memberStates(ctx, cli)
	for _, m := range ms {
		if m.err != nil {
			return nil, usererr.New(fmt.Errorf("etcd member %s is not healthy (%w): defragmenting another member now could cost the quorum", m.h.Name, m.err),
				fmt.Sprintf("bring etcd on %s back first ('hardway verify' says why; 'hardway up' starts it), then run again", m.h.Name))
		}
	}
	leader := leaderOf(ms)
	if leader == 0 {
		return nil, usererr.New(errors.New("etcd has no leader"), "the members cannot reach each other: check port 2380 between the hosts; 'hardway verify' shows more")
	}
	p := &DefragPlan{}
	var followers []plan.Action
	var last []plan.Action
	for _, m := range ms {
		d := DefragMember{Name: m.h.Name, Endpoint: m.ep, MemberID: fmt.Sprintf("%x", m.st.MemberID), Leader: m.st.MemberID == leader,
			DBSize: m.st.DBSize, DBSizeInUse: m.st.DBSizeInUse}
		d.Free = max(d.DBSize-d.DBSizeInUse, 0)
		if d.DBSize > 0 {
			d.Fragmentation = float64(d.Free) / float64(d.DBSize)
		}
		switch {
		case o.All:
			d.Defrag, d.Reason = true, "--all"
		case d.Fragmentation < o.Threshold:
			d.Reason = fmt.Sprintf("%.0f%% free: under the threshold %.0f%%", 100*d.Fragmentation, 100*o.Threshold)
		case d.Free < o.MinFree:
			d.Reason = fmt.Sprintf("%s free: under the minimum %s", Bytes(d.Free), Bytes(o.MinFree))
		default:
			d.Defrag, d.Reason = true, fmt.Sprintf("%.0f%% free (%s)", 100*d.Fragmentation, Bytes(d.Free))
		}
		p.Members = append(p.Members, d)
		if !d.Defrag {
			continue
		}
		h := m.h
		desc := fmt.Sprintf("defragment etcd member %s (%s of %s free, %.0f%%)", h.Name, Bytes(d.Free), Bytes(d.DBSize), 100*d.Fragmentation)
		act := plan.Action{Host: h.Name, Kind: plan.Maintenance, Desc: desc, Do: func(ctx context.Context) error { return c.defragMember(ctx, h, o) }}
		if d.Leader {
			last = append(last,
				plan.Action{Host: h.Name, Kind: plan.Maintenance, Desc: "move etcd leadership from " + h.Name + " to a healthy follower",
					Do: func(ctx context.Context) error { return c.moveLeaderAway(ctx, h, o) }},
				act)
			continue
		}
		followers = append(followers, act)
	}
	p.Actions = append(followers, last...)
	if len(p.Actions) > 0 {
		// Before anything is planned for a busy cluster: every apiserver
		// must be ready now, or the pauses could be the last straw.
		if err := c.apiserversReady(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// apiserversReady asks every control-plane apiserver's /readyz once.
func (c *Cluster) apiserversReady(ctx context.Context) error {
	for _, h := range c.Inv.ControlPlane {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.apiserverReady(rctx, h)
		cancel()
		if err != nil {
			return usererr.New(fmt.Errorf("kube-apiserver on %s is not ready: %w", h.Name, err),
				"see 'journalctl -u kube-apiserver' on "+h.Name+"; 'hardway verify' says more. Defragment when every apiserver is ready")
		}
	}
	return nil
}

// clusterHealthy is the check between two members: every member healthy,
// the member list answers (quorum), every apiserver ready.
func (c *Cluster) clusterHealthy(ctx context.Context, cli etcdAPI) error {
	for _, m := range c.memberStates(ctx, cli) {
		if m.err != nil {
			return usererr.New(fmt.Errorf("etcd member %s is not healthy: %w", m.h.Name, m.err),
				fmt.Sprintf("see 'journalctl -u etcd' on %s; run 'hardway etcd defrag' again once it is healthy", m.h.Name))
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := cli.Members(mctx)
	cancel()
	if err != nil {
		return usererr.New(fmt.Errorf("etcd has no quorum: %w", err), "'hardway verify' shows which members are unhealthy")
	}
	return c.apiserversReady(ctx)
}

func (o DefragOptions) wait(c *Cluster) time.Duration {
	if o.Wait > 0 {
		return o.Wait
	}
	return c.opt.ServiceTimeout
}

// waitHealthy polls clusterHealthy until it passes or o's wait is over.
func (c *Cluster) waitHealthy(ctx context.Context, cli etcdAPI, o DefragOptions) error {
	wctx, cancel := context.WithTimeout(ctx, o.wait(c))
	defer cancel()
	var last error
	err := poll.Until(wctx, poll.Options{Interval: 200 * time.Millisecond, Max: time.Second}, func(ctx context.Context) error {
		last = c.clusterHealthy(ctx, cli)
		return last
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// defragMember defragments h after proving the cluster healthy, moving
// leadership away first if h leads (an election may have made it leader
// since the plan), and waits for the cluster to be healthy again.
func (c *Cluster) defragMember(ctx context.Context, h inventory.Host, o DefragOptions) error {
	cli, err := c.maintEtcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := c.waitHealthy(ctx, cli, o); err != nil {
		return fmt.Errorf("not defragmenting %s: %w", h.Name, err)
	}
	if err := c.moveLeaderAway(ctx, h, o); err != nil {
		return err
	}
	ep := c.etcdEndpoint(h)
	before, _ := cli.Status(ctx, ep)
	start := time.Now()
	// The member answers nothing while it rewrites its file; a large
	// database takes minutes.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	err = cli.Defragment(dctx, ep)
	cancel()
	if err != nil {
		return usererr.New(err, fmt.Sprintf("see 'journalctl -u etcd' on %s; a failed defragmentation leaves the old file in place", h.Name))
	}
	took := time.Since(start)
	if err := c.waitHealthy(ctx, cli, o); err != nil {
		return fmt.Errorf("after defragmenting %s: %w", h.Name, err)
	}
	after, _ := cli.Status(ctx, ep)
	c.logf("  %s: %s -> %s in %s", h.Name, Bytes(before.DBSize), Bytes(after.DBSize), took.Round(time.Millisecond))
	return nil
}

// moveLeaderAway hands leadership from h to the healthy follower furthest
// along in the raft log, and waits until the members agree. Nothing to do
// when h does not lead.
func (c *Cluster) moveLeaderAway(ctx context.Context, h inventory.Host, o DefragOptions) error {
	cli, err := c.maintEtcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	ms := c.memberStates(ctx, cli)
	var self memberState
	var to *memberState
	for i, m := range ms {
		switch {
		case m.h.Name == h.Name:
			self = m
		case m.err == nil && !m.st.IsLearner && (to == nil || m.st.RaftIndex > to.st.RaftIndex):
			to = &ms[i]
		}
	}
	if self.err != nil {
		return fmt.Errorf("etcd member %s: %w", h.Name, self.err)
	}
	if leaderOf(ms) != self.st.MemberID {
		return nil
	}
	if to == nil {
		return usererr.New(fmt.Errorf("no healthy follower to take over leadership from %s", h.Name), "'hardway verify' shows which members are unhealthy")
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cli.MoveLeader(mctx, self.ep, to.st.MemberID); err != nil {
		return usererr.New(err, "etcd refuses a transfer to a member that lags behind; run again in a moment")
	}
	wctx, cancel2 := context.WithTimeout(ctx, o.wait(c))
	defer cancel2()
	if err := poll.Until(wctx, poll.Options{Interval: 200 * time.Millisecond}, func(ctx context.Context) error {
		if l := leaderOf(c.memberStates(ctx, cli)); l == self.st.MemberID || l == 0 {
			return fmt.Errorf("%s still leads", h.Name)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("moving leadership away from %s: %w", h.Name, err)
	}
	c.logf("  leadership moved from %s to %s", h.Name, to.h.Name)
	return nil
}

// CompactEtcd compacts etcd's history to the current revision, so that
// the space of deleted and overwritten keys becomes free pages a
// defragmentation can return. The apiservers notice (their watches restart
// from the compacted revision) and carry on. With dryRun it only reads the
// revision.
func (c *Cluster) CompactEtcd(ctx context.Context, dryRun bool) (int64, error) {
	cli, err := c.maintEtcd()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	var rev int64
	var errs []string
	for _, m := range c.memberStates(ctx, cli) {
		if m.err != nil {
			errs = append(errs, m.h.Name+": "+m.err.Error())
			continue
		}
		rev = max(rev, m.st.Revision)
	}
	if rev == 0 {
		return 0, usererr.New(fmt.Errorf("no etcd member answers: %s", strings.Join(errs, "; ")), "'hardway verify' says why")
	}
	if dryRun {
		return rev, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cli.Compact(cctx, rev); err != nil {
		if strings.Contains(err.Error(), "compacted") {
			return rev, nil // already compacted to it (the apiserver or an earlier run)
		}
		return 0, err
	}
	return rev, nil
}

// DisarmNoSpace disarms etcd's NOSPACE alarms and returns the members whose
// alarm it disarmed. It refuses while a member's database file is still at
// its quota (the next write would raise the alarm again) unless force.
func (c *Cluster) DisarmNoSpace(ctx context.Context, force bool) ([]string, error) {
	cli, err := c.maintEtcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	names := map[uint64]string{}
	for _, m := range c.memberStates(ctx, cli) {
		if m.err != nil {
			continue
		}
		names[m.st.MemberID] = m.h.Name
		if !force && m.st.DBSizeQuota > 0 && m.st.DBSize >= m.st.DBSizeQuota {
			return nil, usererr.New(fmt.Errorf("etcd member %s's database is %s, at its quota %s: disarming now raises NOSPACE again at the next write", m.h.Name, Bytes(m.st.DBSize), Bytes(m.st.DBSizeQuota)),
				"compact and defragment first: 'hardway etcd compact', then 'hardway etcd defrag --all'; if IN USE stays near the quota, the data fills it (--force disarms anyway)")
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	al, err := cli.DisarmNoSpace(dctx)
	var out []string
	for _, a := range al {
		n := names[a.MemberID]
		if n == "" {
			n = fmt.Sprintf("member %x", a.MemberID)
		}
		out = append(out, n)
	}
	return out, err
}

// Bytes renders a size in binary units, as 'hardway etcd status' does.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
