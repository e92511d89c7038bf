package lab

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/inventory"
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
		{"workers", Config{Workers: 2}, ""},
		{"too many workers", Config{Workers: 21}, "--workers 21"},
		{"negative workers", Config{Workers: -1}, "--workers -1"},
		{"controllers would reach the workers' addresses", Config{Hosts: 11, Workers: 1}, "at most 10 hosts"},
		{"many controllers without workers", Config{Hosts: 20}, ""},
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
	text := renderInventory(l.cfg, l.MirrorURL(), []Host{{"controller-1", "10.240.0.11"}, {"controller-2", "10.240.0.12"}}, []Host{{"worker-1", "10.240.0.21"}})
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
			Containerd string `yaml:"containerd"`
			Runc       string `yaml:"runc"`
			CNIPlugins string `yaml:"cniPlugins"`
			Crictl     string `yaml:"crictl"`
			Traefik    string `yaml:"traefik"`
		} `yaml:"releases"`
		Network struct {
			ServiceCIDR string `yaml:"serviceCIDR"`
		} `yaml:"network"`
		ControlPlane []struct {
			Name    string `yaml:"name"`
			Address string `yaml:"address"`
		} `yaml:"controlPlane"`
		Workers []struct {
			Name          string `yaml:"name"`
			Address       string `yaml:"address"`
			ContainerHost bool   `yaml:"containerHost"`
		} `yaml:"workers"`
		Images []struct {
			Name string `yaml:"name"`
			URL  string `yaml:"url"`
		} `yaml:"images"`
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
		{"network.serviceCIDR", got.Network.ServiceCIDR, ServiceCIDR},
		{"releases.containerd", got.Releases.Containerd, "file:///srv/mirror/containerd"},
		{"releases.runc", got.Releases.Runc, "file:///srv/mirror/runc"},
		{"releases.cniPlugins", got.Releases.CNIPlugins, "file:///srv/mirror/cni-plugins"},
		{"releases.crictl", got.Releases.Crictl, "file:///srv/mirror/crictl"},
		{"releases.traefik", got.Releases.Traefik, "file:///srv/mirror/traefik"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if got.SSH.Port != 22 || len(got.ControlPlane) != 2 {
		t.Errorf("port %d, %d hosts", got.SSH.Port, len(got.ControlPlane))
	}
	if len(got.Workers) != 1 || got.Workers[0].Name != "worker-1" || got.Workers[0].Address != "10.240.0.21" || !got.Workers[0].ContainerHost {
		t.Errorf("workers = %+v", got.Workers)
	}
	// and hardway's own loader takes it
	inv, err := inventory.Parse("inventory.yaml", "/lab/inventory.yaml", []byte(text))
	if err != nil {
		t.Fatalf("the lab's inventory does not load:\n%s\n%v", text, err)
	}
	if len(inv.Workers) != 1 || !inv.Workers[0].ContainerHost || inv.Network.ServiceNet().String() != ServiceCIDR {
		t.Errorf("loaded: workers %+v, service CIDR %s", inv.Workers, inv.Network.ServiceNet())
	}
	if len(got.Images) != 3 || got.Images[0].Name != "registry.k8s.io/pause:3.10.2" ||
		got.Images[0].URL != "file:///srv/mirror/images/pause-3.10.2.tar" {
		t.Errorf("images = %+v", got.Images)
	}
	if len(inv.Images) != 3 || inv.Releases.Crictl != "file:///srv/mirror/crictl" {
		t.Errorf("loaded: images %+v, releases %+v", inv.Images, inv.Releases)
	}
	if text := renderInventory(l.cfg, l.MirrorURL(), []Host{{"controller-1", "10.240.0.11"}}, nil); strings.Contains(text, "workers:") || strings.Contains(text, "images:") {
		t.Error("an inventory without workers has workers or images")
	}
	if inv.Releases.FetchOn != inventory.FetchOnOperator || inv.Releases.AllowHTTP {
		t.Errorf("default lab: fetchOn %q, allowHTTP %v", inv.Releases.FetchOn, inv.Releases.AllowHTTP)
	}
}

// lab up --fetch-on hosts: every release and image on the lab's mirror
// server, which only plain http serves there, and the hosts fetch.
func TestRenderInventoryFetchOnHosts(t *testing.T) {
	l, err := New(Config{Mirror: "/srv/mirror", Net: "10.240.7", FetchOnHosts: true})
	if err != nil {
		t.Fatal(err)
	}
	if !l.cfg.ServeMirror || l.MirrorURL() != "http://10.240.7.1:18780" {
		t.Fatalf("serve %v at %s", l.cfg.ServeMirror, l.MirrorURL())
	}
	text := renderInventory(l.cfg, l.MirrorURL(), []Host{{"controller-1", "10.240.7.11"}}, []Host{{"worker-1", "10.240.7.21"}})
	inv, err := inventory.Parse("inventory.yaml", "/lab/inventory.yaml", []byte(text))
	if err != nil {
		t.Fatalf("the lab's inventory does not load:\n%s\n%v", text, err)
	}
	r := inv.Releases
	if r.FetchOn != inventory.FetchOnHosts || !r.AllowHTTP || r.Kubernetes != "http://10.240.7.1:18780/kubernetes" ||
		r.Traefik != "http://10.240.7.1:18780/traefik" || inv.Images[0].URL != "http://10.240.7.1:18780/images/pause-3.10.2.tar" {
		t.Errorf("releases %+v, images %+v", r, inv.Images)
	}
	if strings.Contains(text, "file://") {
		t.Errorf("a file:// URL left:\n%s", text)
	}
}

