package initinv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/hostprobe"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
)

var debian12 = hostprobe.OSRelease{ID: "debian", VersionID: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}

// host is the facts of a Debian 12 amd64 host at addr/24.
func host(name, addr string) hostprobe.Facts {
	return hostprobe.Facts{
		Hostname: name, ReachedAt: addr, Machine: "x86_64", Arch: "amd64", OS: debian12,
		CPUs: 2, MemoryKiB: 4 << 20, Systemd: 252,
		Addresses: []hostprobe.Address{
			{Interface: "lo", Prefix: netip.MustParsePrefix("127.0.0.1/8")},
			{Interface: "eth0", Prefix: netip.MustParsePrefix(addr + "/24")},
		},
		Routes: []hostprobe.Route{{Dest: netip.MustParsePrefix(addr + "/24").Masked(), Line: "kernel route"}},
	}
}

// build runs Build for specs and facts with the file at dir/inventory.yaml,
// writes the file and loads it as 'hardway up' would.
func build(t *testing.T, dir string, specs []string, facts []hostprobe.Facts, flags SSHFlags, like *Like, controllers, workers int) (*Result, *inventory.Inventory) {
	t.Helper()
	targets, err := ParseTargets(specs)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "inventory.yaml")
	conn, err := Connection(targets, flags, like, out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(Input{Targets: targets, Facts: facts, Conn: conn, Like: like, Display: out, Controllers: controllers, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, r.YAML, 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(out)
	if err != nil {
		t.Fatalf("the written file does not load: %v\n%s", err, r.YAML)
	}
	return r, inv
}

func contains(t *testing.T, what string, all []string, want ...string) {
	t.Helper()
	joined := strings.Join(all, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("%s lack %q:\n%s", what, w, joined)
		}
	}
}

func TestBuildWritesAFileThatLoads(t *testing.T) {
	dir := t.TempDir()
	nspawn := host("lab-w1", "10.0.0.14")
	nspawn.Container = "systemd-nspawn"
	pi := host("pi", "10.0.0.13")
	pi.Machine, pi.Arch = "aarch64", "arm64"
	pi.OS = hostprobe.OSRelease{ID: "raspbian", VersionID: "12", PrettyName: "Raspbian GNU/Linux 12 (bookworm)"}
	alpine := host("edge", "10.0.0.15")
	alpine.OS = hostprobe.OSRelease{ID: "alpine", VersionID: "3.20.1", PrettyName: "Alpine Linux v3.20"}
	old := host("CTL-2", "10.0.0.12")
	old.Systemd = 245
	// A host that has the pod default routed already (another cluster's
	// pod routes) and docker's bridge.
	c1 := host("ctl-1", "10.0.0.11")
	c1.Addresses = append(c1.Addresses, hostprobe.Address{Interface: "docker0", Prefix: netip.MustParsePrefix("172.17.0.1/16")})
	c1.Routes = append(c1.Routes, hostprobe.Route{Dest: netip.MustParsePrefix("10.200.1.0/24"), Line: "10.200.1.0/24 via 10.0.0.12 dev eth0"})
	facts := []hostprobe.Facts{c1, old, host("ctl-3", "10.0.0.16"), pi, nspawn, alpine}
	specs := []string{"root@10.0.0.11", "root@10.0.0.12", "10.0.0.16", "pi@10.0.0.13", "root@10.0.0.14:2222", "root@10.0.0.15"}

	r, inv := build(t, dir, specs, facts, SSHFlags{IdentityFile: "id_test"}, nil, 0, -1)

	var cp, ws []string
	for _, h := range inv.ControlPlane {
		cp = append(cp, h.Name+"="+h.Address)
	}
	for _, h := range inv.Workers {
		ws = append(ws, h.Name+"="+h.Address)
	}
	if got := strings.Join(cp, " "); got != "ctl-1=10.0.0.11 ctl-2=10.0.0.12 ctl-3=10.0.0.16" {
		t.Errorf("controlPlane %s", got)
	}
	if got := strings.Join(ws, " "); got != "pi=10.0.0.13 lab-w1=10.0.0.14 edge=10.0.0.15" {
		t.Errorf("workers %s", got)
	}
	if inv.Network.PodCIDR != "10.201.0.0/16" || inv.Network.ServiceCIDR != "10.32.0.0/24" || r.PodCIDR != inv.Network.PodCIDR {
		t.Errorf("pod %s service %s", inv.Network.PodCIDR, inv.Network.ServiceCIDR)
	}
	if inv.Arch != "amd64" || !r.MixedArch {
		t.Errorf("arch %s mixed %v", inv.Arch, r.MixedArch)
	}
	// containerHost on the container only.
	for _, h := range inv.Hosts() {
		if h.ContainerHost != (h.Name == "lab-w1") {
			t.Errorf("%s: containerHost %v", h.Name, h.ContainerHost)
		}
	}
	// ssh: root for most, pi for one; the identity file relative to the
	// file, which is in another directory than the test's.
	pis := inv.SSHFor(inv.Workers[0])
	w1 := inv.SSHFor(inv.Workers[1])
	if inv.SSH.User != "root" || pis.User != "pi" || w1.Port != 2222 || inv.SSH.Port != 22 {
		t.Errorf("ssh %+v, pi %+v, lab-w1 %+v", inv.SSH, pis, w1)
	}
	cwd, _ := os.Getwd()
	if inv.SSH.IdentityFile != filepath.Join(cwd, "id_test") {
		t.Errorf("identityFile %q: not where the flag named it", inv.SSH.IdentityFile)
	}
	y := string(r.YAML)
	for _, want := range []string{
		"# this host is arm64 (uname -m: aarch64): the cluster mixes architectures, arch above is amd64\n  - name: pi\n",
		"arch: amd64 # the most common; the cluster mixes architectures (see the hosts)\n",
		"containerHost: true # systemd-detect-virt --container says systemd-nspawn; never set it on a real host",
		"podCIDR: 10.201.0.0/16 # the default 10.200.0.0/16 overlaps 10.200.1.0/24 (ctl-1's route \"10.200.1.0/24 via 10.0.0.12 dev eth0\")",
		"serviceCIDR: 10.32.0.0/24 # the default: no host has an address in it or a route to it",
		"# root@10.0.0.12: Debian GNU/Linux 12 (bookworm), x86_64, 2 CPUs, 4.0 GiB, systemd 245; host name CTL-2\n",
		"# etcd and the Kubernetes control plane run here",
		"# Left at their defaults: pki,",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("the file lacks %q:\n%s", want, y)
		}
	}
	contains(t, "guesses", r.Guesses,
		"roles: the first 3 hosts run the control plane (etcd keeps quorum with one down), the other 3 hosts are workers",
		"name ctl-2 for root@10.0.0.12: its host name \"CTL-2\" made a DNS-1123 label",
		"podCIDR 10.201.0.0/16: the default 10.200.0.0/16 overlaps",
		"serviceCIDR 10.32.0.0/24, the default",
		"arch amd64, the most common: the cluster mixes architectures (amd64 on ctl-1, ctl-2, ctl-3, lab-w1, edge; arm64 on pi)",
		"pi (pi@10.0.0.13): worker, Raspbian GNU/Linux 12 (bookworm), aarch64",
		"containerHost on lab-w1: systemd-detect-virt --container says systemd-nspawn",
	)
	contains(t, "warnings", r.Warnings,
		"edge: Alpine Linux v3.20 is not a distribution hardway knows (Debian 12 and 13, Ubuntu 24.04, Raspberry Pi OS, Fedora); it may work",
		"ctl-2: systemd 245: a control-plane host needs 247 or later",
	)
	if len(r.Warnings) != 2 {
		t.Errorf("warnings %q", r.Warnings)
	}
}

