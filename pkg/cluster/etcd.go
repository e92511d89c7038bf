package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// etcdctlCmd is how a user on a control-plane host talks to etcd, for hints.
const etcdctlCmd = "etcdctl --endpoints https://127.0.0.1:2379 --cacert " + units.EtcdCACert +
	" --cert " + units.EtcdClientCert + " --key " + units.EtcdClientKey

func (c *Cluster) etcdPeerURL(h inventory.Host) string {
	return "https://" + net.JoinHostPort(h.IP(), strconv.Itoa(units.EtcdPeerPort))
}

// planEtcd plans, in this order: members that must join a running cluster
// (and nothing else: the next run plans the rest against the healed
// cluster); starts of stopped members, all together, then one wait for
// quorum; restarts of running members whose files changed, one at a time,
// each after the others are healthy and waiting for its own health; and,
// when every member runs, the removal of stale members that do not answer.
func (c *Cluster) planEtcd(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
	snaps, err := c.snapshots(ctx, earlier)
	if err != nil {
		return nil, err
	}
	joins, err := c.planJoins(ctx, snaps)
	if err != nil || len(joins) > 0 {
		return joins, err
	}
	var starts, restarts []plan.Action
	started := false
	for _, h := range c.Inv.ControlPlane {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		a := c.serviceAction(h, sh, snaps[h.Name], units.Etcd, serviceOpts{noBlock: true})
		switch {
		case a == nil:
		case a.Kind == plan.Restart:
			// A blocking restart with a health wait, after the other
			// members proved healthy: members restart one at a time and
			// quorum holds.
			restarts = append(restarts, *c.serviceAction(h, sh, snaps[h.Name], units.Etcd, serviceOpts{
				wait:  func(ctx context.Context) error { return c.etcdHealthy(ctx, h) },
				guard: func(ctx context.Context) error { return c.othersHealthy(ctx, h) },
			}))
		default:
			// Queued without blocking, on every host at once; the wait
			// that follows waits for them together.
			started = started || a.Kind == plan.Start
			a.Parallel = true
			starts = append(starts, *a)
		}
	}
	actions := starts
	if started {
		actions = append(actions, plan.Action{Kind: plan.Wait, Desc: "wait for etcd quorum and check members", Do: c.waitEtcd})
	}
	actions = append(actions, restarts...)
	if !started {
		ms, err := c.planMembers(ctx)
		if err != nil {
			return nil, err
		}
		actions = append(actions, ms...)
	}
	return actions, nil
}

// planJoins finds hosts that must join the running cluster as new members:
// their data dir is empty (a rebuilt or replaced host) while other members
// hold the cluster's data. Such a host cannot bootstrap with
// --initial-cluster-state new (etcd refuses: the member ID exists); it must
// be added with 'member add' and start with "existing". Its old member entry
// — which cannot answer: its etcd is stopped and its data gone — is removed
// first, only with --remove-stale-members, as it shrinks the cluster for a
// moment.
func (c *Cluster) planJoins(ctx context.Context, snaps map[string]*snapshot) ([]plan.Action, error) {
	var empty []inventory.Host
	withData := 0
	for _, h := range c.Inv.ControlPlane {
		sn := snaps[h.Name]
		switch {
		case sn.EtcdData:
			withData++
		case !sn.Units[units.Etcd].Active:
			empty = append(empty, h)
		}
	}
	if withData == 0 || len(empty) == 0 {
		return nil, nil // a new cluster, or nothing to replace
	}
	cli, err := c.etcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ms, err := cli.Members(mctx)
	if err != nil {
		return nil, usererr.New(fmt.Errorf("%d member(s) need to join, but the cluster does not answer: %w", len(empty), err),
			"start the members that hold data first (a quorum is needed to add members)")
	}
	var actions []plan.Action
	for _, h := range empty {
		peer := c.etcdPeerURL(h)
		var old []etcd.Member
		for _, m := range ms {
			if m.Name == h.Name || slices.Contains(m.PeerURLs, peer) {
				old = append(old, m)
			}
		}
		if len(old) > 0 && !c.opt.RemoveStaleMembers {
			return nil, usererr.New(fmt.Errorf("etcd on %s has no data but the cluster still lists it as member %s: the host was rebuilt", h.Name, old[0].IDHex()),
				fmt.Sprintf("let hardway replace it: hardway up --remove-stale-members\nor by hand, on a healthy member: %s member remove %s\nthen run 'hardway up' again", etcdctlCmd, old[0].IDHex()))
		}
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		desc := fmt.Sprintf("join etcd as a new member (%s)", peer)
		if len(old) > 0 {
			desc = fmt.Sprintf("replace etcd member %s: remove old member %s, add %s, start with --initial-cluster-state existing", h.Name, old[0].IDHex(), peer)
		}
		actions = append(actions, plan.Action{Host: h.Name, Kind: plan.Membership, Desc: desc, Do: func(ctx context.Context) error {
			return c.join(ctx, h, sh, old)
		}})
	}
	return actions, nil
}

