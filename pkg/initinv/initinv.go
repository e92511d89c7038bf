// Package initinv writes the inventory of 'hardway init --hosts': from what
// pkg/hostprobe read on each host it guesses the roles, the names, the pod
// and service ranges and the architecture, and writes them as a commented
// inventory.yaml that the inventory loader accepts, with every guess said
// beside it.
//
// It connects to nothing and reads no file but --like's: the probing is
// hostprobe's, the connecting remote's. Build is pure but for the loader's
// check of what it wrote.
package initinv

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hardway/hardway/pkg/hostos"
	"github.com/hardway/hardway/pkg/hostprobe"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// Roles of a host.
const (
	RoleControlPlane = "controlPlane"
	RoleWorker       = "worker"
)

// Input is what Build needs.
type Input struct {
	Targets []Target
	Facts   []hostprobe.Facts    // one per target, in order
	Conn    *inventory.Inventory // Connection's: the SSH settings and where the file goes
	Like    *Like                // nil: no --like
	Display string               // the file's name in messages; "": standard output
	// Controllers > 0 or Workers >= 0 choose the roles (see Roles).
	Controllers int
	Workers     int
}

// Result is the inventory and every guess that went into it.
type Result struct {
	Hosts       []Host   `json:"hosts"`
	Arch        string   `json:"arch"`
	MixedArch   bool     `json:"mixedArch,omitempty"`
	PodCIDR     string   `json:"podCIDR"`
	ServiceCIDR string   `json:"serviceCIDR"`
	Like        string   `json:"like,omitempty"`
	Guesses     []string `json:"guesses"`
	Warnings    []string `json:"warnings"`
	// YAML is the inventory file; it loads (Build checked it).
	YAML []byte `json:"-"`
}

// Host is one host of the result: where it was reached, what it is, and
// what the inventory says of it.
type Host struct {
	Target          string          `json:"target"` // as --hosts gave it
	Name            string          `json:"name"`
	Role            string          `json:"role"`
	Address         string          `json:"address"`
	InternalAddress string          `json:"internalAddress,omitempty"`
	ContainerHost   bool            `json:"containerHost,omitempty"`
	Facts           hostprobe.Facts `json:"facts"`

	ssh      *inventory.SSH // the per-host overrides of the connection
	comments []string       // above the host in the file
}

