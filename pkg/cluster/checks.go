package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// Names of the checks whose results the daemon acts on or counts; a rename
// here reaches it (see daemon.RepairHosts) instead of silently disabling it.
const (
	CheckHostSSH         = "host/ssh"
	CheckHostUnits       = "host/units"
	CheckHostClock       = "host/clock"
	CheckHostFiles       = "host/files"
	CheckHostBinaries    = "host/binaries"
	CheckEtcdHealth      = "etcd/health"
	CheckEtcdMembers     = "etcd/members"
	CheckEtcdLeader      = "etcd/leader"
	CheckEtcdAlarms      = "etcd/alarms"
	CheckAPIServerLivez  = "apiserver/livez"
	CheckAPIServerReadyz = "apiserver/readyz"
)

// Checks are the facts `hardway verify` proves, in report order.
func (c *Cluster) Checks() []verify.Check {
	checks := []verify.Check{
		{Name: "pki", Doc: "local certificates: chain, key match, SANs cover the inventory, expiry; encryption config; kubeconfigs", Run: c.checkPKI},
	}
	for _, h := range c.Inv.ControlPlane {
		checks = append(checks,
			verify.Check{Name: "host", Doc: "SSH with a verified host key, units enabled and active, clock, the apiserver's audit log written in the last " + auditStale.String(), Run: func(ctx context.Context) []verify.Result { return c.checkHost(ctx, h) }},
			verify.Check{Name: CheckHostFiles, Doc: "binaries match the lock, files match the rendered ones (by the stat cache; every byte with --rehash)", Run: func(ctx context.Context) []verify.Result { return c.checkHostFiles(ctx, h) }})
	}
	checks = append(checks,
		verify.Check{Name: "etcd", Doc: "every member healthy, member list equals the inventory, one leader, no alarms", Run: c.checkEtcd},
		verify.Check{Name: "apiserver", Doc: "/livez and /readyz?verbose on every host", Run: c.checkAPIServers},
		verify.Check{Name: "controllers", Doc: "controller-manager and scheduler /healthz on every host; their leader leases held", Run: c.checkControllers},
		verify.Check{Name: "rbac", Doc: "apiserver-to-kubelet RBAC present, bound to the kubelet-client certificate's CN", Run: c.checkRBAC},
		verify.Check{Name: "encryption", Doc: "a probe Secret is stored encrypted in etcd (k8s:enc:<provider>:v1:)", Run: c.checkEncryptionAndRotation},
		verify.Check{Name: "versions", Doc: "components within the version skew policy", Run: c.checkVersions},
		verify.Check{Name: CheckHostPrep, Doc: "each host's own setup as the host step leaves it: kernel modules and sysctls, packages, firewall ports, the kubelet's resolv.conf link; the distribution", Run: c.checkHostPrep},
	)
	checks = append(checks, c.WorkerChecks()...)
	checks = append(checks, c.SecurityChecks()...)
	checks = append(checks, c.DNSChecks()...)
	checks = append(checks,
		verify.Check{Name: "nodes", Doc: "NotReady nodes with the reason, pods Pending behind the not-ready taint, Calico IPPools that differ from podCIDR", Run: c.checkNodes},
	)
	return checks
}

func (c *Cluster) checkPKI(ctx context.Context) []verify.Result {
	var out []verify.Result
	n := 0
	for _, r := range pki.Check(c.Inv, c.opt.State, time.Now()) {
		n++
		switch r.State {
		case pki.CheckFailed:
			out = append(out, verify.Failf("", pki.CheckHint(c.Inv, c.opt.State, r), "%s: %s", r.Name, strings.Join(r.Problems, "; ")))
		case pki.CheckWarning:
			hint := pki.RenewHint(r)
			if hint == "" {
				hint = "'hardway up' reissues leaves in their renewal window; 'hardway certs check' has details"
			}
			out = append(out, verify.Warnf("", hint, "%s: %s", r.Name, strings.Join(r.Problems, "; ")))
		}
	}
	if len(out) == 0 {
		out = append(out, verify.OKf("", "%d certificates, keys, kubeconfigs and the encryption config are valid", n))
	}
	return append(out, c.checkEtcdTrust()...)
}

