package hostprobe

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/hostos"
)

// A Debian 12 nspawn container reached over SSH, with docker's bridge and a
// blackhole route: what Script prints there.
const nspawnOut = `@hostname
Controller-1.lab.example
@ssh-connection
10.240.0.1 50022 10.240.0.11 22
@addr
1: lo    inet 127.0.0.1/8 scope host lo\       valid_lft forever preferred_lft forever
2: host0    inet 10.240.0.11/24 brd 10.240.0.255 scope global host0\       valid_lft forever preferred_lft forever
3: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\       valid_lft forever preferred_lft forever
@route
default via 10.240.0.1 dev host0 proto static
10.240.0.0/24 dev host0 proto kernel scope link src 10.240.0.11
172.17.0.0/16 dev docker0 proto kernel scope link src 172.17.0.1 linkdown
blackhole 10.200.0.0/16
10.1.2.3 via 10.240.0.1 dev host0
10.32.0.0/24 dev host0
@machine
aarch64
@os-release
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
@container
systemd-nspawn
@nproc
4
@meminfo
MemTotal:        8048812 kB
@systemd
systemd 252 (252.39-1~deb12u2)
@end
`

func TestParse(t *testing.T) {
	f, err := Parse(nspawnOut)
	if err != nil {
		t.Fatal(err)
	}
	if f.Hostname != "Controller-1" || f.ReachedAt != "10.240.0.11" || f.Machine != "aarch64" || f.Arch != "arm64" ||
		f.Container != "systemd-nspawn" || f.CPUs != 4 || f.MemoryKiB != 8048812 || f.Systemd != 252 {
		t.Errorf("%+v", f)
	}
	if !reflect.DeepEqual(f.OS, OSRelease{ID: "debian", VersionID: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}) || !f.OS.Known() {
		t.Errorf("os %+v", f.OS)
	}
	wantAddrs := []Address{
		{"lo", netip.MustParsePrefix("127.0.0.1/8")},
		{"host0", netip.MustParsePrefix("10.240.0.11/24")},
		{"docker0", netip.MustParsePrefix("172.17.0.1/16")},
	}
	if !slices.Equal(f.Addresses, wantAddrs) {
		t.Errorf("addresses %v", f.Addresses)
	}
	var dests []string
	for _, r := range f.Routes {
		dests = append(dests, r.Dest.String())
	}
	// No default route: it is every address, not a network to avoid.
	if got := strings.Join(dests, " "); got != "10.240.0.0/24 172.17.0.0/16 10.200.0.0/16 10.1.2.3/32 10.32.0.0/24" {
		t.Errorf("routes %s", got)
	}
	// Only the lab's route for the Services is bare: no gateway, no
	// source address, not a blackhole.
	for _, r := range f.Routes {
		if r.Bare != (r.Dest.String() == "10.32.0.0/24") {
			t.Errorf("%q: bare %v", r.Line, r.Bare)
		}
	}
}

func TestParseMissingTools(t *testing.T) {
	// A minimal host: no ip, no systemd-detect-virt, no systemd.
	f, err := Parse("@hostname\nbox\n@ssh-connection\n\n@addr\n@route\n@machine\nx86_64\n@os-release\n@container\n@nproc\n1\n@meminfo\n@systemd\n@end\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.Hostname != "box" || f.Arch != "amd64" || f.Container != "" || f.Systemd != 0 || len(f.Addresses) != 0 || f.ReachedAt != "" {
		t.Errorf("%+v", f)
	}
	if f.OS.Known() || !strings.Contains(f.OS.Name(), "unknown") {
		t.Errorf("os %+v: %s", f.OS, f.OS.Name())
	}
	// systemd-detect-virt on a machine of its own says none.
	f, _ = Parse("@machine\nx86_64\n@container\nnone\n@end\n")
	if f.Container != "" {
		t.Errorf("container %q", f.Container)
	}
	for _, out := range []string{"", "@hostname\nbox\n@machine\nx86_64\n", "@hostname\nbox\n@end\n"} {
		if _, err := Parse(out); err == nil {
			t.Errorf("%q parsed", out)
		}
	}
}

func TestGoArch(t *testing.T) {
	for m, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "armv7l": "", "riscv64": "", "": ""} {
		if got := GoArch(m); got != want {
			t.Errorf("GoArch(%q) = %q, want %q", m, got, want)
		}
	}
}

func TestDistroTable(t *testing.T) {
	for _, c := range []struct {
		os    OSRelease
		known bool
	}{
		{OSRelease{ID: "debian", VersionID: "12"}, true},
		{OSRelease{ID: "debian", VersionID: "13"}, true},
		{OSRelease{ID: "debian", VersionID: "11"}, false},
		{OSRelease{ID: "ubuntu", VersionID: "24.04"}, true},
		{OSRelease{ID: "ubuntu", VersionID: "22.04"}, false},
		{OSRelease{ID: "raspbian", VersionID: "12"}, true},
		{OSRelease{ID: "fedora", VersionID: "42"}, true},
		{OSRelease{ID: "alpine", VersionID: "3.20"}, false},
		{OSRelease{}, false},
	} {
		if got := c.os.Known(); got != c.known {
			t.Errorf("%+v: known %v, want %v", c.os, got, c.known)
		}
	}
	if got := hostos.KnownDistros(); got != "Debian 12 and 13, Ubuntu 24.04, Raspberry Pi OS, Fedora" {
		t.Errorf("hostos.KnownDistros() = %q", got)
	}
}

func TestOSReleaseQuoting(t *testing.T) {
	o := parseOSRelease([]string{`ID="Ubuntu"`, `VERSION_ID='24.04'`, `PRETTY_NAME="A \"quoted\" \$name"`, "junk"})
	if o.ID != "ubuntu" || o.VersionID != "24.04" || o.PrettyName != `A "quoted" $name` {
		t.Errorf("%+v", o)
	}
}

func TestParseSystemd(t *testing.T) {
	for l, want := range map[string]int{"systemd 252 (252.39-1~deb12u2)": 252, "systemd 239 (239-58.el8)": 239, "": 0, "garbage": 0} {
		if got := parseSystemd(l); got != want {
			t.Errorf("%q: %d, want %d", l, got, want)
		}
	}
}

func TestSummary(t *testing.T) {
	f, _ := Parse(nspawnOut)
	if got, want := f.Summary(), "Debian GNU/Linux 12 (bookworm), aarch64, 4 CPUs, 7.7 GiB, systemd 252, container systemd-nspawn"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
