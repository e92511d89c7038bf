package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hardway/hardway/pkg/hostos"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// StepHost prepares the hosts' own setup: what a distribution leaves out
// and every tutorial does by hand before the first component starts.
const StepHost = "host"

func (c *Cluster) hostStep() plan.Step {
	return plan.Step{Name: StepHost,
		Doc:  "the host's own setup, only where it differs: kernel modules and sysctls now (their boot files are pushed), the packages the components need (hostPrep.packages: install), firewall ports (hostPrep.firewall: open), the kubelet's resolv.conf (systemd-resolved's real list, not its stub)",
		Plan: c.planHost}
}

// hostPrepFacts is what the host step reads on a host, in one command.
type hostPrepFacts struct {
	OS       hostos.OSRelease
	Modules  map[string]bool   // loaded (or built in)
	Sysctls  map[string]string // current value; "missing" when the key does not exist
	Tools    map[string]bool
	Firewall hostos.Firewall
	Resolv   string // "stub-upstream", "stub" or "ok" (see workerFactsScript)
	Link     string // where the kubelet's resolv.conf link points ("" none)
	TimeSync int    // active time sync services (systemd-timesyncd, chrony, ntpd); -1 unknown
	// Container is what systemd-detect-virt --container says ("none" on
	// a machine of its own): a container's clock is its machine's.
	Container string
}

// hostPrepScript prints the facts of hostPrepFacts, one per line.
func (c *Cluster) hostPrepScript(h inventory.Host) string {
	var b strings.Builder
	b.WriteString("echo @os; cat /etc/os-release 2>/dev/null; echo @facts\n")
	b.WriteString("echo \"timesync $(systemctl is-active " + strings.Join(timeSyncUnits, " ") + " 2>/dev/null | grep -c '^active$')\"\n")
	b.WriteString("echo \"container $(systemd-detect-virt --container 2>/dev/null || echo none)\"\n")
	if c.isWorker(h.Name) {
		var mods, keys []string
		for _, s := range units.NodeModules() {
			mods = append(mods, s.Key)
		}
		for _, s := range units.NodeSysctls(c.Inv, h) {
			keys = append(keys, s.Key)
		}
		for _, m := range mods {
			probe := "[ -d /sys/module/" + m + " ]"
			if p, ok := moduleProbes[m]; ok {
				probe += " || " + p
			}
			fmt.Fprintf(&b, "if %s; then echo 'module %s yes'; else echo 'module %s no'; fi\n", probe, m, m)
		}
		fmt.Fprintf(&b, "for k in %s; do f=/proc/sys/$(echo $k | tr . /); if [ -r $f ]; then echo \"sysctl $k $(cat $f)\"; else echo \"sysctl $k missing\"; fi; done\n", strings.Join(keys, " "))
		fmt.Fprintf(&b, "for t in %s; do if command -v $t >/dev/null 2>&1; then echo \"tool $t yes\"; else echo \"tool $t no\"; fi; done\n", workerToolWords())
		b.WriteString(`if grep -qs '^nameserver 127\.0\.0\.53' /etc/resolv.conf; then
  if [ -s /run/systemd/resolve/resolv.conf ]; then echo "resolv stub-upstream"; else echo "resolv stub"; fi
else echo "resolv ok"; fi
echo "link $(readlink ` + units.KubeletResolvConf + ` 2>/dev/null)"
`)
	}
	// ufw status needs root, as every command here; firewall-cmd answers
	// only while firewalld runs.
	// ufw is asked only when its config says it is on: the command is a
	// Python program, a third of a second on a small host, and up's no-op
	// run reads every host.
	b.WriteString(`if grep -qs '^ENABLED=yes' /etc/ufw/ufw.conf && command -v ufw >/dev/null 2>&1; then ufw status verbose 2>/dev/null | sed 's/^/ufw /'; fi
if command -v firewall-cmd >/dev/null 2>&1 && firewall-cmd --state >/dev/null 2>&1; then
  echo "firewalld ports $(firewall-cmd --list-ports)"
  for s in $(firewall-cmd --list-services); do echo "firewalld service $s $(firewall-cmd --permanent --service=$s --get-ports 2>/dev/null)"; done
  echo "firewalld trusted $(firewall-cmd --zone=trusted --list-sources)"
fi
`)
	return b.String()
}

