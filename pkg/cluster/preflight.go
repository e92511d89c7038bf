package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hardway/hardway/pkg/hostprobe"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

func parseLeaf(c tls.Certificate) (*x509.Certificate, error) {
	if len(c.Certificate) == 0 {
		return nil, errors.New("empty certificate")
	}
	return x509.ParseCertificate(c.Certificate[0])
}

// Limits of preflight.
const (
	maxClockSkew   = 2 * time.Second // TLS and leases break beyond this
	minFreeDiskKiB = 1 << 20         // 1 GiB: etcd and the binaries need room
	lowFreeDiskKiB = 5 << 20         // 5 GiB: warn
	fsyncWarn      = 10 * time.Millisecond
)

// portOwner is the process allowed to hold a port (as ss shows it: the
// kernel's comm, cut at 15 characters) and the component that needs it.
type portOwner struct{ comm, service string }

// ports are the ports each role's components listen on. They come from the
// component table, the one place a port is written: on a control-plane host
// 6443 is the apiserver's, on a worker the node-local load balancer's.
var ports = func() map[units.Role]map[int]portOwner {
	m := map[units.Role]map[int]portOwner{units.ControlPlane: {}, units.Worker: {}}
	for _, c := range units.Components() {
		if m[c.Role] == nil {
			continue
		}
		for _, p := range c.Ports {
			m[c.Role][p.Number] = portOwner{c.Process, c.Name}
		}
	}
	return m
}()

// portsFor is the port table of a host: a worker's without the load
// balancer's ports when the inventory has no node-local load balancer.
func (c *Cluster) portsFor(worker bool) map[int]portOwner {
	if !worker {
		return ports[units.ControlPlane]
	}
	lb := units.MustLookup(units.APIServerLB)
	out := map[int]portOwner{}
	for n, o := range ports[units.Worker] {
		if o.service == lb.Name && !c.Inv.NodeLocalLB() {
			continue
		}
		out[n] = o
	}
	return out
}

// HostFacts is what preflight learned about a host.
type HostFacts struct {
	Host     string
	Arch     string
	Skew     time.Duration
	FreeKiB  int64
	FsyncP99 time.Duration
	// FsyncSkipped: etcd runs on the host, so the disk was not probed.
	FsyncSkipped bool
	Problems     []string // failures
	Warnings     []string
	PortOwners   map[int]string
}

func (c *Cluster) planPreflight(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	hosts := c.Inv.Hosts()
	facts := make([]HostFacts, len(hosts))
	var mu sync.Mutex
	var dialErrs []error
	err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		i := indexOf(hosts, h.Name)
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			mu.Lock()
			dialErrs = append(dialErrs, err)
			mu.Unlock()
			return nil
		}
		f, err := c.hostFacts(ctx, sh)
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		facts[i] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(dialErrs) > 0 {
		// Host-key and auth failures carry their own hints: show the first
		// whole, name the rest.
		return nil, dialErrs[0]
	}
	var problems []string
	for _, f := range facts {
		for _, w := range f.Warnings {
			c.planf(ctx, "[preflight] %s: warning: %s", f.Host, w)
		}
		for _, p := range f.Problems {
			problems = append(problems, f.Host+": "+p)
		}
		if len(f.Problems) == 0 {
			fsync := "fsync p99 " + f.FsyncP99.Round(100*time.Microsecond).String()
			if f.FsyncSkipped {
				fsync = "fsync not probed: etcd runs"
			}
			c.planf(ctx, "[preflight] %s: ok (%s, clock skew %s, %d GiB free, %s)", f.Host, f.Arch,
				f.Skew.Round(time.Millisecond), f.FreeKiB>>20, fsync)
		}
	}
	if len(problems) > 0 {
		return nil, usererr.New(fmt.Errorf("preflight failed:\n  %s", strings.Join(problems, "\n  ")),
			"fix the hosts above and run 'hardway up' again")
	}
	return nil, nil
}

func indexOf(hs []inventory.Host, name string) int {
	for i, h := range hs {
		if h.Name == name {
			return i
		}
	}
	return -1
}

// factsScript prints one fact per line; every command is POSIX sh and
// coreutils/iproute2, which any systemd host has.
const factsScript = `date +%s%N
uname -s
uname -m
if [ -d /run/systemd/system ]; then echo systemd; else echo no-systemd; fi
df -Pk /var/lib | awk 'NR==2 {print $4}'
ss -Hltnp 2>/dev/null | awk '{print "port", $4, $6}'
`