// checkEtcdTrust warns about a cluster whose etcd trusts the cluster CA
// (made before the etcd CA) and about a CA rotation left half done.
func (c *Cluster) checkEtcdTrust() []verify.Result {
	rs, err := pki.CARotationsUnderWay(c.opt.State)
	if err != nil {
		return []verify.Result{verify.Failf("", usererr.HintOf(err), "%v", err)}
	}
	var out []verify.Result
	for _, r := range rs {
		out = append(out, verify.Warnf("", "'hardway rotate ca --which "+r.Which+"' finishes it",
			"a CA rotation is under way (%s; %d of %d phases done)", r.Describe(), r.Done, pki.PhaseDropOld))
	}
	if len(rs) > 0 {
		return out
	}
	if legacy, err := pki.EtcdLegacy(c.opt.State); err == nil && legacy {
		out = append(out, verify.Warnf("", "'hardway rotate ca --which etcd' gives etcd a CA of its own, host by host, without downtime",
			"etcd trusts the cluster CA, which also signs the workers' kubelet and kube-proxy certificates (and CSRs the controller-manager approves): "+
				"any of them can read and write every object in etcd, past RBAC, admission and audit"))
	}
	return out
}

func (c *Cluster) checkHost(ctx context.Context, h inventory.Host) []verify.Result {
	res := func(check string, r verify.Result) verify.Result { r.Check = check; r.Host = h.Name; return r }
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		return []verify.Result{res(CheckHostSSH, verify.Failf(h.Name, hintOf(err, "check the address, the SSH key and known_hosts"), "%v", err))}
	}
	out := []verify.Result{res(CheckHostSSH, verify.OKf(h.Name, "connected, host key verified"))}
	// One command: the clock, every unit's state, the clock again (the
	// time the command took on the host is not part of the round trip).
	var script strings.Builder
	script.WriteString("date +%s%N\n")
	script.WriteString(unitsScript(units.Names(units.ControlPlane)))
	script.WriteString("echo '@end'; date +%s%N\n")
	// The audit log's stat, in the same command (security/audit-log).
	script.WriteString("echo '@audit'; " + auditLogScript + "\n")
	t0 := time.Now()
	b, err := sh.Run(ctx, script.String(), nil)
	t1 := time.Now()
	if err != nil {
		for _, comp := range units.Names(units.ControlPlane) {
			out = append(out, res(CheckHostUnits, verify.Failf(h.Name, timeoutHint(err), "%s: %v", comp, err)))
		}
		return out
	}
	clock, rest, _ := strings.Cut(string(b), "\n")
	rest, end, _ := strings.Cut(rest, "@end\n")
	end, audit, _ := strings.Cut(end, "@audit\n")
	sn := parseSnapshot(rest)
	for _, comp := range units.Names(units.ControlPlane) {
		st := sn.Units[comp]
		switch {
		case !st.Active:
			out = append(out, res(CheckHostUnits, verify.Failf(h.Name, fmt.Sprintf("see 'journalctl -u %s' on %s; 'hardway up' starts it", comp, h.Name), "%s is not active", comp)))
		case !st.Enabled:
			out = append(out, res(CheckHostUnits, verify.Failf(h.Name, "'hardway up' enables it, so it comes back after a reboot", "%s is running but not enabled", comp)))
		default:
			out = append(out, res(CheckHostUnits, verify.OKf(h.Name, "%s enabled and active since %s", comp, st.ActiveEnter)))
		}
	}
	var ns, ens int64
	if _, err := fmt.Sscan(strings.TrimSpace(clock), &ns); err == nil {
		rtt := t1.Sub(t0)
		if _, err := fmt.Sscan(strings.TrimSpace(end), &ens); err == nil && ens >= ns {
			rtt = max(rtt-time.Duration(ens-ns), 0)
		}
		skew := time.Unix(0, ns).Sub(t0.Add(rtt / 2))
		if abs(skew) > maxClockSkew {
			out = append(out, res(CheckHostClock, verify.Failf(h.Name, "run chrony or systemd-timesyncd on every host", "clock is %s off", skew.Round(time.Millisecond))))
		} else {
			out = append(out, res(CheckHostClock, verify.OKf(h.Name, "skew %s", skew.Round(time.Millisecond))))
		}
	}
	return append(out, res(CheckAuditLog, auditVerdict(h.Name, audit)))
}