func TestBuildSmallClusters(t *testing.T) {
	// One host: the control plane alone, arch from it.
	arm := host("solo", "192.168.1.5")
	arm.Machine, arm.Arch = "aarch64", "arm64"
	r, inv := build(t, t.TempDir(), []string{"192.168.1.5"}, []hostprobe.Facts{arm}, SSHFlags{}, nil, 0, -1)
	if len(inv.ControlPlane) != 1 || len(inv.Workers) != 0 || inv.Arch != "arm64" || r.MixedArch {
		t.Errorf("%+v %s", inv.ControlPlane, inv.Arch)
	}
	if strings.Contains(string(r.YAML), "workers:") {
		t.Errorf("an empty workers:\n%s", r.YAML)
	}
	contains(t, "guesses", r.Guesses, "arch arm64: every host is aarch64")
	// An armv7l host: no binaries for it, a warning, no vote for arch.
	armv7 := host("old-pi", "192.168.1.6")
	armv7.Machine, armv7.Arch = "armv7l", ""
	r, inv = build(t, t.TempDir(), []string{"192.168.1.5", "192.168.1.6"}, []hostprobe.Facts{arm, armv7}, SSHFlags{}, nil, 0, -1)
	if inv.Arch != "arm64" || r.MixedArch {
		t.Errorf("arch %s mixed %v", inv.Arch, r.MixedArch)
	}
	contains(t, "guesses", r.Guesses, "arch arm64: every host hardway has binaries for is aarch64 (uname -m)")
	contains(t, "warnings", r.Warnings, "old-pi: uname -m says armv7l: hardway has binaries for amd64 (x86_64) and arm64 (aarch64) only")
	if y := string(r.YAML); !strings.Contains(y, "# uname -m: armv7l: hardway has no binaries for this architecture\n  - name: old-pi") ||
		!strings.Contains(y, "arch: arm64 # every host hardway has binaries for is aarch64 (uname -m)") {
		t.Errorf("%s", y)
	}
	// Two hosts: one controller, never two; --controllers 2 on purpose is
	// the loader's warning.
	two := []hostprobe.Facts{host("a", "10.0.0.1"), host("b", "10.0.0.2")}
	_, inv = build(t, t.TempDir(), []string{"10.0.0.1", "10.0.0.2"}, two, SSHFlags{}, nil, 0, -1)
	if len(inv.ControlPlane) != 1 || len(inv.Workers) != 1 {
		t.Errorf("2 hosts: %d controllers", len(inv.ControlPlane))
	}
	r, _ = build(t, t.TempDir(), []string{"10.0.0.1", "10.0.0.2"}, two, SSHFlags{}, nil, 2, -1)
	contains(t, "warnings", r.Warnings, "controlPlane: an even number of control-plane hosts (2)")
}

