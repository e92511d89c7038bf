// Package hostprobe reads what a host is before there is an inventory for
// it: its name, the address it was reached at, its networks, architecture,
// distribution, whether it is a container, its size and its systemd.
//
// Everything is read with one command (Script) that only reads: 'hardway
// init --hosts' runs it on hosts it must not change. Parse is pure, so the
// parsing is tested on recorded output; Probe and ProbeAll are the I/O.
package hostprobe

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hardway/hardway/pkg/hostos"
	"github.com/hardway/hardway/pkg/remote"
)

// Script prints one section per fact, each after an "@name" line. It is
// POSIX sh and reads only; it needs no root (it runs as the SSH user,
// without sudo), and a missing tool leaves its section empty instead of
// failing the whole probe.
const Script = `echo @hostname; hostname 2>/dev/null || cat /proc/sys/kernel/hostname
echo @ssh-connection; echo "$SSH_CONNECTION"
echo @addr; ip -o -4 addr show 2>/dev/null
echo @route; ip -o -4 route show 2>/dev/null
echo @machine; uname -m
echo @os-release; cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null
echo @container; systemd-detect-virt --container 2>/dev/null
echo @nproc; nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null
echo @meminfo; grep '^MemTotal:' /proc/meminfo 2>/dev/null
echo @systemd; systemctl --version 2>/dev/null | head -n 1
echo @end
`

// Facts is what Script found on one host.
type Facts struct {
	// Hostname is the short host name (up to the first dot).
	Hostname string `json:"hostname"`
	// ReachedAt is the address the host's sshd accepted the connection on
	// ($SSH_CONNECTION): the host's own view of the address, an IP even
	// when it was reached by a DNS name.
	ReachedAt string `json:"reachedAt,omitempty"`
	// Addresses are the host's IPv4 addresses with their networks.
	Addresses []Address `json:"addresses"`
	// Routes are the destinations of its IPv4 routes but the default one
	// (which is every address).
	Routes []Route `json:"routes"`
	// Machine is uname -m; Arch its name in Go and Kubernetes' downloads
	// ("" for an architecture hardway has no binaries for).
	Machine string    `json:"machine"`
	Arch    string    `json:"arch,omitempty"`
	OS      OSRelease `json:"os"`
	// Container is systemd-detect-virt --container's answer
	// ("systemd-nspawn", "docker", "lxc"...); "" on a machine of its own.
	Container string `json:"container,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`
	MemoryKiB int64  `json:"memoryKiB,omitempty"`
	// Systemd is systemctl's major version; 0 when there is none.
	Systemd int `json:"systemdVersion,omitempty"`
}

// Address is one IPv4 address of a host.
type Address struct {
	Interface string       `json:"interface"`
	Prefix    netip.Prefix `json:"prefix"` // the address with its network's length: 10.0.0.11/24
}

// Route is one IPv4 route of a host, as ip prints it.
type Route struct {
	Dest netip.Prefix `json:"dest"`
	// Bare: a route with no gateway (via) and no source address (src),
	// so not a network's: it puts traffic for Dest on a link as it is.
	// The lab's workers route the Services' range so ("10.32.0.0/24 dev
	// eth0"): traffic from the node to a ClusterIP needs a route before
	// kube-proxy rewrites it.
	Bare bool   `json:"bare,omitempty"`
	Line string `json:"line"` // for messages: why a range was avoided
}

// OSRelease is the part of /etc/os-release hardway reads (pkg/hostos
// knows the distributions).
type OSRelease = hostos.OSRelease

// Parse reads Script's output.
func Parse(out string) (Facts, error) {
	sections := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if name, ok := strings.CutPrefix(l, "@"); ok && !strings.ContainsAny(name, " \t") {
			cur = name
			sections[cur] = []string{}
			continue
		}
		if cur != "" && strings.TrimSpace(l) != "" {
			sections[cur] = append(sections[cur], l)
		}
	}
	if _, ok := sections["end"]; !ok {
		return Facts{}, fmt.Errorf("the probe's output ended early: %q", firstLines(out, 3))
	}
	first := func(name string) string {
		if ls := sections[name]; len(ls) > 0 {
			return strings.TrimSpace(ls[0])
		}
		return ""
	}
	var f Facts
	f.Hostname, _, _ = strings.Cut(first("hostname"), ".")
	if fs := strings.Fields(first("ssh-connection")); len(fs) == 4 {
		// client address, client port, server address, server port
		if a, err := netip.ParseAddr(fs[2]); err == nil {
			f.ReachedAt = a.Unmap().String()
		}
	}
	f.Addresses = parseAddrs(sections["addr"])
	f.Routes = parseRoutes(sections["route"])
	f.Machine = first("machine")
	f.Arch = GoArch(f.Machine)
	f.OS = parseOSRelease(sections["os-release"])
	if c := first("container"); c != "none" {
		f.Container = c
	}
	f.CPUs, _ = strconv.Atoi(first("nproc"))
	if fs := strings.Fields(first("meminfo")); len(fs) >= 2 && fs[0] == "MemTotal:" {
		f.MemoryKiB, _ = strconv.ParseInt(fs[1], 10, 64)
	}
	f.Systemd = parseSystemd(first("systemd"))
	if f.Machine == "" {
		return f, fmt.Errorf("the probe read no architecture (uname -m): %q", firstLines(out, 3))
	}
	return f, nil
}