// checkHostFiles compares every pushed file with what up would push, in one
// command per host: a file whose size, inode, mtime and ctime are still the
// ones recorded when hardway wrote it is not read again (any write to it
// since moved its ctime); the others are hashed. With Options.Rehash every
// byte is read (rot on the disk changes no stat).
func (c *Cluster) checkHostFiles(ctx context.Context, h inventory.Host) []verify.Result {
	res := func(check string, r verify.Result) verify.Result { r.Check = check; r.Host = h.Name; return r }
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		return []verify.Result{res(CheckHostFiles, verify.Failf(h.Name, "see "+CheckHostSSH, "%v", err))}
	}
	if err := c.ensureRendered(ctx); err != nil {
		return []verify.Result{res(CheckHostFiles, verify.Failf(h.Name, "", "render: %v", err))}
	}
	c.ensureSet(ctx)
	var out []verify.Result
	files, err := c.remoteFiles(c.manifest(h.Name))
	if err != nil {
		out = append(out, res(CheckHostFiles, verify.Failf(h.Name, hintOf(err, "run 'hardway fetch'"), "cannot compare files: %v", err)))
	} else if cmp, _, err := remote.Inspect(ctx, sh, files, map[bool]string{false: sumsCache, true: ""}[c.opt.Rehash], nil); err != nil {
		out = append(out, res(CheckHostFiles, verify.Failf(h.Name, timeoutHint(err), "compare files: %v", err)))
	} else {
		var bins, other []string
		for i, r := range cmp {
			if !r.Changed() {
				continue
			}
			if strings.HasPrefix(files[i].Path, units.BinDir+"/") {
				bins = append(bins, fmt.Sprintf("%s (%s)", files[i].Path, r.Why))
			} else {
				other = append(other, fmt.Sprintf("%s (%s)", files[i].Path, r.Why))
			}
		}
		if len(bins) > 0 {
			out = append(out, res(CheckHostBinaries, verify.Failf(h.Name, "'hardway up' puts back the binaries pinned in hardway.lock", "differ from hardway.lock: %s", strings.Join(bins, ", "))))
		} else {
			out = append(out, res(CheckHostBinaries, verify.OKf(h.Name, "match hardway.lock (sha256)")))
		}
		if len(other) > 0 {
			out = append(out, res(CheckHostFiles, verify.Failf(h.Name, "someone edited them on the host; 'hardway up --dry-run' shows the diff, 'hardway up' restores them", "drifted: %s", strings.Join(other, ", "))))
		} else {
			out = append(out, res(CheckHostFiles, verify.OKf(h.Name, "%d files match the rendered ones", len(files))))
		}
	}
	return out
}

// timeoutHint explains a check cut off by its time limit.
func timeoutHint(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "the host answered too slowly (overloaded?); raise 'hardway verify --timeout'"
	}
	return hintOf(err, "")
}

