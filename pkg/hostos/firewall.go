package hostos

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Port is a port a component listens on for other hosts.
type Port struct {
	Number int
	Proto  string // "tcp"
	Why    string // the component: "kube-apiserver", "etcd peer"
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Number, p.Proto) }

// Firewall is what an active host firewall lets in.
type Firewall struct {
	Kind string // "ufw", "firewalld"; "" when neither is active
	// AllowIn: the default policy for incoming connections is allow (ufw
	// "Default: allow (incoming)"), so no port is closed by it.
	AllowIn bool
	open    []portRange
	// RoutedAllowed: forwarded traffic (pods on other nodes) is not
	// dropped: ufw's routed policy is allow or disabled, or the pod network
	// is allowed by a route rule or a trusted source.
	RoutedAllowed bool
	routeTo       []netip.Prefix // ufw route rules to a network / firewalld trusted sources
	routeFrom     []netip.Prefix // ufw route rules from a network / firewalld trusted sources
}

type portRange struct {
	lo, hi int
	proto  string // "" both
}

// Active says whether a firewall filters the host's ports.
func (f Firewall) Active() bool { return f.Kind != "" }

// Closed are the ports of need that f does not let in.
func (f Firewall) Closed(need []Port) []Port {
	if !f.Active() || f.AllowIn {
		return nil
	}
	var out []Port
	for _, p := range need {
		if !slices.ContainsFunc(f.open, func(r portRange) bool {
			return p.Number >= r.lo && p.Number <= r.hi && (r.proto == "" || r.proto == p.Proto)
		}) {
			out = append(out, p)
		}
	}
	return out
}

// PodsBlocked says whether forwarded traffic to and from pods is dropped.
func (f Firewall) PodsBlocked(pods netip.Prefix) bool {
	if !f.Active() || f.RoutedAllowed {
		return false
	}
	covers := func(p netip.Prefix) bool { return p.Bits() <= pods.Bits() && p.Contains(pods.Addr()) }
	return !slices.ContainsFunc(f.routeTo, covers) || !slices.ContainsFunc(f.routeFrom, covers)
}

// OpenCommands are the commands that let ports in and, when pods is
// valid, pod traffic through.
func (f Firewall) OpenCommands(ports []Port, pods netip.Prefix) []string {
	var out []string
	switch f.Kind {
	case "ufw":
		for _, p := range ports {
			out = append(out, fmt.Sprintf("ufw allow %s comment 'hardway: %s'", p, p.Why))
		}
		if pods.IsValid() {
			out = append(out, fmt.Sprintf("ufw route allow from %s comment 'hardway: pods'", pods), fmt.Sprintf("ufw route allow to %s comment 'hardway: pods'", pods))
		}
	case "firewalld":
		// Now and after a reboot, each: a --reload would drop the
		// runtime rules someone added by hand.
		var args []string
		for _, p := range ports {
			args = append(args, "--add-port="+p.String())
		}
		if pods.IsValid() {
			args = append(args, "--zone=trusted --add-source="+pods.String())
		}
		for _, a := range args {
			out = append(out, "firewall-cmd "+a, "firewall-cmd --permanent "+a)
		}
	}
	return out
}

// ParseUfw reads `ufw status verbose`. An inactive ufw is no firewall.
//
//	Status: active
//	Default: deny (incoming), allow (outgoing), deny (routed)
//	To                         Action      From
//	22/tcp                     ALLOW IN    Anywhere
//	2379:2380/tcp              ALLOW IN    Anywhere
//	10.200.0.0/16              ALLOW FWD   Anywhere
func ParseUfw(out string) Firewall {
	f := Firewall{}
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, " # "); i >= 0 { // a rule's comment
			l = l[:i]
		}
		l = strings.TrimSpace(l)
		switch {
		case l == "Status: active":
			f.Kind = "ufw"
		case strings.HasPrefix(l, "Default:"):
			f.AllowIn = strings.Contains(l, "allow (incoming)")
			// "disabled (routed)" is ufw's word for a host that does
			// not forward yet (ip_forward 0): its policy, drop by
			// default, applies once the worker forwards.
			f.RoutedAllowed = strings.Contains(l, "allow (routed)")
		}
		to, rest, ok := cutAction(l)
		if !ok {
			continue
		}
		if from, ok := strings.CutPrefix(rest, "FWD"); ok {
			from = strings.TrimSpace(from)
			pt, errTo := netip.ParsePrefix(to)
			pf, errFrom := netip.ParsePrefix(from)
			switch {
			case to == "Anywhere" && from == "Anywhere":
				f.RoutedAllowed = true
			case errTo == nil && from == "Anywhere":
				f.routeTo = append(f.routeTo, pt)
			case errFrom == nil && to == "Anywhere":
				f.routeFrom = append(f.routeFrom, pf)
			}
			continue
		}
		if strings.HasPrefix(to, "Anywhere") {
			f.open = append(f.open, portRange{1, 65535, ""})
			continue
		}
		if r, ok := parsePortRange(strings.Fields(to)[0], ":"); ok {
			f.open = append(f.open, r)
		}
	}
	if f.Kind == "" {
		return Firewall{}
	}
	return f
}

// cutAction splits a ufw rule line at its ALLOW action: the To column and
// what follows ALLOW ("IN    Anywhere", "FWD   Anywhere").
func cutAction(l string) (to, rest string, ok bool) {
	i := strings.Index(l, " ALLOW")
	if i < 0 || strings.Contains(l[:i], "(v6)") {
		return "", "", false
	}
	return strings.TrimSpace(l[:i]), strings.TrimSpace(l[i+len(" ALLOW"):]), true
}

// parsePortRange reads 6443/tcp, 2379:2380/tcp (ufw) or 2379-2380/tcp
// (firewalld), and 53 (both protocols).
func parsePortRange(s, sep string) (portRange, bool) {
	ports, proto, _ := strings.Cut(s, "/")
	lo, hi, isRange := strings.Cut(ports, sep)
	a, err := strconv.Atoi(lo)
	if err != nil {
		return portRange{}, false
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(hi); err != nil {
			return portRange{}, false
		}
	}
	return portRange{a, b, proto}, true
}

// ParseFirewalld reads the lines a host's facts print for a running
// firewalld:
//
//	ports 6443/tcp 2379-2380/tcp
//	service ssh 22/tcp
//	trusted 10.200.0.0/16
func ParseFirewalld(out string) Firewall {
	f := Firewall{Kind: "firewalld"}
	for _, l := range strings.Split(out, "\n") {
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		switch fs[0] {
		case "ports":
			for _, p := range fs[1:] {
				if r, ok := parsePortRange(p, "-"); ok {
					f.open = append(f.open, r)
				}
			}
		case "service":
			for _, p := range fs[min(2, len(fs)):] {
				if r, ok := parsePortRange(p, "-"); ok {
					f.open = append(f.open, r)
				}
			}
		case "trusted":
			for _, s := range fs[1:] {
				if p, err := netip.ParsePrefix(s); err == nil {
					f.routeTo, f.routeFrom = append(f.routeTo, p), append(f.routeFrom, p)
				}
			}
		}
	}
	return f
}
