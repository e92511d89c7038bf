package inventory

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ServiceNet is the parsed service CIDR.
func (n Network) ServiceNet() netip.Prefix { return n.serviceNet }

// PodNet is the parsed pod CIDR.
func (n Network) PodNet() netip.Prefix { return n.podNet }

// ServiceIP is the first address of the service CIDR: the ClusterIP of the
// "kubernetes" Service, which must be in the apiserver's certificate.
func (n Network) ServiceIP() netip.Addr { return n.serviceNet.Addr().Next() }

// APIServerHost is the host clients use for the apiserver: the endpoint's
// host, or the first control-plane host's address.
func (inv *Inventory) APIServerHost() string {
	if inv.Network.APIServerEndpoint != "" {
		h, _, _ := splitHostPortDefault(inv.Network.APIServerEndpoint, DefaultAPIServerPort)
		return h
	}
	if len(inv.ControlPlane) > 0 {
		return inv.ControlPlane[0].Address
	}
	return ""
}

// APIServerURL is https://host:port for admin and external clients.
func (inv *Inventory) APIServerURL() string {
	port := DefaultAPIServerPort
	if inv.Network.APIServerEndpoint != "" {
		_, port, _ = splitHostPortDefault(inv.Network.APIServerEndpoint, DefaultAPIServerPort)
	}
	return "https://" + net.JoinHostPort(inv.APIServerHost(), strconv.Itoa(port))
}

// Hosts returns the control-plane hosts followed by the workers.
func (inv *Inventory) Hosts() []Host {
	return append(append([]Host{}, inv.ControlPlane...), inv.Workers...)
}

// HostArch is h's architecture: its own arch, else the inventory's.
func (inv *Inventory) HostArch(h Host) string {
	if h.Arch != "" {
		return h.Arch
	}
	return inv.Arch
}

// Arches are the architectures of all hosts, sorted, each once: what the
// release set holds binaries for.
func (inv *Inventory) Arches() []string { return inv.ArchesOf(inv.Hosts()) }

// ArchesOf are the architectures of hosts, sorted, each once (none for no
// hosts): inv.ArchesOf(inv.Workers) are those the worker binaries and
// images are fetched for.
func (inv *Inventory) ArchesOf(hosts []Host) []string {
	var out []string
	for _, h := range hosts {
		if a := inv.HostArch(h); !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// ImageArch is the architecture image im is for: its own arch, else the
// inventory's.
func (inv *Inventory) ImageArch(im Image) string {
	if im.Arch != "" {
		return im.Arch
	}
	return inv.Arch
}

// ImagesFor are the images for workers of architecture arch, in the
// inventory's order.
func (inv *Inventory) ImagesFor(arch string) []Image {
	var out []Image
	for _, im := range inv.Images {
		if inv.ImageArch(im) == arch {
			out = append(out, im)
		}
	}
	return out
}

// SSHFor returns the SSH settings for h: its overrides on top of the
// inventory-wide ones, with relative paths made absolute and sudo decided.
func (inv *Inventory) SSHFor(h Host) SSH {
	s := inv.SSH
	if o := h.SSH; o != nil {
		if o.User != "" {
			s.User = o.User
		}
		if o.Port != 0 {
			s.Port = o.Port
		}
		if o.IdentityFile != "" {
			s.IdentityFile = o.IdentityFile
		}
		if o.KnownHostsFile != "" {
			s.KnownHostsFile = o.KnownHostsFile
		}
		if o.Bastion != "" {
			s.Bastion = o.Bastion
		}
		if o.Sudo != nil {
			s.Sudo = o.Sudo
		}
	}
	s.IdentityFile = inv.Resolve(s.IdentityFile)
	if s.KnownHostsFile == "" {
		if home, err := os.UserHomeDir(); err == nil {
			s.KnownHostsFile = filepath.Join(home, ".ssh", "known_hosts")
		}
	} else {
		s.KnownHostsFile = inv.Resolve(s.KnownHostsFile)
	}
	if s.Sudo == nil {
		sudo := s.User != "root"
		s.Sudo = &sudo
	}
	return s
}

// Resolve makes p absolute relative to the inventory file's directory,
// expanding a leading "~/". Empty stays empty.
func (inv *Inventory) Resolve(p string) string {
	if p == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(inv.Path), p)
}

// Dir is the directory holding the inventory file.
func (inv *Inventory) Dir() string { return filepath.Dir(inv.Path) }

// DefaultStateDir is .hardway next to the inventory.
func (inv *Inventory) DefaultStateDir() string { return filepath.Join(inv.Dir(), ".hardway") }

// LockPath is hardway.lock next to the inventory (meant to be committed).
func (inv *Inventory) LockPath() string { return filepath.Join(inv.Dir(), "hardway.lock") }