// Build makes the inventory.
func Build(in Input) (*Result, error) {
	n := len(in.Targets)
	if len(in.Facts) != n || in.Conn == nil || len(in.Conn.ControlPlane) != n {
		return nil, fmt.Errorf("init: %d targets, %d probes: a bug", n, len(in.Facts))
	}
	r := &Result{Guesses: []string{}, Warnings: []string{}}
	if in.Like != nil {
		r.Like = in.Like.Path
	}
	cp, why, err := Roles(n, in.Controllers, in.Workers)
	if err != nil {
		return nil, err
	}
	r.Guesses = append(r.Guesses, "roles: "+why)
	hostnames, specs := make([]string, n), make([]string, n)
	for i := range n {
		hostnames[i], specs[i] = in.Facts[i].Hostname, in.Targets[i].Spec
	}
	names, notes := Names(hostnames, specs)
	r.Guesses = append(r.Guesses, notes...)

	var avoid []Network
	for i, t := range in.Targets {
		f := in.Facts[i]
		h := Host{Target: t.Spec, Name: names[i], Role: RoleWorker, Facts: f, ssh: in.Conn.ControlPlane[i].SSH}
		if i < cp {
			h.Role = RoleControlPlane
		}
		if err := h.addresses(t, in.Facts, i); err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(t.Host); err != nil {
			r.Guesses = append(r.Guesses, fmt.Sprintf("address %s for %s: %s is a name, and its sshd saw the connection arrive at %s", h.Address, h.Name, t.Host, h.Address))
		}
		if h.InternalAddress != "" {
			r.Guesses = append(r.Guesses, fmt.Sprintf("internalAddress %s for %s: it was reached at %s, but its sshd saw the connection arrive at %s (NAT or a port forward): the cluster uses that one",
				h.InternalAddress, h.Name, h.Address, h.InternalAddress))
		}
		for _, o := range r.Hosts {
			if o.Address == h.Address {
				return nil, usererr.Errorf("give each host's own address in --hosts (a port forward of one address cannot be an inventory: the hosts reach each other at their addresses)",
					"%s and %s are both reached at %s", o.Target, h.Target, h.Address)
			}
		}
		avoid = append(avoid, networks(h)...)
		if len(f.Addresses) == 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: read none of its addresses or routes (is iproute2's ip installed?): the pod and service ranges only avoid the address it was reached at", h.Name))
		}
		r.Hosts = append(r.Hosts, h)
	}

	pod, svc, err := PickRanges(avoid)
	if err != nil {
		return nil, err
	}
	r.PodCIDR, r.ServiceCIDR = pod.Prefix.String(), svc.Prefix.String()
	r.Guesses = append(r.Guesses, pod.Why, svc.Why)

	archs := make([]string, n)
	for i, f := range in.Facts {
		archs[i] = f.Arch
	}
	r.Arch, r.MixedArch = Arch(archs)
	r.Guesses = append(r.Guesses, r.archGuess())
	if in.Like != nil && in.Like.Inv.Arch != r.Arch {
		r.Guesses = append(r.Guesses, fmt.Sprintf("arch %s from the hosts, not %s's %s", r.Arch, in.Like.Path, in.Like.Inv.Arch))
	}
	for i := range r.Hosts {
		r.hostFacts(&r.Hosts[i])
	}
	if in.Like != nil {
		r.Guesses = append(r.Guesses, fmt.Sprintf("every other setting is %s's (versions, releases, images, registries, ssh, dns, podSecurity...)", in.Like.Path))
		if ep := in.Like.Inv.Network.APIServerEndpoint; ep != "" {
			r.Warnings = append(r.Warnings, fmt.Sprintf("network.apiServerEndpoint %s is %s's: check that it reaches these hosts' apiservers, or remove it (the first control-plane host is the default)", ep, in.Like.Path))
		}
	}

	r.YAML, err = r.write(in, pod, svc)
	if err != nil {
		return nil, err
	}
	// What init writes must load: the same loader every command uses.
	display := in.Display
	if display == "" {
		display = "the written inventory"
	}
	inv, err := inventory.Parse(display, in.Conn.Path, r.YAML)
	if err != nil {
		hint := "a bug in hardway init; 'hardway init -o json --hosts ...' shows what the hosts said"
		if in.Like != nil {
			hint = "a setting of " + in.Like.Path + " that does not fit these hosts, or " + hint
		}
		return nil, usererr.New(fmt.Errorf("init: the inventory it made does not load (nothing written): %w", err), hint)
	}
	for _, w := range inv.Warnings {
		msg := w.Msg
		if w.Hint != "" {
			msg += " (" + w.Hint + ")"
		}
		r.Warnings = append(r.Warnings, w.Path+": "+msg)
	}
	return r, nil
}

// addresses sets the host's address: the target's when it is an IP, else
// the one its sshd saw the connection arrive at. When those differ and the
// host has that address (a NAT or a port forward), and no other host says
// the same (all VMs behind one forward do), that one is its
// internalAddress, the address the other hosts reach it at.
func (h *Host) addresses(t Target, all []hostprobe.Facts, i int) error {
	f := all[i]
	if a, err := netip.ParseAddr(t.Host); err == nil {
		h.Address = a.String()
	} else if f.ReachedAt != "" {
		h.Address = f.ReachedAt
		return nil
	} else {
		return usererr.Errorf("name the host by its IP address in --hosts",
			"%s: cannot tell its IP address (the inventory needs one): its sshd did not say ($SSH_CONNECTION)", t.Spec)
	}
	reached, err := netip.ParseAddr(f.ReachedAt)
	if err != nil || reached.String() == h.Address || reached.IsLoopback() {
		return nil
	}
	own := false
	for _, a := range f.Addresses {
		own = own || a.Prefix.Addr() == reached
	}
	for j, o := range all {
		if j != i && o.ReachedAt == f.ReachedAt {
			return nil
		}
	}
	if own {
		h.InternalAddress = reached.String()
	}
	return nil
}

// clusterRoute says whether a route is a running hardway cluster's: one
// of its pod routes (proto 70) or a route on its pod bridge.
func clusterRoute(line string) bool {
	fs := strings.Fields(line)
	for i := 0; i+1 < len(fs); i++ {
		if fs[i] == "proto" && fs[i+1] == units.PodRouteProto || fs[i] == "dev" && fs[i+1] == units.CNIBridge {
			return true
		}
	}
	return false
}

