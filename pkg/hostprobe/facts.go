package hostprobe

import (
	"fmt"
	"slices"
	"strings"
)

// archs maps uname -m to the architecture names of Go and of the release
// downloads: the two hardway has binaries for.
var archs = map[string]string{
	"x86_64":  "amd64",
	"aarch64": "arm64",
}

// GoArch is the download architecture of a uname -m, or "" for one hardway
// has no binaries for (armv7l, i686, riscv64...).
func GoArch(machine string) string { return archs[machine] }

// Distro is a distribution hardway knows: what its CI and its users run it
// on. Another one may work as well; preflight checks what the cluster
// needs, whatever the distribution.
type Distro struct {
	ID       string   // os-release ID
	Name     string   // for messages
	Versions []string // os-release VERSION_ID; nil: every version
}

// Distros is the one table of the distributions hardway knows.
var Distros = []Distro{
	{ID: "debian", Name: "Debian", Versions: []string{"12", "13"}},
	{ID: "ubuntu", Name: "Ubuntu", Versions: []string{"24.04"}},
	// Raspberry Pi OS: 32-bit says raspbian; 64-bit says debian.
	{ID: "raspbian", Name: "Raspberry Pi OS"},
	{ID: "fedora", Name: "Fedora"},
}

// Known says whether hardway knows the distribution and version o names.
func (o OSRelease) Known() bool {
	for _, d := range Distros {
		if d.ID == o.ID {
			return d.Versions == nil || slices.Contains(d.Versions, o.VersionID)
		}
	}
	return false
}

// Name is the distribution as a person says it: PRETTY_NAME, else ID and
// VERSION_ID.
func (o OSRelease) Name() string {
	switch {
	case o.PrettyName != "":
		return o.PrettyName
	case o.ID != "":
		return strings.TrimSpace(o.ID + " " + o.VersionID)
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

// MinSystemdLoadCredential is the first systemd with LoadCredential=,
// which hardway's etcd.service hands etcd its keys with: a control-plane
// host needs it.
const MinSystemdLoadCredential = 247

// Summary is the host in one line: "Debian GNU/Linux 12 (bookworm), x86_64,
// 4 CPUs, 7.8 GiB, systemd 252".
func (f Facts) Summary() string {
	parts := []string{f.OS.Name(), f.Machine}
	if f.CPUs > 0 {
		cpus := fmt.Sprintf("%d CPUs", f.CPUs)
		if f.CPUs == 1 {
			cpus = "1 CPU"
		}
		parts = append(parts, cpus)
	}
	if f.MemoryKiB > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB", float64(f.MemoryKiB)/(1<<20)))
	}
	if f.Systemd > 0 {
		parts = append(parts, fmt.Sprintf("systemd %d", f.Systemd))
	}
	if f.Container != "" {
		parts = append(parts, "container "+f.Container)
	}
	return strings.Join(parts, ", ")
}