func (c *Cluster) checkEtcd(ctx context.Context) []verify.Result {
	cli, err := c.etcd()
	if err != nil {
		return []verify.Result{verify.Failf("", hintOf(err, "run 'hardway certs generate'"), "etcd client: %v", err)}
	}
	defer cli.Close()
	var out []verify.Result
	var seen []leaderSeen
	var statuses []memberState // of the healthy members, for the alarms' hint
	// The members are asked at once: an election between two answers is
	// then less likely too (see leaderResult).
	per := make([]verify.Result, len(c.Inv.ControlPlane))
	sts := make([]*etcd.Status, len(c.Inv.ControlPlane))
	eachHost(c.Inv.ControlPlane, func(i int, h inventory.Host) {
		ep := c.etcdEndpoint(h)
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := cli.Health(hctx, ep)
		var st etcd.Status
		if err == nil {
			st, err = cli.Status(hctx, ep)
		}
		if err != nil {
			per[i] = verify.Result{Check: CheckEtcdHealth, Host: h.Name, Status: verify.Fail, Message: err.Error(),
				Hint: fmt.Sprintf("see 'journalctl -u etcd' on %s; 'hardway up' starts it again", h.Name)}
			return
		}
		sts[i] = &st
		per[i] = verify.Result{Check: CheckEtcdHealth, Host: h.Name, Status: verify.Pass, Message: "healthy"}
	})
	for i, h := range c.Inv.ControlPlane {
		if sts[i] != nil {
			seen = append(seen, leaderSeen{leader: sts[i].Leader, term: sts[i].RaftTerm})
			statuses = append(statuses, memberState{h: h, ep: c.etcdEndpoint(h), st: *sts[i]})
		}
		out = append(out, per[i])
	}
	ms, err := cli.Members(ctx)
	if err != nil {
		return append(out, verify.Failf("", "quorum may be lost: start the stopped members", "member list: %v", err))
	}
	stale, missing := etcd.Diff(ms, c.etcdWanted())
	switch {
	case len(stale) > 0:
		err := etcd.StaleError(stale, etcdctlCmd)
		out = append(out, verify.Result{Check: CheckEtcdMembers, Status: verify.Fail, Message: err.Error(), Hint: strings.ReplaceAll(hintOf(err, ""), "\n", " ; ")})
	case len(missing) > 0:
		out = append(out, verify.Result{Check: CheckEtcdMembers, Status: verify.Fail, Message: fmt.Sprintf("%d inventory member(s) not in the cluster", len(missing)), Hint: "run 'hardway up'"})
	default:
		out = append(out, verify.Result{Check: CheckEtcdMembers, Status: verify.Pass, Message: fmt.Sprintf("%d members, as in the inventory", len(ms))})
	}
	out = append(out, leaderResult(seen))
	al, err := cli.Alarms(ctx)
	out = append(out, c.alarmResult(al, err, statuses))
	return out
}

// leaderSeen is one member's answer to "who leads, in which raft term".
type leaderSeen struct{ leader, term uint64 }

// leaderResult judges the members' answers. The members are asked one after
// another, so an election between two answers shows two leaders in two
// terms: only the newest term counts. Two leaders in one term, or none,
// is a real fault.
func leaderResult(seen []leaderSeen) verify.Result {
	var newest uint64
	for _, s := range seen {
		if s.leader != 0 {
			newest = max(newest, s.term)
		}
	}
	leaders := map[uint64]bool{}
	for _, s := range seen {
		if s.leader != 0 && s.term == newest {
			leaders[s.leader] = true
		}
	}
	if len(leaders) == 1 {
		return verify.Result{Check: CheckEtcdLeader, Status: verify.Pass, Message: fmt.Sprintf("one leader (term %d)", newest)}
	}
	return verify.Result{Check: CheckEtcdLeader, Status: verify.Fail, Message: fmt.Sprintf("%d leaders seen in term %d", len(leaders), newest),
		Hint: "members disagree or have no quorum: check the network between the hosts (port 2380)"}
}

