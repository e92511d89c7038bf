package cluster

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/hostos"
	"github.com/hardway/hardway/pkg/inventory"
)

// workerFactsScript prints what a worker needs from its host: the cgroup
// version (the filesystem type of /sys/fs/cgroup), which tools exist, how
// many swap areas are on, and the distribution (for the package names in a
// hint). The kubelet's resolv.conf is the host step's (hostprep.go).
func workerFactsScript() string {
	return `echo "cgroupfs $(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo missing)"
for t in ` + workerToolWords() + `; do
  if command -v $t >/dev/null 2>&1; then echo "tool $t yes"; else echo "tool $t no"; fi
done
echo "swap $(tail -n +2 /proc/swaps 2>/dev/null | wc -l)"
sed 's/^/osr /' /etc/os-release 2>/dev/null
`
}

// workerToolWords are workerTools' commands for a shell loop, each once and
// quoted (a tool's name, modprobe, is not a command the loop runs).
func workerToolWords() string {
	var tools []string
	for _, t := range workerTools {
		if w := "'" + t.pkg.Tool + "'"; !slices.Contains(tools, w) {
			tools = append(tools, w)
		}
	}
	return strings.Join(tools, " ")
}

// workerTools says which tool each need requires (hostos has the package
// that holds it in each distribution family).
var workerTools = []struct {
	pkg      hostos.Package
	why      string
	need     func(mode string, bridge bool) bool
	warnOnly bool // useful, not required: installed with hostPrep.packages: install, else a warning
}{
	{hostos.PkgIP, "the pod routes", func(string, bool) bool { return true }, false},
	{hostos.PkgModprobe, "loading the kernel modules containerd and kube-proxy need", func(string, bool) bool { return true }, false},
	{hostos.PkgIptables, "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	{hostos.PkgIptablesRestore, "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	{hostos.PkgIptablesSave, "kube-proxy in iptables mode", func(m string, _ bool) bool { return m != "nftables" }, false},
	// hardway-pod-routes masquerades pods' egress with iptables on every
	// worker with the bridge CNI, whatever kube-proxy's mode.
	{hostos.PkgIptables, "the pods' egress masquerade rule of network.cni: bridge", func(m string, bridge bool) bool { return m == "nftables" && bridge }, false},
	{hostos.PkgNft, "kube-proxy in nftables mode", func(m string, _ bool) bool { return m == "nftables" }, false},
	{hostos.PkgConntrack, "inspecting and clearing Service connections when debugging kube-proxy", func(string, bool) bool { return true }, true},
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

// workerNeeds is what a worker's preflight judges its facts by.
type workerNeeds struct {
	containerHost bool
	mode          string // kube-proxy's
	bridge        bool   // network.cni: bridge
	minor         int    // Kubernetes minor; 0 unknown
	install       bool   // hostPrep.packages: install
	swap          string // hostPrep.swap
}

func (c *Cluster) workerNeeds(h inventory.Host) workerNeeds {
	return workerNeeds{containerHost: containerHost(h), mode: c.proxyMode(), bridge: c.cniBridge(), minor: c.k8sMinor(),
		install: c.Inv.HostPrep.Packages == inventory.HostPrepInstall, swap: c.Inv.HostPrep.Swap}
}

// workerFactProblems turns workerFactsScript's output into problems (which
// stop up) and warnings.
func workerFactProblems(out string, n workerNeeds) (problems, warnings []string) {
	have := map[string]bool{}
	fs, swaps := "", "0"
	var osr strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(l, "osr "); ok {
			osr.WriteString(r + "\n")
			continue
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "cgroupfs":
			fs = f[1]
		case len(f) == 3 && f[0] == "tool":
			have[f[1]] = f[2] == "yes"
		case len(f) == 2 && f[0] == "swap":
			swaps = f[1]
		}
	}
	distro, _ := hostos.Identify(hostos.ParseOSRelease(osr.String()))
	if swaps != "0" && n.swap != inventory.SwapLimited {
		// The kubelet exits at start with swap on (failSwapOn, its default).
		msg := fmt.Sprintf("swap is on (%s in /proc/swaps): the kubelet does not start with swap", swaps)
		if n.containerHost {
			warnings = append(warnings, msg+" (a container host's swap is its machine's)")
		} else {
			problems = append(problems, msg+" (hint: 'swapoff -a' now, and remove the swap entry from /etc/fstab, or mask the swap or zram unit, so that it stays off after a reboot; or let the kubelet use it: hostPrep.swap: limited)")
		}
	}
	switch {
	case fs == "cgroup2fs":
	case n.containerHost:
		// The lab's hosts: their cgroups are the machine's, and the
		// rendered configs carry the container-host settings.
	case n.minor >= 35 || n.minor == 0:
		problems = append(problems, fmt.Sprintf("cgroup v1 (/sys/fs/cgroup is %s): the kubelet refuses it from Kubernetes 1.35 on (hint: boot the host with cgroup v2 — systemd.unified_cgroup_hierarchy=1 on the kernel command line, the default of current distributions; 'containerHost: true' is only for hosts that are containers, like the lab's)", fs))
	case n.swap == inventory.SwapLimited:
		problems = append(problems, fmt.Sprintf("cgroup v1 (/sys/fs/cgroup is %s): the kubelet's LimitedSwap (hostPrep.swap: limited) needs cgroup v2 (hint: boot with systemd.unified_cgroup_hierarchy=1, or set hostPrep.swap: fail and turn swap off)", fs))
	default:
		warnings = append(warnings, fmt.Sprintf("cgroup v1 (/sys/fs/cgroup is %s): supported by this Kubernetes minor, but in maintenance mode and refused from 1.35 on (hint: boot with systemd.unified_cgroup_hierarchy=1)", fs))
	}
	// With hostPrep.packages: install the host step installs what is
	// missing, where it knows the package manager.
	installs := n.install && distro.Family != hostos.Unknown
	var missing, pkgs []string
	for _, t := range workerTools {
		if !t.need(n.mode, n.bridge) || have[t.pkg.Tool] {
			continue
		}
		name := t.pkg.Name(distro.Family)
		if name == "" {
			name = t.pkg.Apt + " (Debian's name)"
		}
		if t.warnOnly {
			if !installs {
				warnings = append(warnings, fmt.Sprintf("%s not found (package %s): useful for %s", t.pkg.Tool, name, t.why))
			}
			continue
		}
		if installs {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (for %s)", t.pkg.Tool, t.why))
		if !strings.Contains(" "+strings.Join(pkgs, " ")+" ", " "+name+" ") {
			pkgs = append(pkgs, name)
		}
	}
	if len(missing) > 0 {
		hint := hostos.InstallHint(distro.Family, pkgs)
		if distro.Family != hostos.Unknown {
			hint += ", or let up install them: hostPrep.packages: install"
		}
		problems = append(problems, fmt.Sprintf("missing %s (hint: %s)", strings.Join(missing, ", "), hint))
	}
	return problems, warnings
}