func TestBuildAddresses(t *testing.T) {
	// Reached by name: the address is what its sshd saw.
	byName := host("n1", "10.0.0.21")
	// Reached through a NAT: it has the address its sshd saw, the other
	// hosts reach it there.
	nat := host("n2", "10.0.0.22")
	r, inv := build(t, t.TempDir(), []string{"n1.lan", "203.0.113.7"}, []hostprobe.Facts{byName, nat}, SSHFlags{}, nil, 0, -1)
	if a := inv.ControlPlane[0].Address; a != "10.0.0.21" {
		t.Errorf("by name: address %s", a)
	}
	if w := inv.Workers[0]; w.Address != "203.0.113.7" || w.InternalAddress != "10.0.0.22" {
		t.Errorf("nat: %+v", w)
	}
	contains(t, "guesses", r.Guesses, "address 10.0.0.21 for n1: n1.lan is a name", "internalAddress 10.0.0.22 for n2")
	// Behind port forwards of one address (VMs on 127.0.0.1:2222 and
	// :2200) the hosts have no address of their own to write.
	a, b := host("v1", "10.0.2.15"), host("v2", "10.0.2.15")
	targets, _ := ParseTargets([]string{"127.0.0.1:2222", "127.0.0.1:2200"})
	conn, _ := Connection(targets, SSHFlags{}, nil, "")
	if _, err := Build(Input{Targets: targets, Facts: []hostprobe.Facts{a, b}, Conn: conn, Workers: -1}); err == nil || !strings.Contains(err.Error(), "both reached at 127.0.0.1") {
		t.Errorf("err %v", err)
	}
	// A name with no $SSH_CONNECTION: no IP to write.
	c := host("v3", "10.0.0.9")
	c.ReachedAt = ""
	targets, _ = ParseTargets([]string{"v3.lan"})
	conn, _ = Connection(targets, SSHFlags{}, nil, "")
	if _, err := Build(Input{Targets: targets, Facts: []hostprobe.Facts{c}, Conn: conn, Workers: -1}); err == nil || !strings.Contains(usererr.HintOf(err), "IP address") {
		t.Errorf("err %v", err)
	}
}

func testCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mirror CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// likeFile is a lab's inventory: mirrors, images, registries with a CA,
// its own SSH key and known_hosts, all relative to it.
const likeFile = `# Written by 'hardway lab up' for the lab hosts; 'hardway lab down' removes it.
cluster: lab
kubernetesVersion: v1.35.4   # pinned on purpose
etcdVersion: v3.6.16
arch: arm64
ssh:
  user: root
  port: 22
  identityFile: ssh/id_ed25519
  knownHostsFile: ssh/known_hosts
  sudo: false
network:
  serviceCIDR: 10.32.0.0/24
  podCIDR: 10.200.0.0/16
  clusterDomain: lab.local
  apiServerEndpoint: 10.240.0.10:6443
releases:
  kubernetes: file:///srv/mirror/kubernetes  # the lab's mirror
  etcd: file:///srv/mirror/etcd
# the lab has no registry
registries:
  - name: registry.k8s.io
    mirrors:
      - url: https://mirror.example.internal:5000
        ca: certs/mirror-ca.pem
images:
  - name: registry.k8s.io/pause:3.10.2
    url: file:///srv/mirror/images/pause-3.10.2.tar
    sha256: 0000000000000000000000000000000000000000000000000000000000000000
dns:
  upstream: [10.240.0.1]
podSecurity:
  enforce: restricted
controlPlane:
  - name: controller-1
    address: 10.240.0.11
workers:
  - name: worker-1
    address: 10.240.0.21
    containerHost: true
`