// systemdVersionScript prints the host's systemd version ("systemd 252
// (252.39-1~deb12u2)" -> "systemd-version 252").
const systemdVersionScript = "echo \"systemd-version $(systemctl --version 2>/dev/null | awk 'NR==1 {print $2}')\"\n"

// minSystemdEtcd is the oldest systemd that runs hardway's etcd.service: it
// hands etcd its keys with LoadCredential= (systemd 247); an older one
// ignores the line with a warning, and etcd then fails on a missing
// /run/credentials/etcd.service/server.crt. 'init --hosts' warns with the
// same number.
const minSystemdEtcd = hostprobe.MinSystemdLoadCredential

// systemdVersionProblem says what is wrong with the systemd-version line of
// a control-plane host's facts; "": nothing (or no such line: a fake host).
func systemdVersionProblem(out string) string {
	for _, l := range strings.Split(out, "\n") {
		v, ok := strings.CutPrefix(l, "systemd-version ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
			return fmt.Sprintf("cannot tell the systemd version (%q): etcd.service needs systemd %d or later (LoadCredential=)", v, minSystemdEtcd)
		case n < minSystemdEtcd:
			return fmt.Sprintf("systemd %d: etcd.service needs %d or later, for LoadCredential= (hint: Debian 11, Ubuntu 22.04, Fedora 34 and later have it)", n, minSystemdEtcd)
		}
		return ""
	}
	return ""
}

// fsyncScript times 50 single small writes with fdatasync (dd oflag=dsync),
// then 10 without, so the cost of starting dd can be subtracted. etcd's WAL
// does exactly such small synchronous appends.
const fsyncScript = `d=/var/lib/etcd; [ -d "$d" ] || d=/var/lib
f="$d/.hardway-fsync-probe"
for i in $(seq 1 50); do s=$(date +%s%N); dd if=/dev/zero of="$f" bs=2300 count=1 oflag=dsync conv=notrunc 2>/dev/null; e=$(date +%s%N); echo "s $((e-s))"; done
for i in $(seq 1 10); do s=$(date +%s%N); dd if=/dev/zero of="$f" bs=2300 count=1 conv=notrunc 2>/dev/null; e=$(date +%s%N); echo "b $((e-s))"; done
rm -f "$f"
`

// archProblem says what is wrong when host's `uname -m` is not the
// architecture the inventory gives it (its own arch:, else the top-level
// one), with the fix: the binaries pushed are those of that architecture.
func (c *Cluster) archProblem(host, uname string) string {
	want := c.Inv.Arch
	own := false
	for _, h := range c.Inv.Hosts() {
		if h.Name == host {
			want, own = c.Inv.HostArch(h), h.Arch != ""
		}
	}
	got, known := platform.FromUname(uname)
	switch {
	case !known:
		return fmt.Sprintf("architecture %s, which hardway has no release binaries for (it installs %s)",
			uname, strings.Join(platform.Names(), " and "))
	case got.Name == want:
		return ""
	}
	says := "the inventory's arch: " + want
	if own {
		says = "its arch: " + want + " in the inventory"
	}
	return fmt.Sprintf("architecture %s (%s), but %s: the %s binaries would not run there; set arch: %s on this host in the inventory (or arch: %s at the top level, if every host is %s)",
		uname, got.Name, says, want, got.Name, got.Name, got.Name)
}

