package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// unitState is what systemd says about one unit on one host.
type unitState struct {
	Active, Enabled, NeedReload bool
	ActiveEnter                 string
}

func queryUnit(ctx context.Context, sh remote.Host, unit string) (unitState, error) {
	out, err := sh.Run(ctx, fmt.Sprintf("systemctl show -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp %s", remote.Quote(unit)), nil)
	if err != nil {
		return unitState{}, err
	}
	var st unitState
	for _, l := range strings.Split(string(out), "\n") {
		st.set(l)
	}
	return st, nil
}

// set takes one "Key=value" line of 'systemctl show'.
func (st *unitState) set(line string) {
	k, v, _ := strings.Cut(line, "=")
	switch k {
	case "ActiveState":
		st.Active = v == "active"
	case "UnitFileState":
		st.Enabled = v == "enabled"
	case "NeedDaemonReload":
		st.NeedReload = v == "yes"
	case "ActiveEnterTimestamp":
		st.ActiveEnter = v
	}
}

// snapshot is what one host's systemd and hardway's markers say, read with
// one command: a converged run asks each host once per step instead of
// twice per service.
type snapshot struct {
	Units    map[string]unitState // by component
	Pending  map[string]bool      // restart markers, plus what push planned
	EtcdData bool                 // the etcd data dir holds a member
}

func (c *Cluster) snapshot(ctx context.Context, sh remote.Host) (*snapshot, error) {
	var script strings.Builder
	for _, comp := range units.Names(units.ControlPlane) {
		fmt.Fprintf(&script, "echo '@%s'; systemctl show -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp %s\n", comp, remote.Quote(comp+".service"))
	}
	fmt.Fprintf(&script, "echo '@restart'; ls -1 %s 2>/dev/null || true\n", restartDir)
	fmt.Fprintf(&script, "echo '@data'; if [ -d %s/member ]; then echo yes; else echo no; fi\n", units.EtcdDataDir)
	out, err := sh.Run(ctx, script.String(), nil)
	if err != nil {
		return nil, err
	}
	sn := &snapshot{Units: map[string]unitState{}, Pending: map[string]bool{}}
	section := ""
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(l, "@"); ok {
			section = name
			continue
		}
		switch section {
		case "restart":
			if l != "" {
				sn.Pending[l] = true
			}
		case "data":
			sn.EtcdData = sn.EtcdData || l == "yes"
		default:
			st := sn.Units[section]
			st.set(l)
			sn.Units[section] = st
		}
	}
	c.mu.Lock()
	for comp := range c.willRestart[sh.Name()] {
		sn.Pending[comp] = true
	}
	c.mu.Unlock()
	return sn, nil
}

// snapshots reads every control-plane host's snapshot in parallel.
func (c *Cluster) snapshots(ctx context.Context) (map[string]*snapshot, error) {
	var mu sync.Mutex
	out := map[string]*snapshot{}
	err := remote.ForEach(ctx, c.Inv.ControlPlane, 8, func(ctx context.Context, h inventory.Host) error {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		sn, err := c.snapshot(ctx, sh)
		if err != nil {
			return err
		}
		mu.Lock()
		out[h.Name] = sn
		mu.Unlock()
		return nil
	})
	return out, err
}

// journalTail is the last lines of a unit's journal, for error messages.
func journalTail(ctx context.Context, sh remote.Host, unit string, n int) string {
	out, _ := remote.Journal(ctx, sh, unit, n)
	return strings.TrimSpace(out)
}

// withJournal wraps a failed systemctl call with the unit's journal.
func withJournal(ctx context.Context, sh remote.Host, unit string, err error) error {
	if err == nil {
		return nil
	}
	return usererr.New(fmt.Errorf("%s: %w\n%s", sh.Name(), err, journalTail(ctx, sh, unit, 30)),
		fmt.Sprintf("see 'journalctl -u %s' on %s", unit, sh.Name()))
}

