package initinv

import (
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
)

// Roles is how many of n hosts, the first ones, run the control plane.
// controllers > 0 says so; workers >= 0 says how many of the last hosts
// are workers; neither (0 and -1): three, or one when there are fewer than
// three hosts, never two (etcd needs a majority: two members tolerate no
// failure more than one does). why says it in a line.
func Roles(n, controllers, workers int) (cp int, why string, err error) {
	switch {
	case controllers > 0 && workers >= 0:
		return 0, "", usererr.WithCode(errors.New("--controllers and --workers together"), usererr.CodeUsage, "pass one: the other hosts take the other role")
	case controllers > 0:
		if controllers > n {
			return 0, "", usererr.WithCode(fmt.Errorf("--controllers %d, but --hosts names %d", controllers, n), usererr.CodeUsage,
				"the first N hosts run the control plane; N is at most the number of hosts")
		}
		cp = controllers
		why = fmt.Sprintf("the first %s run the control plane (--controllers %d)", plural(cp, "host"), cp)
	case workers >= 0:
		if workers >= n {
			return 0, "", usererr.WithCode(fmt.Errorf("--workers %d, but --hosts names %d", workers, n), usererr.CodeUsage,
				"at least one host must run the control plane: --workers is at most the number of hosts minus one")
		}
		cp = n - workers
		why = fmt.Sprintf("the last %s are workers (--workers %d), the first %s the control plane", plural(workers, "host"), workers, plural(cp, "host"))
	case n >= 3:
		cp = 3
		why = "the first 3 hosts run the control plane (etcd keeps quorum with one down)"
	case n == 2:
		cp = 1
		why = "the first host runs the control plane (one, not two: etcd needs a majority, and two members survive no more failures than one)"
	default:
		cp = 1
		why = "the one host runs the control plane"
	}
	switch w := n - cp; {
	case w == 0 && n == 1:
		why += "; no workers, so no pods run"
	case w == 0:
		why += "; no workers, so no pods run: --workers N makes the last N hosts workers"
	case controllers > 0 || workers >= 0:
	case w == 1:
		why += ", the other host is a worker"
	default:
		why += fmt.Sprintf(", the other %d hosts are workers", w)
	}
	return cp, why, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Label makes a host name a DNS-1123 label, what the inventory's names
// are: lower case, letters, digits and '-', at most 63; "" when nothing of
// it is left.
func Label(hostname string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(hostname) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	return s
}

// Names are the hosts' inventory names from their host names, in order: a
// name a host before already has gets -2, -3...; a host with no usable
// name is host-N (its place). notes say what was changed and why.
func Names(hostnames, targets []string) (names, notes []string) {
	used := map[string]string{} // name -> target
	for i, h := range hostnames {
		base := Label(h)
		var why []string
		switch {
		case h == "":
			base = fmt.Sprintf("host-%d", i+1)
			why = append(why, "it has no host name")
		case base == "":
			base = fmt.Sprintf("host-%d", i+1)
			why = append(why, fmt.Sprintf("its host name %q gives no DNS-1123 label", h))
		case base != h:
			why = append(why, fmt.Sprintf("its host name %q made a DNS-1123 label", h))
		}
		name := base
		for n := 2; used[name] != ""; n++ {
			suffix := fmt.Sprintf("-%d", n)
			name = strings.TrimRight(base[:min(len(base), 63-len(suffix))], "-") + suffix
		}
		if name != base {
			why = append(why, fmt.Sprintf("%s is %s's already (the two share a host name)", base, used[base]))
		}
		if len(why) > 0 {
			notes = append(notes, fmt.Sprintf("name %s for %s: %s", name, targets[i], strings.Join(why, "; ")))
		}
		used[name] = targets[i]
		names = append(names, name)
	}
	return names, notes
}

// Network is a network one of the hosts has an address in or a route to:
// the pod and service ranges must overlap none of them.
type Network struct {
	Prefix netip.Prefix
	Why    string // "controller-1's address 10.0.0.11/24 on eth0"
	// Bare: a route of exactly Prefix with no gateway and no source
	// address (hostprobe.Route.Bare): one made for a cluster range, as
	// the lab's workers route the Services'. It rules out every range but
	// Prefix itself.
	Bare bool
	// Own: the network is a running hardway cluster's pods' (an address
	// on its pod bridge, a pod route it added): it rules out no pod range
	// that holds it, so that init on a cluster's hosts finds its podCIDR.
	Own bool
}

// privateSpaces are where the ranges are looked for (RFC 1918), in order
// after the one the default is in.
var privateSpaces = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// Range is a chosen pod or service range and why.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// PickRanges chooses the pod and service ranges: the defaults
// (inventory.DefaultPodCIDR, DefaultServiceCIDR) when they overlap none of
// the networks, else the first range of their size after them, through
// 10.0.0.0/8, then 172.16.0.0/12, then 192.168.0.0/16, that overlaps none
// of them (and not each other).
func PickRanges(avoid []Network) (pod, svc Range, err error) {
	pod, err = pickRange("podCIDR", netip.MustParsePrefix(inventory.DefaultPodCIDR), avoid)
	if err != nil {
		return pod, svc, err
	}
	svc, err = pickRange("serviceCIDR", netip.MustParsePrefix(inventory.DefaultServiceCIDR),
		append(append([]Network{}, avoid...), Network{Prefix: pod.Prefix, Why: "the podCIDR"}))
	return pod, svc, err
}

func pickRange(key string, def netip.Prefix, avoid []Network) (Range, error) {
	hit := func(p netip.Prefix) *Network {
		for i := range avoid {
			n := &avoid[i]
			if n.Own && key == "podCIDR" && p.Bits() <= n.Prefix.Bits() && p.Contains(n.Prefix.Addr()) {
				continue
			}
			if n.Prefix.Overlaps(p) && !(n.Bare && n.Prefix == p) {
				return n
			}
		}
		return nil
	}
	// made says which bare routes are for exactly p.
	made := func(p netip.Prefix) string {
		for _, n := range avoid {
			if n.Bare && n.Prefix == p {
				return fmt.Sprintf("; %s is a route made for it (no gateway, no source address), not a network", n.Why)
			}
		}
		return ""
	}
	first := hit(def)
	if first == nil {
		return Range{def, fmt.Sprintf("%s %s, the default: no host has an address in it or a route to it%s", key, def, made(def))}, nil
	}
	for p := range candidates(def) {
		if hit(p) == nil {
			return Range{p, fmt.Sprintf("%s %s: the default %s overlaps %s (%s)%s", key, p, def, first.Prefix, first.Why, made(p))}, nil
		}
	}
	return Range{}, usererr.Errorf("write network."+key+" into the file by hand",
		"no /%d in 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 is free of the hosts' networks for %s", def.Bits(), key)
}

// candidates are the ranges of def's size after def in its private space
// (wrapping around to that space's start), then in the other spaces, in
// order.
func candidates(def netip.Prefix) iter.Seq[netip.Prefix] {
	order := []netip.Prefix{}
	for _, s := range privateSpaces {
		if s.Contains(def.Addr()) {
			order = append([]netip.Prefix{s}, order...)
		} else {
			order = append(order, s)
		}
	}
	bits := def.Bits()
	return func(yield func(netip.Prefix) bool) {
		for _, s := range order {
			if s.Bits() > bits {
				continue
			}
			n := uint32(1) << (bits - s.Bits())
			base, step := u32(s.Addr()), uint32(1)<<(32-bits)
			off := uint32(0)
			if s.Contains(def.Addr()) {
				off = (u32(def.Addr())-base)/step + 1
			}
			for k := range n {
				p := netip.PrefixFrom(addr(base+(off+k)%n*step), bits)
				if p != def && !yield(p) {
					return
				}
			}
		}
	}
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Arch is the inventory's arch for hosts of these architectures ("" for
// one hardway has none for): the one they all have, or the most common
// (the first host's on a tie); mixed says they differ. With no host of a
// known architecture it is the default.
func Arch(archs []string) (arch string, mixed bool) {
	var known []string
	for _, a := range archs {
		if a != "" {
			known = append(known, a)
		}
	}
	if len(known) == 0 {
		return inventory.DefaultArch, false
	}
	arch = majority(known)
	for _, a := range known {
		mixed = mixed || a != arch
	}
	return arch, mixed
}