// networks are the host's networks the ranges must avoid, each with why.
func networks(h Host) []Network {
	var out []Network
	for _, a := range []string{h.Address, h.InternalAddress} {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			out = append(out, Network{Prefix: netip.PrefixFrom(ip, 32), Why: fmt.Sprintf("%s's address %s", h.Name, ip)})
		}
	}
	for _, a := range h.Facts.Addresses {
		if a.Prefix.Addr().IsLoopback() {
			continue
		}
		out = append(out, Network{Prefix: a.Prefix.Masked(), Why: fmt.Sprintf("%s's address %s on %s", h.Name, a.Prefix, a.Interface),
			Own: a.Interface == units.CNIBridge})
	}
	for _, rt := range h.Facts.Routes {
		out = append(out, Network{Prefix: rt.Dest, Why: fmt.Sprintf("%s's route %q", h.Name, rt.Line), Bare: rt.Bare, Own: clusterRoute(rt.Line)})
	}
	return out
}

func (r *Result) archGuess() string {
	if !r.MixedArch {
		machine, all := "", true
		for _, h := range r.Hosts {
			if h.Facts.Arch == r.Arch {
				machine = h.Facts.Machine
			} else {
				all = false
			}
		}
		switch {
		case machine == "":
			return fmt.Sprintf("arch %s, the default: no host has an architecture hardway has binaries for", r.Arch)
		case !all:
			return fmt.Sprintf("arch %s: every host hardway has binaries for is %s (uname -m)", r.Arch, machine)
		}
		return fmt.Sprintf("arch %s: every host is %s (uname -m)", r.Arch, machine)
	}
	count := map[string][]string{}
	var order []string
	for _, h := range r.Hosts {
		if a := h.Facts.Arch; a != "" {
			if count[a] == nil {
				order = append(order, a)
			}
			count[a] = append(count[a], h.Name)
		}
	}
	var parts []string
	for _, a := range order {
		parts = append(parts, fmt.Sprintf("%s on %s", a, strings.Join(count[a], ", ")))
	}
	return fmt.Sprintf("arch %s, the most common: the cluster mixes architectures (%s)", r.Arch, strings.Join(parts, "; "))
}

// hostFacts puts what was learned of h into the guesses, the warnings and
// the comments above it in the file.
func (r *Result) hostFacts(h *Host) {
	f := h.Facts
	role := "control plane"
	if h.Role == RoleWorker {
		role = "worker"
	}
	r.Guesses = append(r.Guesses, fmt.Sprintf("%s (%s): %s, %s", h.Name, h.Target, role, f.Summary()))
	h.comments = append(h.comments, fmt.Sprintf("%s: %s", h.Target, f.Summary()))
	if f.Hostname != "" && f.Hostname != h.Name {
		h.comments[0] += "; host name " + f.Hostname
	}
	switch {
	case f.Arch == "":
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: uname -m says %s: hardway has binaries for amd64 (x86_64) and arm64 (aarch64) only", h.Name, f.Machine))
		h.comments = append(h.comments, fmt.Sprintf("uname -m: %s: hardway has no binaries for this architecture", f.Machine))
	case f.Arch != r.Arch:
		h.comments = append(h.comments, fmt.Sprintf("this host is %s (uname -m: %s): the cluster mixes architectures, arch above is %s", f.Arch, f.Machine, r.Arch))
	}
	if !f.OS.Known() {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s is not a distribution hardway knows (%s); it may work: 'hardway up' checks what it needs first",
			h.Name, f.OS.Name(), hostos.KnownDistros()))
	}
	switch {
	case f.Systemd == 0:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: no systemctl: hardway installs systemd services, and 'hardway up' refuses a host without systemd", h.Name))
	case h.Role == RoleControlPlane && f.Systemd < hostprobe.MinSystemdLoadCredential:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: systemd %d: a control-plane host needs %d or later (etcd.service's LoadCredential=): make it a worker, or upgrade it",
			h.Name, f.Systemd, hostprobe.MinSystemdLoadCredential))
	}
	if f.Container != "" {
		h.ContainerHost = true
		r.Guesses = append(r.Guesses, fmt.Sprintf("containerHost on %s: systemd-detect-virt --container says %s", h.Name, f.Container))
	}
}