// serviceActions returns the actions that bring one component on one host to
// enabled + running with its current files: daemon-reload when a unit file
// changed, enable, start or restart (when its files changed), then wait.
func (c *Cluster) serviceActions(ctx context.Context, h inventory.Host, sn *snapshot, comp string, noBlock bool, wait func(ctx context.Context) error) ([]plan.Action, error) {
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		return nil, err
	}
	unit := comp + ".service"
	st, pending := sn.Units[comp], sn.Pending
	var steps []string
	if st.NeedReload {
		steps = append(steps, "daemon-reload")
	}
	if !st.Enabled {
		steps = append(steps, "enable")
	}
	switch {
	case !st.Active:
		steps = append(steps, "start")
	case pending[comp]:
		steps = append(steps, "restart (files changed)")
	}
	if len(steps) == 0 {
		if pending[comp] {
			// Started fresh with the new files already: nothing to restart.
			return []plan.Action{{Host: h.Name, Desc: "clear restart marker of " + comp, Do: func(ctx context.Context) error { return clearRestart(ctx, sh, comp) }}}, nil
		}
		return nil, nil
	}
	desc := comp + ": " + strings.Join(steps, ", ")
	return []plan.Action{{Host: h.Name, Desc: desc, Do: func(ctx context.Context) error {
		for _, s := range steps {
			var err error
			switch {
			case s == "daemon-reload":
				err = remote.DaemonReload(ctx, sh)
			case s == "enable":
				err = remote.Enable(ctx, sh, unit)
			case s == "start" && noBlock:
				// Queue the start and return: the caller waits for all
				// members together.
				_, err = sh.Run(ctx, "systemctl start --no-block "+remote.Quote(unit), nil)
			case s == "start":
				err = remote.Start(ctx, sh, unit)
			default:
				err = remote.Restart(ctx, sh, unit)
			}
			if err != nil {
				return withJournal(ctx, sh, unit, err)
			}
		}
		if wait != nil && !noBlock {
			wctx, cancel := context.WithTimeout(ctx, c.opt.ServiceTimeout)
			defer cancel()
			if err := wait(wctx); err != nil {
				return usererr.New(fmt.Errorf("%s did not become healthy on %s: %w\n%s", comp, h.Name, err, journalTail(ctx, sh, unit, 30)),
					fmt.Sprintf("see 'journalctl -u %s' on %s", unit, h.Name))
			}
		}
		return clearRestart(ctx, sh, comp)
	}}}, nil
}

// poll calls fn until it succeeds or ctx ends, returning the last error.
func poll(ctx context.Context, every time.Duration, fn func(ctx context.Context) error) error {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = fn(actx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(every):
		}
	}
}

// --- etcd --------------------------------------------------------------

func (c *Cluster) planEtcd(ctx context.Context) ([]plan.Action, error) {
	joins, err := c.planJoins(ctx)
	if err != nil || len(joins) > 0 {
		// Replacement members first; the rest is planned by the next run
		// (or the next step of this one) against the healed cluster.
		return joins, err
	}
	snaps, err := c.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var starts, restarts []plan.Action
	for _, h := range c.Inv.ControlPlane {
		// A member that is down must be started without blocking: on a new
		// cluster no member is ready before a quorum has started.
		as, err := c.serviceActions(ctx, h, snaps[h.Name], units.Etcd, true, nil)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if strings.Contains(a.Desc, "restart") {
				// Rebuild with a blocking restart and a health wait, so
				// members restart one at a time and quorum holds.
				hh := h
				ras, err := c.serviceActions(ctx, hh, snaps[hh.Name], units.Etcd, false, func(ctx context.Context) error { return c.etcdHealthy(ctx, hh) })
				if err != nil {
					return nil, err
				}
				restarts = append(restarts, ras...)
			} else {
				starts = append(starts, a)
			}
		}
	}
	actions := append(starts, restarts...)
	if len(starts) > 0 {
		actions = append(actions, plan.Action{Desc: "wait for etcd quorum and check members", Do: c.waitEtcd})
		return actions, nil
	}
	if len(actions) == 0 {
		// Converged on the hosts: still prove the members match.
		if err := c.checkMembers(ctx); err != nil {
			return nil, err
		}
	}
	return actions, nil
}

// planJoins finds hosts that must join the running cluster as new members:
// their data dir is empty (a rebuilt or replaced host) while other members
// hold the cluster's data. Such a host cannot bootstrap with
// --initial-cluster-state new (etcd refuses: the member ID exists); it must
// be added with 'member add' and start with "existing". Its old member entry
// is removed first — only with --remove-stale-members, as it shrinks the
// cluster for a moment.
func (c *Cluster) planJoins(ctx context.Context) ([]plan.Action, error) {
	snaps, err := c.snapshots(ctx)
	if err != nil {
		return nil, err
	}
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
	cli, err := c.Etcd()
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
		peer := "https://" + net.JoinHostPort(h.IP(), strconv.Itoa(units.EtcdPeerPort))
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
		actions = append(actions, plan.Action{Host: h.Name, Desc: desc, Do: func(ctx context.Context) error {
			cli, err := c.Etcd()
			if err != nil {
				return err
			}
			defer cli.Close()
			for _, m := range old {
				if err := cli.RemoveMember(ctx, m.ID); err != nil {
					return err
				}
			}
			if err := poll(ctx, time.Second, func(ctx context.Context) error { _, err := cli.AddMember(ctx, peer); return err }); err != nil {
				return err
			}
			env := "# Written by hardway up when this host joined the existing etcd cluster as a\n" +
				"# replacement member. etcd ignores it once " + units.EtcdDataDir + " holds data.\n" +
				"ETCD_INITIAL_CLUSTER_STATE=existing\n"
			if _, err := remote.WriteFile(ctx, sh, remote.File{Path: units.EtcdJoinEnv, Mode: 0o644, Data: []byte(env)}); err != nil {
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
		}})
	}
	return actions, nil
}