// moduleProbes tell a module that is there by what it provides: a module
// built into the kernel has no /sys/module entry unless it has parameters,
// and a container (the lab's hosts) sees no /sys/module at all.
var moduleProbes = map[string]string{
	"overlay":      "grep -qw overlay /proc/filesystems",
	"br_netfilter": "[ -d /proc/sys/net/bridge ]",
}

// timeSyncUnits are the services that keep a clock in step; one active is
// enough (preflight measures the skew itself).
var timeSyncUnits = []string{"systemd-timesyncd", "chrony", "chronyd", "ntp", "ntpd", "ntpsec", "openntpd"}

func parseHostPrepFacts(out string) hostPrepFacts {
	f := hostPrepFacts{Modules: map[string]bool{}, Sysctls: map[string]string{}, Tools: map[string]bool{}, Resolv: "ok", TimeSync: -1}
	osPart, rest, _ := strings.Cut(out, "@facts\n")
	f.OS = hostos.ParseOSRelease(strings.TrimPrefix(osPart, "@os\n"))
	var ufw, firewalld strings.Builder
	for _, l := range strings.Split(rest, "\n") {
		fs := strings.Fields(l)
		switch {
		case len(fs) == 0:
		case fs[0] == "ufw":
			ufw.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "ufw"), " ") + "\n")
		case fs[0] == "firewalld" && len(fs) >= 2:
			firewalld.WriteString(strings.TrimPrefix(l, "firewalld ") + "\n")
		case fs[0] == "module" && len(fs) == 3:
			f.Modules[fs[1]] = fs[2] == "yes"
		case fs[0] == "sysctl" && len(fs) == 3:
			f.Sysctls[fs[1]] = fs[2]
		case fs[0] == "tool" && len(fs) == 3:
			f.Tools[fs[1]] = fs[2] == "yes"
		case fs[0] == "container" && len(fs) == 2:
			f.Container = fs[1]
		case fs[0] == "timesync" && len(fs) == 2:
			fmt.Sscan(fs[1], &f.TimeSync)
		case fs[0] == "resolv" && len(fs) == 2:
			f.Resolv = fs[1]
		case fs[0] == "link":
			if len(fs) > 1 {
				f.Link = fs[1]
			}
		}
	}
	f.Firewall = hostos.ParseUfw(ufw.String())
	if firewalld.Len() > 0 {
		f.Firewall = hostos.ParseFirewalld(firewalld.String())
	}
	return f
}

// hostPrepChange is one thing the host step changes on a host, or, when
// Cmd is empty, cannot change (a problem the user fixes).
type hostPrepChange struct {
	Desc string
	Cmd  string // shell, as root
	Fix  string // for a problem: what the user does
}

