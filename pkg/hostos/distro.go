// Package hostos knows the host operating systems hardway runs on: which
// distribution a host is (from /etc/os-release), its package manager and
// the names it gives the packages the components need, and the firewalls
// (ufw, firewalld) that can close the components' ports. It only parses and
// decides; pkg/cluster runs the commands.
package hostos

import (
	"slices"
	"strings"
)

// Family is a package manager family.
type Family string

const (
	Apt     Family = "apt" // Debian, Ubuntu, Raspberry Pi OS
	Dnf     Family = "dnf" // Fedora and its relatives
	Unknown Family = ""
)

// Distro is one distribution hardway is tested or known to work on.
type Distro struct {
	ID       string   // os-release ID
	Name     string   // as users call it
	Family   Family   // its package manager
	Versions []string // VERSION_IDs known to work; nil: any current release
}

// Distros is the table of the distributions hardway knows. A host of
// another one gets a warning and the same checks, never a refusal: a
// systemd Linux with the components' tools runs the cluster.
var Distros = []Distro{
	{ID: "debian", Name: "Debian", Family: Apt, Versions: []string{"12", "13"}},
	{ID: "ubuntu", Name: "Ubuntu", Family: Apt, Versions: []string{"24.04"}},
	{ID: "raspbian", Name: "Raspberry Pi OS", Family: Apt, Versions: []string{"12", "13"}},
	{ID: "fedora", Name: "Fedora", Family: Dnf},
}

// OSRelease is what /etc/os-release says.
type OSRelease struct {
	ID, VersionID, PrettyName string
	IDLike                    []string
}

// ParseOSRelease reads the KEY=value lines of /etc/os-release (values
// optionally quoted).
func ParseOSRelease(s string) OSRelease {
	var r OSRelease
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			r.ID = strings.ToLower(v)
		case "VERSION_ID":
			r.VersionID = v
		case "PRETTY_NAME":
			r.PrettyName = v
		case "ID_LIKE":
			r.IDLike = strings.Fields(strings.ToLower(v))
		}
	}
	return r
}

// Identify says which distribution r is, its package family (from ID_LIKE
// for a distribution not in the table: Linux Mint is ubuntu-like, Rocky is
// fedora-like), and a warning when hardway does not know it or that release.
func Identify(r OSRelease) (d Distro, warning string) {
	name := r.PrettyName
	if name == "" {
		name = strings.TrimSpace(r.ID + " " + r.VersionID)
	}
	if name == "" {
		name = "no /etc/os-release"
	}
	for _, t := range Distros {
		if t.ID != r.ID {
			continue
		}
		if t.Versions != nil && !slices.Contains(t.Versions, r.VersionID) {
			return t, name + ": " + t.Name + " " + r.VersionID + " is not a release hardway is tested on (" + t.Name + " " + strings.Join(t.Versions, ", ") + "); the checks still run"
		}
		return t, ""
	}
	d = Distro{ID: r.ID, Name: name}
	for _, like := range r.IDLike {
		for _, t := range Distros {
			if t.ID == like {
				d.Family = t.Family
			}
		}
		if like == "rhel" || like == "centos" {
			d.Family = Dnf
		}
		if d.Family != Unknown {
			break
		}
	}
	return d, name + ": not a distribution hardway knows (Debian, Ubuntu, Raspberry Pi OS, Fedora); the checks still run"
}