func TestPlannedHostsWithWorkers(t *testing.T) {
	l, err := New(Config{Prefix: "abcdef", Hosts: 10, Workers: 20, Net: "10.240.9"})
	if err != nil {
		t.Fatal(err)
	}
	hs := l.plannedHosts()
	if len(hs) != 30 {
		t.Fatalf("%d hosts, want 30", len(hs))
	}
	seen := map[string]bool{}
	for _, h := range hs {
		for i, k := range []string{h.Name, h.Address, h.Veth, h.Netns, h.Machine, h.Dir} {
			if key := fmt.Sprint(i, k); seen[key] {
				t.Errorf("%s: %q used twice", h.Name, k)
			} else {
				seen[key] = true
			}
		}
		if len(h.Veth) > 15 {
			t.Errorf("veth name %q longer than 15 bytes", h.Veth)
		}
	}
	w := hs[10]
	if w.Name != "worker-1" || w.Role != RoleWorker || w.Address != "10.240.9.21" || !w.worker() {
		t.Errorf("first worker = %+v", w)
	}
	if last := hs[29]; last.Name != "worker-20" || last.Address != "10.240.9.40" {
		t.Errorf("last worker = %+v", last)
	}
	if hs[9].worker() || hs[9].Address != "10.240.9.20" {
		t.Errorf("last controller = %+v", hs[9])
	}
}

// A base built from another package list must not be reused.
func TestBaseKeyFollowsPackages(t *testing.T) {
	k := baseKey("bookworm", basePackages)
	if k != baseKey("bookworm", slices.Clone(basePackages)) {
		t.Fatal("baseKey is not stable")
	}
	rev := slices.Clone(basePackages)
	slices.Reverse(rev)
	if baseKey("bookworm", rev) != k {
		t.Error("baseKey depends on the order of the packages")
	}
	if baseKey("bookworm", basePackages[1:]) == k || baseKey("bookworm", append(slices.Clone(basePackages), "vim")) == k {
		t.Error("baseKey ignores the package list")
	}
	for _, p := range []string{"iptables", "nftables", "conntrack", "socat", "iproute2", "kmod", "procps", "ca-certificates"} {
		if !slices.Contains(basePackages, p) {
			t.Errorf("base lacks %s, which a worker needs", p)
		}
	}
	if baseKey("trixie", basePackages) == k || !strings.HasPrefix(baseKey("trixie", basePackages), "trixie-") {
		t.Error("baseKey does not follow the suite")
	}
}

func TestHierarchies(t *testing.T) {
	const procCgroup = `12:net_cls,net_prio:/
11:name=systemd:/user.slice/s1
4:memory:/process_api/f3
3:cpuset:/
2:cpu,cpuacct:/
1:perf_event:/
0::/user.slice/s1
`
	const mountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpuacct,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset,clone_children
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/net_cls,net_prio rw,relatime - cgroup cgroup rw,net_cls,net_prio
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
90 23 0:32 /process_api /mnt/elsewhere rw,relatime - cgroup cgroup rw,memory
`
	got := hierarchies(procCgroup, mountinfo)
	want := []hierarchy{
		{"net_cls,net_prio", "/sys/fs/cgroup/net_cls,net_prio", "/"},
		{"name=systemd", "/sys/fs/cgroup/systemd", "/user.slice/s1"},
		{"memory", "/sys/fs/cgroup/memory", "/process_api/f3"},
		{"cpuset", "/sys/fs/cgroup/cpuset", "/"},
		{"cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/"},
		// perf_event is not mounted: left out
		{"", "/sys/fs/cgroup/unified", "/user.slice/s1"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("hierarchies =\n%+v\nwant\n%+v", got, want)
	}
	// a hierarchy mounted with a root of its own (as inside a container)
	got = hierarchies("4:memory:/process_api/f3\n", "90 23 0:32 /process_api /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
	if want := []hierarchy{{"memory", "/sys/fs/cgroup/memory", "/f3"}}; !slices.Equal(got, want) {
		t.Errorf("with a mount root: %+v, want %+v", got, want)
	}
}

// The sysctl mask shows exactly kubelet's values, and only worker files are written.
func TestWorkerFiles(t *testing.T) {
	var mask string
	for _, f := range workerFiles() {
		if !strings.HasPrefix(f.path, "/") {
			t.Errorf("%s: not absolute", f.path)
		}
		if strings.HasSuffix(f.path, "/sysctl-mask") {
			mask = f.data
		}
	}
	for _, w := range []string{"want vm/overcommit_memory 1\n", "want kernel/panic 10\n", "want kernel/panic_on_oops 1\n", "mount --bind -o ro"} {
		if !strings.Contains(mask, w) {
			t.Errorf("sysctl-mask lacks %q:\n%s", w, mask)
		}
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