// parseAddrs reads `ip -o -4 addr show`:
//
//	2: eth0    inet 10.0.0.11/24 brd 10.0.0.255 scope global eth0\       valid_lft forever ...
func parseAddrs(lines []string) []Address {
	var out []Address
	for _, l := range lines {
		fs := strings.Fields(l)
		for i := 0; i+1 < len(fs); i++ {
			if fs[i] != "inet" || len(fs) < 2 {
				continue
			}
			p, err := netip.ParsePrefix(fs[i+1])
			if err != nil || !p.Addr().Is4() {
				break
			}
			// "eth0@if12" is a veth's peer; the name is before the @.
			name, _, _ := strings.Cut(fs[1], "@")
			out = append(out, Address{Interface: name, Prefix: p})
			break
		}
	}
	return out
}

// routeTypes are the words ip prints before a route's destination when
// it is not a plain unicast route.
var routeTypes = map[string]bool{"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"blackhole": true, "unreachable": true, "prohibit": true, "throw": true, "nat": true, "anycast": true}

// parseRoutes reads `ip -o -4 route show`, leaving out the default route:
//
//	default via 10.0.0.1 dev eth0 proto dhcp src 10.0.0.11 metric 100
//	10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.11
//	blackhole 10.9.0.0/16
func parseRoutes(lines []string) []Route {
	var out []Route
	for _, l := range lines {
		fs := strings.Fields(l)
		typed := len(fs) > 1 && routeTypes[fs[0]]
		if typed {
			fs = fs[1:]
		}
		if len(fs) == 0 || fs[0] == "default" {
			continue
		}
		dest := fs[0]
		if !strings.Contains(dest, "/") {
			dest += "/32"
		}
		p, err := netip.ParsePrefix(dest)
		if err != nil || !p.Addr().Is4() || p.Bits() == 0 {
			continue
		}
		bare := !typed && len(fs) > 1 && fs[1] == "dev" &&
			!slices.ContainsFunc(fs, func(w string) bool { return w == "via" || w == "src" || w == "nexthop" })
		out = append(out, Route{Dest: p.Masked(), Bare: bare, Line: strings.Join(strings.Fields(l), " ")})
	}
	return out
}

// parseOSRelease reads the os-release section's lines.
func parseOSRelease(lines []string) OSRelease {
	return hostos.ParseOSRelease(strings.Join(lines, "\n"))
}

// parseSystemd reads systemctl --version's first line:
// "systemd 252 (252.39-1~deb12u2)" is 252.
func parseSystemd(l string) int {
	fs := strings.Fields(l)
	if len(fs) < 2 || fs[0] != "systemd" {
		return 0
	}
	n, _ := strconv.Atoi(fs[1])
	return n
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

// Probe runs Script on h and parses what it printed.
func Probe(ctx context.Context, h remote.Host) (Facts, error) {
	out, err := h.Run(ctx, Script, nil)
	if err != nil {
		return Facts{}, fmt.Errorf("probe: %w", err)
	}
	f, err := Parse(string(out))
	if err != nil {
		return f, fmt.Errorf("%s: %w", h.Name(), err)
	}
	return f, nil
}

// Options tune ProbeAll.
type Options struct {
	// Connect opens the connection to one host; nil: SSH (remote.Dial).
	Connect func(ctx context.Context, cfg remote.Config) (remote.Host, error)
	// Limit is how many hosts are probed at once; 0: 16.
	Limit int
	// Done is told about each host as its probe ends (one call at a time,
	// in the order they end): the progress line.
	Done func(i int, f Facts, err error)
}

// ProbeAll connects to every host and probes it, several at once. A host
// that fails does not stop the others: the errors come back joined, in the
// order of hosts, each with the hint its connection failure carries.
func ProbeAll(ctx context.Context, hosts []remote.Config, opt Options) ([]Facts, error) {
	if opt.Connect == nil {
		opt.Connect = func(ctx context.Context, cfg remote.Config) (remote.Host, error) {
			h, err := remote.Dial(ctx, cfg)
			if err != nil {
				return nil, err // not a typed nil inside the interface
			}
			return h, nil
		}
	}
	if opt.Limit == 0 {
		opt.Limit = 16
	}
	facts := make([]Facts, len(hosts))
	var mu sync.Mutex
	idx := make([]int, len(hosts))
	for i := range idx {
		idx[i] = i
	}
	err := remote.ForEach(ctx, idx, opt.Limit, func(ctx context.Context, i int) error {
		f, err := probeOne(ctx, hosts[i], opt.Connect)
		facts[i] = f
		if opt.Done != nil {
			mu.Lock()
			opt.Done(i, f, err)
			mu.Unlock()
		}
		return err
	})
	return facts, err
}

func probeOne(ctx context.Context, cfg remote.Config, connect func(context.Context, remote.Config) (remote.Host, error)) (Facts, error) {
	h, err := connect(ctx, cfg)
	if err != nil {
		return Facts{}, err
	}
	if c, ok := h.(remote.Closer); ok {
		defer c.Close()
	}
	return Probe(ctx, h)
}