// neededPorts are the ports of a host's components that other hosts reach
// (every port not bound to loopback), from the component table.
func (c *Cluster) neededPorts(worker bool) []hostos.Port {
	var out []hostos.Port
	seen := map[int]bool{}
	for _, comp := range units.Components() {
		if (comp.Role == units.Worker) != worker || (comp.Role != units.Worker && comp.Role != units.ControlPlane) {
			continue
		}
		if comp.Name == units.APIServerLB && !c.Inv.NodeLocalLB() {
			continue
		}
		for _, p := range comp.Ports {
			if p.Loopback || seen[p.Number] {
				continue
			}
			seen[p.Number] = true
			out = append(out, hostos.Port{Number: p.Number, Proto: "tcp", Why: comp.Name + " " + p.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// hostPrepChanges compares a host's facts with what it needs.
func (c *Cluster) hostPrepChanges(h inventory.Host, f hostPrepFacts) (changes, problems []hostPrepChange, warnings []string) {
	distro, warn := hostos.Identify(f.OS)
	if warn != "" {
		warnings = append(warnings, warn)
	}
	if f.TimeSync == 0 && !h.ContainerHost && (f.Container == "none" || f.Container == "") {
		// A container's clock is its machine's.
		warnings = append(warnings, "no time sync service is active ("+strings.Join(timeSyncUnits[:3], ", ")+"): the hosts' clocks drift apart, and certificates and leader leases break beyond 2 s (hint: "+
			hostos.InstallHint(distro.Family, []string{"systemd-timesyncd"})+" && systemctl enable --now systemd-timesyncd, or chrony)")
	}
	worker := c.isWorker(h.Name)
	if worker {
		var load []string
		for _, m := range units.NodeModules() {
			if f.Modules[m.Key] {
				continue
			}
			if h.ContainerHost {
				problems = append(problems, hostPrepChange{Desc: "kernel module " + m.Key + " is not loaded (" + m.Reason + ")",
					Fix: "a container host shares its machine's kernel: modprobe " + m.Key + " on the machine"})
				continue
			}
			load = append(load, m.Key)
		}
		for _, m := range load {
			changes = append(changes, hostPrepChange{Desc: "load kernel module " + m + " (and at boot: " + units.ModulesLoadConf + ")", Cmd: "modprobe " + m})
		}
		for _, s := range units.NodeSysctls(c.Inv, h) {
			want := fmt.Sprint(s.Value)
			have := f.Sysctls[s.Key]
			if have == want {
				continue
			}
			changes = append(changes, hostPrepChange{Desc: fmt.Sprintf("set %s = %s, now %s (and at boot: %s)", s.Key, want, have, units.SysctlConf),
				Cmd: fmt.Sprintf("sysctl -qw %s=%s", s.Key, want)})
		}
		if c.Inv.HostPrep.Packages == inventory.HostPrepInstall && distro.Family != hostos.Unknown {
			var pkgs []string
			for _, t := range workerTools {
				if !t.need(c.proxyMode(), c.cniBridge()) || f.Tools[t.pkg.Tool] {
					continue
				}
				if n := t.pkg.Name(distro.Family); n != "" && !slices.Contains(pkgs, n) {
					pkgs = append(pkgs, n)
				}
			}
			if len(pkgs) > 0 {
				changes = append(changes, hostPrepChange{Desc: "install " + strings.Join(pkgs, " ") + " (" + string(distro.Family) + ")", Cmd: hostos.InstallCommand(distro.Family, pkgs)})
			}
		}
		target := "/etc/resolv.conf"
		switch f.Resolv {
		case "stub-upstream":
			target = "/run/systemd/resolve/resolv.conf"
		case "stub":
			problems = append(problems, hostPrepChange{Desc: "/etc/resolv.conf is systemd-resolved's stub 127.0.0.53 and /run/systemd/resolve/resolv.conf is empty: pods would get no DNS server they can reach",
				Fix: "give the host a resolv.conf that names its real DNS servers"})
		}
		if f.Link != target {
			changes = append(changes, hostPrepChange{Desc: "link " + units.KubeletResolvConf + " to " + target + " (the kubelet's resolvConf)",
				Cmd: fmt.Sprintf("install -d -m 0700 %s && ln -sfn %s %s", units.KubeletDir, target, units.KubeletResolvConf)})
		}
	}
	if f.Firewall.Active() {
		closed := f.Firewall.Closed(c.neededPorts(worker))
		pods := netip.Prefix{}
		if worker && c.cniBridge() && f.Firewall.PodsBlocked(c.Inv.Network.PodNet()) {
			pods = c.Inv.Network.PodNet()
		}
		if cmds := f.Firewall.OpenCommands(closed, pods); len(cmds) > 0 {
			var what []string
			for _, p := range closed {
				what = append(what, p.String()+" ("+p.Why+")")
			}
			if pods.IsValid() {
				what = append(what, "forwarded pod traffic "+pods.String())
			}
			desc := f.Firewall.Kind + " closes " + strings.Join(what, ", ")
			if c.Inv.HostPrep.Firewall == inventory.HostPrepOpen {
				changes = append(changes, hostPrepChange{Desc: "open in " + f.Firewall.Kind + ": " + strings.Join(what, ", "), Cmd: strings.Join(cmds, " && ")})
			} else {
				problems = append(problems, hostPrepChange{Desc: desc, Fix: strings.Join(cmds, "; ") + ", or set hostPrep.firewall: open"})
			}
		}
	}
	return changes, problems, warnings
}

func (c *Cluster) planHost(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	hosts := c.Inv.Hosts()
	per := make([][]plan.Action, len(hosts))
	var mu sync.Mutex
	var problems []string
	err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		out, err := sh.Run(ctx, c.hostPrepScript(h), nil)
		if err != nil {
			return fmt.Errorf("%s: read the host's setup: %w", h.Name, err)
		}
		changes, probs, warns := c.hostPrepChanges(h, parseHostPrepFacts(string(out)))
		for _, w := range warns {
			c.planf(ctx, "[%s] %s: warning: %s", StepHost, h.Name, w)
		}
		mu.Lock()
		for _, p := range probs {
			problems = append(problems, fmt.Sprintf("%s: %s (hint: %s)", h.Name, p.Desc, p.Fix))
		}
		mu.Unlock()
		var as []plan.Action
		for _, ch := range changes {
			cmd := ch.Cmd
			as = append(as, plan.Action{Host: h.Name, Kind: plan.Prepare, Desc: ch.Desc, Diff: "$ " + cmd, Parallel: true,
				Do: func(ctx context.Context) error {
					if out, err := sh.Run(ctx, cmd, nil); err != nil {
						return fmt.Errorf("%s: %w\n%s", cmd, err, strings.TrimSpace(string(out)))
					}
					return nil
				}})
		}
		per[indexOf(hosts, h.Name)] = as
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, usererr.New(fmt.Errorf("hosts not ready:\n  %s", strings.Join(problems, "\n  ")), "fix the hosts above and run 'hardway up' again")
	}
	var out []plan.Action
	for _, as := range per {
		out = append(out, as...)
	}
	return out, nil
}

// CheckHostPrep is the verify check of the hosts' own setup.
const CheckHostPrep = "host/prep"

// checkHostPrep proves what the host step sets: each change it would make
// is a failure (up makes it), each problem one with its fix, each
// distribution warning a warning.
func (c *Cluster) checkHostPrep(ctx context.Context) []verify.Result {
	hosts := c.Inv.Hosts()
	per := make([][]verify.Result, len(hosts))
	_ = remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		i := indexOf(hosts, h.Name)
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			per[i] = []verify.Result{verify.Failf(h.Name, hintOf(err, "check the address, the SSH key and known_hosts"), "%v", err)}
			return nil
		}
		out, err := sh.Run(ctx, c.hostPrepScript(h), nil)
		if err != nil {
			per[i] = []verify.Result{verify.Failf(h.Name, timeoutHint(err), "read the host's setup: %v", err)}
			return nil
		}
		f := parseHostPrepFacts(string(out))
		changes, problems, warnings := c.hostPrepChanges(h, f)
		var rs []verify.Result
		for _, ch := range changes {
			rs = append(rs, verify.Failf(h.Name, "hardway up --only "+StepHost+" (it runs: "+ch.Cmd+")", "%s", ch.Desc))
		}
		for _, p := range problems {
			rs = append(rs, verify.Failf(h.Name, p.Fix, "%s", p.Desc))
		}
		for _, w := range warnings {
			rs = append(rs, verify.Warnf(h.Name, "", "%s", w))
		}
		if len(changes)+len(problems) == 0 {
			d, _ := hostos.Identify(f.OS)
			fw := "no firewall"
			if f.Firewall.Active() {
				fw = f.Firewall.Kind + " lets the components' ports in"
			}
			what := "modules, sysctls, packages, resolv.conf link"
			if !c.isWorker(h.Name) {
				what = "nothing of a worker's"
			}
			rs = append(rs, verify.OKf(h.Name, "%s %s: %s as needed; %s", d.Name, f.OS.VersionID, what, fw))
		}
		for j := range rs {
			rs[j].Check = CheckHostPrep
		}
		per[i] = rs
		return nil
	})
	var out []verify.Result
	for _, rs := range per {
		out = append(out, rs...)
	}
	return out
}