func TestBuildLike(t *testing.T) {
	labDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(labDir, "certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	testCA(t, filepath.Join(labDir, "certs", "mirror-ca.pem"))
	likePath := filepath.Join(labDir, "inventory.yaml")
	if err := os.WriteFile(likePath, []byte(likeFile), 0o644); err != nil {
		t.Fatal(err)
	}
	like, err := LoadLike(likePath)
	if err != nil {
		t.Fatal(err)
	}
	facts := []hostprobe.Facts{host("c1", "10.9.0.11"), host("w1", "10.9.0.21")}
	// The new file is elsewhere: the like file's relative paths must
	// still name the same files.
	outDir := t.TempDir()
	r, inv := build(t, outDir, []string{"10.9.0.11", "10.9.0.21"}, facts, SSHFlags{Port: 2222}, like, 0, -1)

	// Everything but the hosts, the ranges and arch is the lab's.
	if inv.Cluster != "lab" || inv.KubernetesVersion != "v1.35.4" || inv.EtcdVersion != "v3.6.16" ||
		inv.Releases.Kubernetes != "file:///srv/mirror/kubernetes" || len(inv.Images) != 1 || len(inv.Registries) != 1 ||
		inv.Network.ClusterDomain != "lab.local" || inv.PodSecurity.Enforce != "restricted" || len(inv.DNS.Upstream) != 1 ||
		inv.SSH.Sudo == nil || *inv.SSH.Sudo {
		t.Errorf("settings not taken from the like file: %+v", inv)
	}
	if inv.Arch != "amd64" || inv.SSH.Port != 2222 {
		t.Errorf("arch %s (the hosts'), port %d (the flag's)", inv.Arch, inv.SSH.Port)
	}
	s := inv.SSHFor(inv.ControlPlane[0])
	if s.IdentityFile != filepath.Join(labDir, "ssh/id_ed25519") || s.KnownHostsFile != filepath.Join(labDir, "ssh/known_hosts") {
		t.Errorf("ssh paths %+v", s)
	}
	if len(inv.Registries[0].Mirrors[0].CAData) == 0 {
		t.Error("the mirror CA was not found from the new file")
	}
	if len(inv.ControlPlane) != 1 || inv.ControlPlane[0].Name != "c1" || len(inv.Workers) != 1 || inv.Workers[0].Name != "w1" || inv.Workers[0].ContainerHost {
		t.Errorf("hosts %+v %+v", inv.ControlPlane, inv.Workers)
	}
	y := string(r.YAML)
	for _, want := range []string{
		"kubernetesVersion: v1.35.4 # pinned on purpose",
		"kubernetes: file:///srv/mirror/kubernetes # the lab's mirror",
		"# the lab has no registry\nregistries:",
		"Every setting but the hosts, the address ranges and arch is " + likePath + "'s.",
		"# Where the binaries come from",
	} {
		if !strings.Contains(y, want) {
			t.Errorf("the file lacks %q:\n%s", want, y)
		}
	}
	for _, gone := range []string{"hardway lab up", "controller-1", "10.240.0.21", "Left at their defaults"} {
		if strings.Contains(y, gone) {
			t.Errorf("the file still has %q:\n%s", gone, y)
		}
	}
	contains(t, "guesses", r.Guesses, "arch amd64 from the hosts, not "+likePath+"'s arm64", "every other setting is "+likePath+"'s")
	contains(t, "warnings", r.Warnings, "network.apiServerEndpoint 10.240.0.10:6443 is "+likePath+"'s")

	// Built twice from one Like: the same file.
	r2, _ := build(t, outDir, []string{"10.9.0.11", "10.9.0.21"}, facts, SSHFlags{Port: 2222}, like, 0, -1)
	if string(r2.YAML) != y {
		t.Error("a second Build from the same Like differs")
	}
}

func TestLoadLikeRefusesABrokenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(p, []byte("controlPlane:\n  - name: c1\n    adress: 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadLike(p)
	if err == nil || usererr.CodeOf(err) != usererr.CodeInventory || !strings.Contains(err.Error(), p+":3:5: controlPlane[0].adress: unknown key") {
		t.Fatalf("err %v", err)
	}
}

func TestConnection(t *testing.T) {
	targets, err := ParseTargets([]string{"pi@10.0.0.1", "pi@10.0.0.2", "root@10.0.0.3", "10.0.0.4:2200"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conn, err := Connection(targets, SSHFlags{Port: 2222, KnownHostsFile: "/etc/ssh/hardway_known_hosts", Bastion: "admin@jump:22"}, nil, filepath.Join(dir, "inv.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The most common user is the inventory's (a tie: the first host's);
	// the others per host, root for a host without one (the default).
	if conn.SSH.User != "pi" || conn.SSH.Port != 2222 || conn.SSH.Bastion != "admin@jump:22" || conn.Path != filepath.Join(dir, "inv.yaml") {
		t.Errorf("%+v %s", conn.SSH, conn.Path)
	}
	var got []string
	for _, h := range conn.ControlPlane {
		s := conn.SSHFor(h)
		got = append(got, h.Address+"="+s.User+":"+strconv.Itoa(s.Port))
	}
	if strings.Join(got, " ") != "10.0.0.1=pi:2222 10.0.0.2=pi:2222 10.0.0.3=root:2222 10.0.0.4=root:2200" {
		t.Errorf("%v", got)
	}
	if conn.ControlPlane[0].SSH != nil || conn.ControlPlane[2].SSH.User != "root" {
		t.Errorf("overrides %+v %+v", conn.ControlPlane[0].SSH, conn.ControlPlane[2].SSH)
	}
	if _, err := Connection(targets, SSHFlags{Port: 70000}, nil, ""); usererr.CodeOf(err) != usererr.CodeUsage {
		t.Errorf("port 70000: %v", err)
	}
}

func TestRebase(t *testing.T) {
	for _, c := range []struct{ p, from, to, want string }{
		{"ssh/id", "/lab", "/lab", "ssh/id"},
		{"ssh/id", "/lab", "/lab/sub", "/lab/ssh/id"}, // outside the new file's tree: absolute
		{"ssh/id", "/lab", "/", "lab/ssh/id"},
		{"/abs/id", "/lab", "/x", "/abs/id"},
		{"~/.ssh/id", "/lab", "/x", "~/.ssh/id"},
		{"", "/lab", "/x", ""},
	} {
		if got := rebase(c.p, c.from, c.to); got != c.want {
			t.Errorf("rebase(%q, %q, %q) = %q, want %q", c.p, c.from, c.to, got, c.want)
		}
	}
}