func (c *Cluster) hostFacts(ctx context.Context, sh remote.Host) (HostFacts, error) {
	f := HostFacts{Host: sh.Name(), PortOwners: map[int]string{}}
	worker := indexOf(c.Inv.Workers, sh.Name()) >= 0
	script := factsScript
	if !worker {
		// The probe's lines ("s N", "b N") follow the facts; the port
		// parser skips them. A running etcd is not probed: its disk is
		// busy with etcd's own fsyncs, which the probe would slow down and
		// be slowed by, and the member's fsync latency is in its metrics
		// (etcd_disk_wal_fsync_duration_seconds).
		script += "if systemctl is-active --quiet etcd.service; then echo 'fsync skipped'; else\n" + fsyncScript + "fi\n"
		script += systemdVersionScript
	}
	if worker {
		// The runtime's needs, in the same command: one round trip per host.
		script += workerFactsScript()
	}
	script += c.fetchToolsScript()
	// The clock again at the end: the time the script took on the host is
	// not part of the round trip the skew estimate halves.
	script += "echo \"end $(date +%s%N)\"\n"
	t0 := time.Now()
	out, err := sh.Run(ctx, script, nil)
	t1 := time.Now()
	if err != nil {
		return f, err
	}
	all := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(all) < 5 {
		return f, fmt.Errorf("unexpected preflight output: %q", out)
	}
	// The clock is read first: the round trip's midpoint is then closest to
	// when the host read it.
	clock, lines := all[0], all[1:]
	if lines[0] != "Linux" {
		f.Problems = append(f.Problems, "not Linux: "+lines[0])
	}
	if p := c.archProblem(sh.Name(), lines[1]); p != "" {
		f.Problems = append(f.Problems, p)
	}
	if a, ok := platform.FromUname(lines[1]); ok {
		f.Arch = a.Name
	}
	if lines[2] != "systemd" {
		f.Problems = append(f.Problems, "systemd is not running as init (hardway installs systemd services)")
	}
	if f.FreeKiB, err = strconv.ParseInt(lines[3], 10, 64); err == nil {
		switch {
		case f.FreeKiB < minFreeDiskKiB:
			f.Problems = append(f.Problems, fmt.Sprintf("only %d MiB free on /var/lib", f.FreeKiB>>10))
		case f.FreeKiB < lowFreeDiskKiB:
			f.Warnings = append(f.Warnings, fmt.Sprintf("only %d MiB free on /var/lib; etcd stops writing (NOSPACE) when it is full", f.FreeKiB>>10))
		}
	}
	table := c.portsFor(worker)
	for _, l := range lines[4:] {
		fs := strings.Fields(l)
		if len(fs) < 2 || fs[0] != "port" {
			continue
		}
		i := strings.LastIndex(fs[1], ":")
		port, _ := strconv.Atoi(fs[1][i+1:])
		want, ours := table[port]
		if !ours {
			continue
		}
		owner := ""
		if len(fs) > 2 {
			owner = fs[2]
		}
		if !strings.Contains(owner, `(("`+want.comm+`"`) {
			f.Problems = append(f.Problems, fmt.Sprintf("port %d is taken by %s (hardway needs it for %s)", port, owner, want.service))
		}
	}
	if ns, err := strconv.ParseInt(clock, 10, 64); err == nil {
		rtt := t1.Sub(t0)
		if e, err := strconv.ParseInt(strings.TrimPrefix(all[len(all)-1], "end "), 10, 64); err == nil && e >= ns {
			rtt = max(rtt-time.Duration(e-ns), 0)
		}
		mid := t0.Add(rtt / 2)
		f.Skew = time.Unix(0, ns).Sub(mid)
		if abs(f.Skew) > maxClockSkew+rtt/2 {
			f.Problems = append(f.Problems, fmt.Sprintf("clock is %s off this machine's; TLS and leader leases break beyond %s (run chrony or systemd-timesyncd)", f.Skew.Round(time.Millisecond), maxClockSkew))
		}
	}
	f.Problems = append(f.Problems, c.fetchToolProblems(string(out))...)
	if i := indexOf(c.Inv.Workers, sh.Name()); worker {
		// A worker runs no etcd: its checks are the runtime's needs.
		p, w := workerFactProblems(string(out), c.workerNeeds(c.Inv.Workers[i]))
		f.Problems, f.Warnings = append(f.Problems, p...), append(f.Warnings, w...)
		return f, nil
	}
	if p := systemdVersionProblem(string(out)); p != "" {
		f.Problems = append(f.Problems, p)
	}
	f.FsyncP99 = fsyncP99(string(out))
	f.FsyncSkipped = strings.Contains(string(out), "\nfsync skipped\n")
	if f.FsyncP99 > fsyncWarn {
		f.Warnings = append(f.Warnings, fmt.Sprintf("fsync p99 %s on the etcd disk (etcd wants < 10ms): expect 'leaderelection lost' in kube-controller-manager and 'context deadline exceeded' from etcd; use an SSD", f.FsyncP99.Round(100*time.Microsecond)))
	}
	return f, nil
}

// fsyncP99 is the 99th percentile of the synced writes minus the median of
// the unsynced ones (the cost of forking dd and reading the clock).
func fsyncP99(out string) time.Duration {
	var synced, base []int64
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			continue
		}
		switch k {
		case "s":
			synced = append(synced, n)
		case "b":
			base = append(base, n)
		}
	}
	if len(synced) == 0 {
		return 0
	}
	sort.Slice(synced, func(i, j int) bool { return synced[i] < synced[j] })
	sort.Slice(base, func(i, j int) bool { return base[i] < base[j] })
	// Nearest rank: with 50 samples the 99th percentile is the slowest.
	p99 := synced[(len(synced)*99+99)/100-1]
	var med int64
	if len(base) > 0 {
		med = base[len(base)/2]
	}
	return time.Duration(max(p99-med, 0))
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
