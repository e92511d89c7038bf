package cluster

import (
	"fmt"
	"strings"
)

// workerFactsScript prints what a worker needs from its host: the cgroup
// version (the filesystem type of /sys/fs/cgroup), which tools exist, how
// many swap areas are on, and whether /etc/resolv.conf is systemd-resolved's
// stub (and the real list beside it).
const workerFactsScript = `echo "cgroupfs $(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo missing)"
for t in ip iptables iptables-restore iptables-save nft conntrack; do
  if command -v $t >/dev/null 2>&1; then echo "tool $t yes"; else echo "tool $t no"; fi
done
echo "swap $(tail -n +2 /proc/swaps 2>/dev/null | wc -l)"
if grep -qs '^nameserver 127\.0\.0\.53' /etc/resolv.conf; then
  if [ -s /run/systemd/resolve/resolv.conf ]; then echo "resolv stub upstream"; else echo "resolv stub"; fi
else echo "resolv ok"; fi
`

// workerTools says which tool each need requires, and which Debian package
// has it (for the hint).
var workerTools = []struct {
	tool, pkg, why string
	need           func(mode string, bridge bool) bool
	warnOnly       bool
}{
	{"ip", "iproute2", "the pod routes", func(string, bool) bool { return true }, false},
	{"iptables", "iptables", "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	{"iptables-restore", "iptables", "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	{"iptables-save", "iptables", "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	// hardway-pod-routes masquerades pods' egress with iptables on every
	// worker with the bridge CNI, whatever kube-proxy's mode.
	{"iptables", "iptables", "the pods' egress masquerade rule of network.cni: bridge", func(m string, bridge bool) bool { return m == "nftables" && bridge }, false},
	{"nft", "nftables", "kube-proxy in nftables mode", func(m string, _ bool) bool { return m == "nftables" }, false},
	{"conntrack", "conntrack", "inspecting and clearing Service connections when debugging kube-proxy", func(string, bool) bool { return true }, true},
}

// A worker's preflight (see hostFacts) runs workerFactsScript in the same
// command as the other facts and reads it with workerFactProblems. A cgroup
// v1 host is an error unless the inventory says it is a container host (the
// lab): the kubelet refuses cgroup v1 from 1.35 on, and the setting that
// makes it accept it (failCgroupV1: false) is a workaround for container
// hosts, never a default.

func (c *Cluster) k8sMinor() int {
	if c.Inv.K8s == nil {
		return 0
	}
	return c.Inv.K8s.Segments()[1]
}

// workerFactProblems turns workerFactsScript's output into problems (which
// stop up) and warnings.
func workerFactProblems(out string, containerHost bool, mode string, bridge bool, minor int) (problems, warnings []string) {
	have := map[string]bool{}
	fs, swaps, resolv := "", "0", []string{"ok"}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "cgroupfs":
			fs = f[1]
		case len(f) == 3 && f[0] == "tool":
			have[f[1]] = f[2] == "yes"
		case len(f) == 2 && f[0] == "swap":
			swaps = f[1]
		case len(f) >= 2 && f[0] == "resolv":
			resolv = f[1:]
		}
	}
	if swaps != "0" {
		// The kubelet exits at start with swap on (failSwapOn, its default).
		msg := fmt.Sprintf("swap is on (%s in /proc/swaps): the kubelet does not start with swap", swaps)
		if containerHost {
			warnings = append(warnings, msg+" (a container host's swap is its machine's)")
		} else {
			problems = append(problems, msg+" (hint: 'swapoff -a' now, and remove the swap entry from /etc/fstab, or mask the swap or zram unit, so that it stays off after a reboot)")
		}
	}
	if resolv[0] == "stub" {
		hint := "point /etc/resolv.conf at the resolver's real list: ln -sf /run/systemd/resolve/resolv.conf /etc/resolv.conf (systemd-resolved keeps working)"
		if len(resolv) < 2 {
			hint = "systemd-resolved writes no /run/systemd/resolve/resolv.conf here: give the host a resolv.conf that names its real DNS servers"
		}
		warnings = append(warnings, "/etc/resolv.conf names systemd-resolved's stub 127.0.0.53, which answers on the host alone: pods with dnsPolicy Default get a resolver they cannot reach, and the others the host's search list through it (hint: "+hint+")")
	}
	switch {
	case fs == "cgroup2fs":
	case containerHost:
		// The lab's hosts: their cgroups are the machine's, and the
		// rendered configs carry the container-host settings.
	case minor >= 35 || minor == 0:
		problems = append(problems, fmt.Sprintf("cgroup v1 (/sys/fs/cgroup is %s): the kubelet refuses it from Kubernetes 1.35 on (hint: boot the host with cgroup v2 — systemd.unified_cgroup_hierarchy=1 on the kernel command line, the default of current distributions; 'containerHost: true' is only for hosts that are containers, like the lab's)", fs))
	default:
		warnings = append(warnings, fmt.Sprintf("cgroup v1 (/sys/fs/cgroup is %s): supported by this Kubernetes minor, but in maintenance mode and refused from 1.35 on; move the host to cgroup v2", fs))
	}
	var missing []string
	pkgs := map[string]bool{}
	for _, t := range workerTools {
		if !t.need(mode, bridge) || have[t.tool] {
			continue
		}
		if t.warnOnly {
			warnings = append(warnings, fmt.Sprintf("%s not found (package %s): useful for %s", t.tool, t.pkg, t.why))
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (for %s)", t.tool, t.why))
		pkgs[t.pkg] = true
	}
	if len(missing) > 0 {
		var ps []string
		for _, t := range workerTools {
			if pkgs[t.pkg] {
				ps = append(ps, t.pkg)
				delete(pkgs, t.pkg)
			}
		}
		problems = append(problems, fmt.Sprintf("missing %s (hint: install the package(s) %s)", strings.Join(missing, ", "), strings.Join(ps, " ")))
	}
	return problems, warnings
}