func (c *Cluster) checkAPIServers(ctx context.Context) []verify.Result {
	per := make([][]verify.Result, len(c.Inv.ControlPlane))
	eachHost(c.Inv.ControlPlane, func(i int, h inventory.Host) {
		cs, err := c.Kube(h)
		if err != nil {
			per[i] = append(per[i], verify.Result{Check: CheckAPIServerReadyz, Host: h.Name, Status: verify.Fail, Message: err.Error()})
			return
		}
		if err := kube.Livez(ctx, cs); err != nil {
			per[i] = append(per[i], verify.Result{Check: CheckAPIServerLivez, Host: h.Name, Status: verify.Fail, Message: err.Error(), Hint: "see 'journalctl -u kube-apiserver' on " + h.Name})
		} else {
			per[i] = append(per[i], verify.Result{Check: CheckAPIServerLivez, Host: h.Name, Status: verify.Pass, Message: "ok"})
		}
		body, err := kube.Readyz(ctx, cs)
		if err != nil {
			msg := err.Error()
			if f := kube.FailedReadyChecks(body); len(f) > 0 {
				msg = "failing: " + strings.Join(f, "; ")
			}
			per[i] = append(per[i], verify.Result{Check: CheckAPIServerReadyz, Host: h.Name, Status: verify.Fail, Message: msg, Hint: "an etcd failure here means the apiserver cannot reach etcd: check 'hardway verify' etcd lines"})
		} else {
			per[i] = append(per[i], verify.Result{Check: CheckAPIServerReadyz, Host: h.Name, Status: verify.Pass, Message: "ok"})
		}
	})
	var out []verify.Result
	for _, rs := range per {
		out = append(out, rs...)
	}
	return out
}

// eachHost calls fn for every host at once and returns when all are done;
// fn writes its results by index, so the report keeps inventory order.
func eachHost(hosts []inventory.Host, fn func(i int, h inventory.Host)) {
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { fn(i, h) })
	}
	wg.Wait()
}

func (c *Cluster) checkControllers(ctx context.Context) []verify.Result {
	var out []verify.Result
	for _, comp := range []string{units.ControllerManager, units.Scheduler} {
		per := make([]verify.Result, len(c.Inv.ControlPlane))
		eachHost(c.Inv.ControlPlane, func(i int, h inventory.Host) {
			if err := c.probe(ctx, h, comp); err != nil {
				per[i] = verify.Result{Check: comp + "/healthz", Host: h.Name, Status: verify.Fail, Message: err.Error(), Hint: "see 'journalctl -u " + comp + "' on " + h.Name}
			} else {
				per[i] = verify.Result{Check: comp + "/healthz", Host: h.Name, Status: verify.Pass, Message: "ok"}
			}
		})
		out = append(out, per...)
		cs, err := c.kubeClient()
		if err != nil {
			continue
		}
		holder, err := kube.LeaseHolder(ctx, cs, comp)
		if err != nil || holder == "" {
			out = append(out, verify.Result{Check: comp + "/leader", Status: verify.Fail, Message: fmt.Sprintf("no leader: %v", err),
				Hint: "'leaderelection lost' in its journal points at a slow etcd disk (fsync): see the preflight fsync figure"})
		} else {
			out = append(out, verify.Result{Check: comp + "/leader", Status: verify.Pass, Message: "held by " + holder})
		}
	}
	return out
}

func (c *Cluster) checkRBAC(ctx context.Context) []verify.Result {
	cn, err := c.kubeletClientCN()
	if err != nil {
		return []verify.Result{verify.Failf("", "run 'hardway certs generate'", "%v", err)}
	}
	cs, err := c.kubeClient()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	diffs, err := kube.RBACState(ctx, cs, cn)
	switch {
	case err != nil:
		return []verify.Result{verify.Failf("", "", "%v", err)}
	case len(diffs) > 0:
		return []verify.Result{verify.Failf("", "'hardway up --only rbac' applies it; without it 'kubectl logs/exec' fail with Forbidden", "%s", strings.Join(diffs, "; "))}
	}
	return []verify.Result{verify.OKf("", "%s bound to User %s", kube.KubeletAPIRole, cn)}
}