func (c *Cluster) etcdHealthy(ctx context.Context, h inventory.Host) error {
	cli, err := c.Etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	return poll(ctx, time.Second, func(ctx context.Context) error { return cli.Health(ctx, c.etcdEndpoint(h)) })
}

func (c *Cluster) waitEtcd(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, c.opt.ServiceTimeout)
	defer cancel()
	for _, h := range c.Inv.ControlPlane {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		if err := remote.WaitActive(wctx, sh, "etcd.service", c.opt.ServiceTimeout); err != nil {
			return usererr.New(fmt.Errorf("etcd on %s: %w", h.Name, err),
				"see 'journalctl -u etcd' on "+h.Name+"; a data dir from another cluster needs removing: rm -rf /var/lib/etcd/member")
		}
		if err := c.etcdHealthy(wctx, h); err != nil {
			return err
		}
		if err := clearRestart(ctx, sh, units.Etcd); err != nil {
			return err
		}
	}
	return c.checkMembers(ctx)
}

// checkMembers compares the member list with the inventory; stale members
// are removed only with --remove-stale-members, else named with the fix.
func (c *Cluster) checkMembers(ctx context.Context) error {
	cli, err := c.Etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	ms, err := cli.Members(ctx)
	if err != nil {
		return err
	}
	stale, missing := etcd.Diff(ms, c.etcdWanted())
	if len(stale) > 0 && !c.opt.RemoveStaleMembers {
		return c.staleErr(stale)
	}
	for _, m := range stale {
		c.logf("[etcd] removing stale member %s (%s)", m.Name, m.IDHex())
		if err := cli.RemoveMember(ctx, m.ID); err != nil {
			return err
		}
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

// --- control plane -----------------------------------------------------

func (c *Cluster) planControlPlane(ctx context.Context) ([]plan.Action, error) {
	snaps, err := c.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var actions []plan.Action
	for _, comp := range []string{units.APIServer, units.ControllerManager, units.Scheduler} {
		for _, h := range c.Inv.ControlPlane {
			h, comp := h, comp
			as, err := c.serviceActions(ctx, h, snaps[h.Name], comp, false, func(ctx context.Context) error { return c.componentHealthy(ctx, h, comp) })
			if err != nil {
				return nil, err
			}
			actions = append(actions, as...)
		}
	}
	return actions, nil
}

// componentHealthy polls a component's health endpoint through SSH.
func (c *Cluster) componentHealthy(ctx context.Context, h inventory.Host, comp string) error {
	return poll(ctx, time.Second, func(ctx context.Context) error { return c.probe(ctx, h, comp) })
}

// healthPath is where each component says it is healthy, on the host's loopback.
var healthPath = map[string]struct {
	port int
	path string
}{
	units.APIServer:         {6443, "/readyz"},
	units.ControllerManager: {10257, "/healthz"},
	units.Scheduler:         {10259, "/healthz"},
}

// probe GETs the component's health endpoint once, through the host's SSH
// connection. The apiserver's certificate is checked against the cluster
// CA; controller-manager and scheduler serve self-signed certificates they
// make at start, which no CA vouches for, so only their answer counts.
func (c *Cluster) probe(ctx context.Context, h inventory.Host, comp string) error {
	ep := healthPath[comp]
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		return err
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if comp == units.APIServer {
		pool, err := c.caPool("ca")
		if err != nil {
			return err
		}
		tlsCfg.RootCAs, tlsCfg.ServerName = pool, "127.0.0.1"
	} else {
		tlsCfg.InsecureSkipVerify = true // self-signed serving cert on loopback; see above
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return sh.Client().DialContext(ctx, "tcp", addr)
		}}
	defer tr.CloseIdleConnections()
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ep.port)) + ep.path
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", ep.path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// --- rbac --------------------------------------------------------------

// kubeletClientCN is the subject the RBAC binding must name.
func (c *Cluster) kubeletClientCN() (string, error) {
	cert, err := tls.LoadX509KeyPair(c.opt.State.Cert("apiserver-kubelet-client"), c.opt.State.Key("apiserver-kubelet-client"))
	if err != nil {
		return "", fmt.Errorf("apiserver-kubelet-client certificate: %w", err)
	}
	x, err := parseLeaf(cert)
	if err != nil {
		return "", err
	}
	return x.Subject.CommonName, nil
}

func (c *Cluster) planRBAC(ctx context.Context) ([]plan.Action, error) {
	cn, err := c.kubeletClientCN()
	if err != nil {
		return nil, err
	}
	cs, err := c.Kube(c.Inv.ControlPlane[0])
	if err != nil {
		return nil, err
	}
	diffs, err := kube.RBACState(ctx, cs, cn)
	if err != nil {
		return nil, err
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	return []plan.Action{{Desc: "apply ClusterRole " + kube.KubeletAPIRole + " and ClusterRoleBinding " + kube.KubeletAPIBinding + " (subject User " + cn + ")",
		Diff: strings.Join(diffs, "\n"),
		Do:   func(ctx context.Context) error { return kube.ApplyRBAC(ctx, cs, cn) }}}, nil
}
