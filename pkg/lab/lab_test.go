package lab

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParseNet(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{"10.240.0", "10.240.0.0/24", ""},
		{"10.240.9.0/24", "10.240.9.0/24", ""},
		{"10.240.0.0/16", "", "whole /24"},
		{"10.240.0.5/24", "", "whole /24"},
		{"10.240", "", "first three octets"},
		{"fd00::", "", "first three octets"},
		{"10.240.300", "", "first three octets"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := parseNet(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseNet(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || p.String() != tt.want {
				t.Fatalf("parseNet(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
			}
		})
	}
}

func TestAddresses(t *testing.T) {
	p := netip.MustParsePrefix("10.240.0.0/24")
	if got := hostAddr(p, 1).String(); got != "10.240.0.11" {
		t.Errorf("hostAddr(1) = %s, want 10.240.0.11", got)
	}
	if got := hostAddr(p, 3).String(); got != "10.240.0.13" {
		t.Errorf("hostAddr(3) = %s, want 10.240.0.13", got)
	}
	if got := bridgeAddr(p).String(); got != "10.240.0.1" {
		t.Errorf("bridgeAddr = %s, want 10.240.0.1", got)
	}
}

func TestRouteOverlapping(t *testing.T) {
	const table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" + // default via 10.0.0.1
		"eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" + // 10.0.0.0/24
		"br1\t0000F00A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n" // 10.240.0.0/16
	tests := []struct {
		net  string
		want string
	}{
		{"10.0.0.0/24", "route 10.0.0.0/24 dev eth0"},
		{"10.240.7.0/24", "route 10.240.0.0/16 dev br1"},
		{"10.241.0.0/24", ""}, // the default route alone does not make a subnet busy
		{"192.168.5.0/24", ""},
	}
	for _, tt := range tests {
		t.Run(tt.net, func(t *testing.T) {
			if got := routeOverlapping(table, netip.MustParsePrefix(tt.net)); got != tt.want {
				t.Errorf("routeOverlapping(%s) = %q, want %q", tt.net, got, tt.want)
			}
		})
	}
}

func TestParseAptSources(t *testing.T) {
	const deb822 = `Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
`
	tests := []struct {
		name   string
		got    []aptCandidate
		want   aptSource
		debian bool
	}{
		{"deb822", parseDeb822(deb822), aptSource{"http://mirror.example/debian", "bookworm"}, true},
		{"deb822 disabled", parseDeb822("Enabled: no\n" + deb822), aptSource{}, false},
		{"deb822 deb-src only", parseDeb822("Types: deb-src\nURIs: http://x/debian\nSuites: bookworm\n"), aptSource{}, false},
		{"one-line with options", parseSourcesList("# c\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian trixie main\n"),
			aptSource{"http://m.example/debian", "trixie"}, true},
		{"one-line skips -updates", parseSourcesList("deb http://m.example/debian bookworm-updates main\ndeb http://m.example/debian bookworm main\n"),
			aptSource{"http://m.example/debian", "bookworm"}, true},
		{"one-line third party", parseSourcesList("deb http://pkgs.example/repo stable main\n"),
			aptSource{"http://pkgs.example/repo", "stable"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == (aptSource{}) {
				if len(tt.got) != 0 {
					t.Fatalf("got %+v, want no candidate", tt.got)
				}
				return
			}
			if len(tt.got) == 0 || tt.got[0].aptSource != tt.want || tt.got[0].debian != tt.debian {
				t.Fatalf("got %+v, want %+v (debian %v)", tt.got, tt.want, tt.debian)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{}, ""},
		{"too many hosts", Config{Hosts: 21}, "--hosts 21"},
		{"negative hosts", Config{Hosts: -1}, "--hosts -1"},
		{"prefix too long for a veth name", Config{Prefix: "abcdefg"}, "--prefix"},
		{"prefix with a dash", Config{Prefix: "a-b"}, "--prefix"},
		{"bad net", Config{Net: "10.1"}, "--net"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range l.plannedHosts() {
					if len(h.Veth) > 15 {
						t.Errorf("veth name %q longer than 15 bytes", h.Veth)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New() error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestPlannedHostsLongestNames(t *testing.T) {
	l, err := New(Config{Prefix: "abcdef", Hosts: 20, Net: "10.240.9"})
	if err != nil {
		t.Fatal(err)
	}
	hs := l.plannedHosts()
	last := hs[len(hs)-1]
	if last.Name != "controller-20" || last.Address != "10.240.9.30" || len(last.Veth) > 15 {
		t.Fatalf("last host = %+v", last)
	}
}

// The inventory's keys are the ones pkg/inventory reads; a typo here would
// only show when `hardway up` rejects the lab's own file.
func TestRenderInventory(t *testing.T) {
	l, err := New(Config{Mirror: "/srv/mirror"})
	if err != nil {
		t.Fatal(err)
	}
	text := renderInventory(l.cfg, []Host{{"controller-1", "10.240.0.11"}, {"controller-2", "10.240.0.12"}})
	var got struct {
		Cluster           string `yaml:"cluster"`
		KubernetesVersion string `yaml:"kubernetesVersion"`
		EtcdVersion       string `yaml:"etcdVersion"`
		Arch              string `yaml:"arch"`
		SSH               struct {
			User           string `yaml:"user"`
			Port           int    `yaml:"port"`
			IdentityFile   string `yaml:"identityFile"`
			KnownHostsFile string `yaml:"knownHostsFile"`
		} `yaml:"ssh"`
		Releases struct {
			Kubernetes string `yaml:"kubernetes"`
			Etcd       string `yaml:"etcd"`
		} `yaml:"releases"`
		ControlPlane []struct {
			Name    string `yaml:"name"`
			Address string `yaml:"address"`
		} `yaml:"controlPlane"`
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode:\n%s\n%v", text, err)
	}
	checks := []struct{ name, got, want string }{
		{"cluster", got.Cluster, "lab"},
		{"kubernetesVersion", got.KubernetesVersion, "v1.36.3"},
		{"etcdVersion", got.EtcdVersion, "v3.6.16"},
		{"arch", got.Arch, runtime.GOARCH},
		{"ssh.user", got.SSH.User, "root"},
		{"ssh.identityFile", got.SSH.IdentityFile, "id_ed25519"},
		{"ssh.knownHostsFile", got.SSH.KnownHostsFile, "known_hosts"},
		{"releases.kubernetes", got.Releases.Kubernetes, "file:///srv/mirror/kubernetes"},
		{"releases.etcd", got.Releases.Etcd, "file:///srv/mirror/etcd"},
		{"controlPlane[1].name", got.ControlPlane[1].Name, "controller-2"},
		{"controlPlane[1].address", got.ControlPlane[1].Address, "10.240.0.12"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if got.SSH.Port != 22 || len(got.ControlPlane) != 2 {
		t.Errorf("port %d, %d hosts", got.SSH.Port, len(got.ControlPlane))
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/var/tmp/a\040b`: "/var/tmp/a b",
		`/plain`:          "/plain",
		`/tab\011x`:       "/tab\tx",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadProcStatSelf(t *testing.T) {
	st, ok := readProcStat(1)
	if !ok || st.start == 0 && st.state == 0 {
		t.Fatalf("readProcStat(1) = %+v, %v", st, ok)
	}
	if alive(1<<30, 0) {
		t.Error("alive(no such pid) = true")
	}
	if alive(1, st.start+1) {
		t.Error("alive with a different start time = true: a reused PID would be signalled")
	}
}