func (c *Cluster) checkEncryption(ctx context.Context) []verify.Result {
	cs, err := c.kubeClient()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	if err := kube.WriteProbeSecret(ctx, cs); err != nil {
		return []verify.Result{verify.Failf("", "the apiserver must be ready", "%v", err)}
	}
	cli, err := c.etcd()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	defer cli.Close()
	raw, err := cli.Get(ctx, kube.ProbeKey())
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	want := "k8s:enc:" + c.Inv.Encryption.Provider + ":v1:"
	switch {
	case bytes.HasPrefix(raw, []byte(want)):
		return []verify.Result{verify.OKf("", "%s is stored as %s…", kube.ProbeKey(), want)}
	case bytes.HasPrefix(raw, []byte("k8s:enc:")):
		got := string(raw[:min(len(raw), 32)])
		return []verify.Result{verify.Warnf("", "the first provider of the encryption config is not the inventory's: 'hardway rotate encryption-key' moves every Secret to a new key of the inventory's provider", "encrypted, but as %q, not %s", got, want)}
	default:
		return []verify.Result{verify.Failf("", "the apiserver runs without --encryption-provider-config or with identity first: 'hardway up' renders and restarts it",
			"secrets are stored in plain text in etcd")}
	}
}

func (c *Cluster) checkVersions(ctx context.Context) []verify.Result {
	var out []verify.Result
	fail := func(host, msg, hint string) {
		out = append(out, verify.Result{Check: "versions", Host: host, Status: verify.Fail, Message: msg, Hint: hint})
	}
	// An upgrade that stopped half-way is a failing check until it is
	// finished: some hosts run one minor, some the next.
	if rec, err := LoadUpgrade(c.opt.State); err != nil {
		fail("", err.Error(), usererr.HintOf(err))
	} else if rec != nil {
		fail("", rec.Summary(), "'hardway upgrade apply -i "+usererr.Quote(c.Inv.Path)+"' finishes it; 'hardway upgrade plan' shows what each host runs")
	}
	// What serves: each apiserver's /version, and each worker's Node (the
	// kubelet that registered), checked against the skew rules that need
	// no target (pkg/skew.Running).
	var obs []skew.Observation
	for _, h := range c.Inv.ControlPlane {
		cs, err := c.Kube(h)
		if err != nil {
			continue
		}
		info, err := cs.Discovery().ServerVersion()
		if err != nil {
			fail(h.Name, err.Error(), "")
			continue
		}
		v, err := version.NewSemver(strings.TrimPrefix(info.GitVersion, "v"))
		if err != nil {
			continue
		}
		obs = append(obs, skew.Observation{Host: h.Name, Component: skew.APIServer, Source: skew.FromAPI, Version: v, Raw: info.GitVersion})
		if c.Inv.K8s != nil && v.Segments()[1] != c.Inv.K8s.Segments()[1] {
			out = append(out, verify.Result{Check: "versions", Host: h.Name, Status: verify.Warn, Message: fmt.Sprintf("apiserver %s, inventory %s", info.GitVersion, c.Inv.KubernetesVersion),
				Hint: "'hardway upgrade plan --to " + c.Inv.KubernetesVersion + "' checks the move, 'hardway upgrade apply' makes it host by host (a plain up would not drain the workers)"})
		}
	}
	apiservers := len(obs)
	if apiservers > 0 && len(c.Inv.Workers) > 0 {
		obs = append(obs, c.observeNodes(ctx)...)
	}
	for _, v := range skew.Running(obs) {
		fail(v.Host, v.Message, v.Fix)
	}
	if len(out) == 0 {
		out = append(out, verify.Result{Check: "versions", Status: verify.Pass, Message: fmt.Sprintf("%d apiservers on %s", apiservers, c.Inv.KubernetesVersion)})
	}
	return out
}
