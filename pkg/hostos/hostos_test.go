package hostos

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestIdentify(t *testing.T) {
	for _, tc := range []struct {
		osRelease string
		id        string
		family    Family
		warn      string // substring; "" none
	}{
		{"PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n", "debian", Apt, ""},
		{"ID=debian\nVERSION_ID=\"13\"\n", "debian", Apt, ""},
		{"ID=debian\nVERSION_ID=\"11\"\nPRETTY_NAME=\"Debian GNU/Linux 11 (bullseye)\"", "debian", Apt, "not a release hardway is tested on"},
		{"ID=ubuntu\nVERSION_ID=\"24.04\"\nID_LIKE=debian\n", "ubuntu", Apt, ""},
		{"ID=raspbian\nVERSION_ID=\"12\"\nID_LIKE=debian\n", "raspbian", Apt, ""},
		{"ID=fedora\nVERSION_ID=41\n", "fedora", Dnf, ""},
		{"ID=linuxmint\nID_LIKE=\"ubuntu debian\"\nPRETTY_NAME=\"Linux Mint 22\"\n", "linuxmint", Apt, "Linux Mint 22: not a distribution hardway knows"},
		{"ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", "rocky", Dnf, "not a distribution"},
		{"ID=arch\n", "arch", Unknown, "not a distribution"},
		{"", "", Unknown, "no /etc/os-release"},
	} {
		d, w := Identify(ParseOSRelease(tc.osRelease))
		if d.ID != tc.id || d.Family != tc.family || (tc.warn == "") != (w == "") || !strings.Contains(w, tc.warn) {
			t.Errorf("%q: got %+v %q, want id %q family %q warning ~%q", tc.osRelease, d, w, tc.id, tc.family, tc.warn)
		}
	}
}

func TestInstallCommand(t *testing.T) {
	if got := InstallCommand(Apt, []string{"conntrack", "iptables"}); !strings.HasPrefix(got, "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends conntrack iptables || { apt-get update && ") {
		t.Errorf("apt: %s", got)
	}
	if got := InstallCommand(Dnf, []string{"conntrack-tools"}); got != "dnf install -y conntrack-tools" {
		t.Errorf("dnf: %s", got)
	}
	if got := InstallCommand(Unknown, []string{"x"}); got != "" {
		t.Errorf("unknown: %s", got)
	}
	if PkgConntrack.Name(Dnf) != "conntrack-tools" || PkgIptables.Name(Apt) != "iptables" {
		t.Error("package table")
	}
}

var need = []Port{{6443, "tcp", "kube-apiserver"}, {2379, "tcp", "etcd client"}, {2380, "tcp", "etcd peer"}, {10250, "tcp", "kubelet"}}

func numbers(ps []Port) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.Number)
	}
	return out
}

func TestUfw(t *testing.T) {
	pods := netip.MustParsePrefix("10.200.0.0/16")
	for _, tc := range []struct {
		name, out   string
		closed      []int
		podsBlocked bool
	}{
		{"inactive", "Status: inactive\n", nil, false},
		{"ssh only", `Status: active
Logging: on (low)
Default: deny (incoming), allow (outgoing), deny (routed)
New profiles: skip

To                         Action      From
--                         ------      ----
22/tcp                     ALLOW IN    Anywhere
OpenSSH                    ALLOW IN    Anywhere
22/tcp (v6)                ALLOW IN    Anywhere (v6)
`, []int{6443, 2379, 2380, 10250}, true},
		{"ranges and routes", `Status: active
Default: deny (incoming), allow (outgoing), deny (routed)
To                         Action      From
6443/tcp                   ALLOW IN    Anywhere                   # hardway: kube-apiserver
2379:2380/tcp              ALLOW IN    Anywhere
10250                      ALLOW IN    10.240.0.0/24
10.200.0.0/16              ALLOW FWD   Anywhere                   # hardway: pods
Anywhere                   ALLOW FWD   10.200.0.0/16              # hardway: pods
`, nil, false},
		{"route one way only", `Status: active
Default: deny (incoming), allow (outgoing), deny (routed)
10.200.0.0/16              ALLOW FWD   Anywhere
`, []int{6443, 2379, 2380, 10250}, true},
		{"udp does not open tcp; routed disabled (no forwarding yet) is not allowed", `Status: active
Default: deny (incoming), allow (outgoing), disabled (routed)
6443/udp                   ALLOW IN    Anywhere
`, []int{6443, 2379, 2380, 10250}, true},
		{"allow incoming", "Status: active\nDefault: allow (incoming), allow (outgoing), allow (routed)\n", nil, false},
		{"a source allowed everything", "Status: active\nDefault: deny (incoming), allow (outgoing), deny (routed)\nAnywhere                   ALLOW IN    10.240.0.0/24\n", nil, true},
	} {
		f := ParseUfw(tc.out)
		if got := numbers(f.Closed(need)); !reflect.DeepEqual(got, tc.closed) {
			t.Errorf("%s: closed %v, want %v", tc.name, got, tc.closed)
		}
		if got := f.PodsBlocked(pods); got != tc.podsBlocked {
			t.Errorf("%s: pods blocked %v, want %v", tc.name, got, tc.podsBlocked)
		}
	}
	f := ParseUfw("Status: active\nDefault: deny (incoming), allow (outgoing), deny (routed)\n")
	cmds := f.OpenCommands(need[:1], pods)
	want := []string{"ufw allow 6443/tcp comment 'hardway: kube-apiserver'", "ufw route allow from 10.200.0.0/16 comment 'hardway: pods'", "ufw route allow to 10.200.0.0/16 comment 'hardway: pods'"}
	if !reflect.DeepEqual(cmds, want) {
		t.Errorf("open: %q", cmds)
	}
}

func TestFirewalld(t *testing.T) {
	pods := netip.MustParsePrefix("10.200.0.0/16")
	f := ParseFirewalld("ports 6443/tcp 2379-2380/tcp\nservice ssh 22/tcp\nservice dhcpv6-client\ntrusted\n")
	if got := numbers(f.Closed(need)); !reflect.DeepEqual(got, []int{10250}) {
		t.Errorf("closed %v", got)
	}
	if !f.PodsBlocked(pods) {
		t.Error("pods not blocked without a trusted source")
	}
	if ParseFirewalld("trusted 10.0.0.0/8\n").PodsBlocked(pods) {
		t.Error("pods blocked with a trusted source covering them")
	}
	cmds := f.OpenCommands([]Port{{10250, "tcp", "kubelet"}}, pods)
	want := []string{"firewall-cmd --add-port=10250/tcp", "firewall-cmd --permanent --add-port=10250/tcp",
		"firewall-cmd --zone=trusted --add-source=10.200.0.0/16", "firewall-cmd --permanent --zone=trusted --add-source=10.200.0.0/16"}
	if !reflect.DeepEqual(cmds, want) {
		t.Errorf("open: %q", cmds)
	}
}