// join removes h's old member entries, adds h and starts it.
func (c *Cluster) join(ctx context.Context, h inventory.Host, sh remote.Host, old []etcd.Member) error {
	cli, err := c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, m := range old {
		if err := cli.RemoveMember(ctx, m.ID); err != nil {
			return err
		}
	}
	peer := c.etcdPeerURL(h)
	if err := poll.Until(ctx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error { _, err := cli.AddMember(ctx, peer); return err }); err != nil {
		return err
	}
	env := "# Written by hardway up when this host joined the existing etcd cluster as a\n" +
		"# replacement member. etcd ignores it once " + units.EtcdDataDir + " holds data.\n" +
		"ETCD_INITIAL_CLUSTER_STATE=existing\n"
	if _, err := remote.WriteFile(ctx, sh, remote.File{Path: units.EtcdJoinEnv, Mode: units.ModeConfig, Data: []byte(env)}); err != nil {
		return err
	}
	if err := remote.DaemonReload(ctx, sh); err != nil {
		return err
	}
	if err := remote.Enable(ctx, sh, "etcd.service"); err != nil {
		return err
	}
	if err := remote.Start(ctx, sh, "etcd.service"); err != nil {
		return withJournal(ctx, sh, "etcd.service", err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.opt.ServiceTimeout)
	defer cancel()
	if err := c.etcdHealthy(wctx, h); err != nil {
		return withJournal(ctx, sh, "etcd.service", err)
	}
	return clearRestart(ctx, sh, units.Etcd)
}

// planMembers compares the member list with the inventory. A stale member
// (not in the inventory) that does not answer is removed, and only with
// --remove-stale-members; one that answers is named and never removed:
// hardway does not take a running etcd out of its cluster.
func (c *Cluster) planMembers(ctx context.Context) ([]plan.Action, error) {
	cli, err := c.etcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ms, err := cli.Members(mctx)
	if err != nil {
		return nil, usererr.New(fmt.Errorf("etcd member list: %w", err), "'hardway verify' shows which members are unhealthy")
	}
	stale, missing := etcd.Diff(ms, c.etcdWanted())
	var answering, gone []etcd.Member
	for _, m := range stale {
		url, err := c.memberAnswers(ctx, cli, m)
		if err != nil {
			return nil, err
		}
		if url != "" {
			answering = append(answering, m)
		} else {
			gone = append(gone, m)
		}
	}
	if len(answering) > 0 {
		return nil, runningStaleErr(answering)
	}
	if len(gone) > 0 && !c.opt.RemoveStaleMembers {
		return nil, etcd.StaleError(gone, etcdctlCmd)
	}
	var actions []plan.Action
	for _, m := range gone {
		actions = append(actions, plan.Action{Kind: plan.Membership,
			Desc: fmt.Sprintf("remove stale etcd member %s (id %s, peer %s): not in the inventory and not answering", memberName(m), m.IDHex(), strings.Join(m.PeerURLs, ",")),
			Do:   func(ctx context.Context) error { return c.removeStale(ctx, m) }})
	}
	if len(actions) == 0 && len(missing) > 0 {
		var names []string
		for _, w := range missing {
			names = append(names, w.Name)
		}
		return nil, usererr.New(fmt.Errorf("etcd members missing from the cluster: %s", strings.Join(names, ", ")),
			"a replaced host must join as a new member: remove the stale member, wipe /var/lib/etcd on the new host, and run 'hardway up' again")
	}
	return actions, nil
}

// removeStale removes m after checking again that it does not answer: the
// plan may be minutes old.
func (c *Cluster) removeStale(ctx context.Context, m etcd.Member) error {
	cli, err := c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	url, err := c.memberAnswers(ctx, cli, m)
	if err != nil {
		return err
	}
	if url != "" {
		return runningStaleErr([]etcd.Member{m})
	}
	return cli.RemoveMember(ctx, m.ID)
}

func memberName(m etcd.Member) string {
	if m.Name == "" {
		return "(never started)"
	}
	return m.Name
}

// runningStaleErr names stale members that still answer.
func runningStaleErr(ms []etcd.Member) error {
	var names []string
	for _, m := range ms {
		names = append(names, fmt.Sprintf("%s (id %s, %s)", memberName(m), m.IDHex(), strings.Join(m.ClientURLs, ",")))
	}
	return usererr.New(fmt.Errorf("etcd members not in the inventory still answer: %s", strings.Join(names, "; ")),
		"hardway never removes a running member: if the host belongs to the cluster, add it to the inventory; "+
			"if it is retired, stop etcd on it first, then run 'hardway up --remove-stale-members'")
}

// memberAnswers returns the client URL at which m answered a status
// request, or "" when it answered at none (a member added but never started
// has none). An error means it could not be told: the tunnel to the
// cluster itself is down, so no answer proves nothing.
func (c *Cluster) memberAnswers(ctx context.Context, cli etcdAPI, m etcd.Member) (string, error) {
	if len(m.ClientURLs) == 0 {
		return "", nil
	}
	if _, err := c.Host(ctx, c.Inv.ControlPlane[0].Name); err != nil {
		return "", fmt.Errorf("cannot tell whether etcd member %s answers: %w", memberName(m), err)
	}
	for _, u := range m.ClientURLs {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Status(sctx, u)
		cancel()
		if err == nil {
			return u, nil
		}
	}
	return "", nil
}

// checkMembers proves the member list equals the inventory; it only reads.
func (c *Cluster) checkMembers(ctx context.Context, cli etcdAPI) error {
	ms, err := cli.Members(ctx)
	if err != nil {
		return err
	}
	stale, missing := etcd.Diff(ms, c.etcdWanted())
	if len(stale) > 0 {
		return etcd.StaleError(stale, etcdctlCmd)
	}
	if len(missing) > 0 {
		var names []string
		for _, w := range missing {
			names = append(names, w.Name)
		}
		return usererr.New(fmt.Errorf("etcd members missing from the cluster: %s", strings.Join(names, ", ")),
			"a replaced host must join as a new member: remove the stale member, wipe /var/lib/etcd on the new host, and run 'hardway up' again")
	}
	return nil
}

func (c *Cluster) etcdHealthy(ctx context.Context, h inventory.Host) error {
	cli, err := c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	return c.memberHealthy(ctx, cli, h)
}

// memberHealthy polls h's member through cli until it answers healthy.
func (c *Cluster) memberHealthy(ctx context.Context, cli etcdAPI, h inventory.Host) error {
	return poll.Until(ctx, healthPoll, func(ctx context.Context) error { return cli.Health(ctx, c.etcdEndpoint(h)) })
}

// othersHealthy is the guard before restarting etcd on h: every other
// member must be healthy now, or the restart could cost the quorum.
func (c *Cluster) othersHealthy(ctx context.Context, h inventory.Host) error {
	cli, err := c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, o := range c.Inv.ControlPlane {
		if o.Name == h.Name {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cli.Health(hctx, c.etcdEndpoint(o))
		cancel()
		if err != nil {
			return usererr.New(fmt.Errorf("not restarting etcd on %s: member %s is not healthy (%w); a restart now could lose the quorum", h.Name, o.Name, err),
				fmt.Sprintf("bring etcd on %s back first ('hardway verify' says why), then run again", o.Name))
		}
	}
	return nil
}

// waitEtcd waits for every member started without blocking, then proves
// the member list; it changes nothing but the restart markers.
func (c *Cluster) waitEtcd(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, c.opt.ServiceTimeout)
	defer cancel()
	// Every member at once: they came up together, and a wait host by host
	// would add each host's round trips and poll intervals to the next.
	// The first failure ends the others' waits and is the one reported.
	// One client serves every member's health and the member list.
	cli, err := c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() { first = err; cancel() })
	}
	eachHost(c.Inv.ControlPlane, func(_ int, h inventory.Host) {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			fail(err)
			return
		}
		if err := remote.WaitActive(wctx, sh, "etcd.service", c.opt.ServiceTimeout); err != nil {
			fail(usererr.New(fmt.Errorf("etcd on %s: %w", h.Name, err),
				"see 'journalctl -u etcd' on "+h.Name+"; a data dir from another cluster needs removing: rm -rf /var/lib/etcd/member"))
			return
		}
		if err := c.memberHealthy(wctx, cli, h); err != nil {
			fail(err)
			return
		}
		if err := clearRestart(ctx, sh, units.Etcd); err != nil {
			fail(err)
		}
	})
	if first != nil {
		return first
	}
	return c.checkMembers(ctx, cli)
}
