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
	// Raspberry Pi OS: the 32-bit one says raspbian, the 64-bit one debian.
	{ID: "raspbian", Name: "Raspberry Pi OS", Family: Apt},
	{ID: "fedora", Name: "Fedora", Family: Dnf},
}

// OSRelease is the part of /etc/os-release hardway reads.
type OSRelease struct {
	ID         string   `json:"id"`
	VersionID  string   `json:"versionID"`
	PrettyName string   `json:"prettyName"`
	IDLike     []string `json:"idLike,omitempty"`
}

// Known says whether hardway knows the distribution and release.
func (r OSRelease) Known() bool {
	_, warn := Identify(r)
	return warn == ""
}

// Name is the distribution as a person says it: PRETTY_NAME, else ID and
// VERSION_ID.
func (r OSRelease) Name() string {
	switch {
	case r.PrettyName != "":
		return r.PrettyName
	case r.ID != "":
		return strings.TrimSpace(r.ID + " " + r.VersionID)
	}
	return "an unknown distribution (no /etc/os-release)"
}

// KnownDistros lists Distros for a message: "Debian 12 and 13, Ubuntu
// 24.04, Raspberry Pi OS, Fedora".
func KnownDistros() string {
	var out []string
	for _, d := range Distros {
		s := d.Name
		if len(d.Versions) > 0 {
			s += " " + joinAnd(d.Versions)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// ParseOSRelease reads the KEY=value lines of /etc/os-release, whose
// values are quoted like the shell's.
func ParseOSRelease(s string) OSRelease {
	var r OSRelease
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		v = unquote(v)
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
	return d, name + ": not a distribution hardway knows (" + KnownDistros() + "); the checks still run"
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1]
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("\"\\$`", v[i+1]) >= 0 {
				i++
			}
			b.WriteByte(v[i])
		}
		return b.String()
	}
	return v
}
