package units

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/inventory"
)

// labOnly are the settings only a container host needs. They must never
// reach a host without containerHost: true.
var labOnly = []string{"failCgroupV1", "restrict_oom_score_adj", "NoNewKeyring", "conntrack-max-per-core",
	"imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "evictionHard", "imagefs.", "nodefs.", "memory.available"}

func workerInventory(t testing.TB, k8s, network string, containerHost bool) *inventory.Inventory {
	t.Helper()
	src := fmt.Sprintf(`cluster: lab
kubernetesVersion: %q
network: {%s}
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21, containerHost: %v}
  - {name: worker-2, address: 10.240.0.22, containerHost: %v}
`, k8s, network, containerHost, containerHost)
	inv, err := inventory.Parse("inventory.yaml", "/nonexistent/inventory.yaml", []byte(src))
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	return inv
}

// containerHost on and off differ only in the lab-only settings, on the
// workers only, and without it none of them appears anywhere.
func TestContainerHostOnlyAddsLabSettings(t *testing.T) {
	for _, v := range supported {
		t.Run(v.k8s, func(t *testing.T) {
			off, err := render(t, workerInventory(t, v.k8s, "", false))
			if err != nil {
				t.Fatal(err)
			}
			on, err := render(t, workerInventory(t, v.k8s, "", true))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i := range off {
				for _, f := range off[i].Files {
					for _, s := range labOnly {
						if bytes.Contains(f.Content, []byte(s)) {
							t.Errorf("%s %s: %s without containerHost", off[i].Host, f.Path, s)
						}
					}
					g, ok := on[i].File(f.Path)
					if !ok {
						t.Errorf("%s %s: gone with containerHost", off[i].Host, f.Path)
						continue
					}
					for _, l := range diffLines(f.Content, g.Content) {
						// The TOML table that holds restrict_oom_score_adj appears with it.
						if l == "" || l == "[plugins.'io.containerd.cri.v1.runtime']" {
							continue
						}
						if !containsAny(l, labOnly) {
							t.Errorf("%s %s: containerHost changed %q", off[i].Host, f.Path, l)
						}
						for _, s := range labOnly {
							seen[s] = seen[s] || strings.Contains(l, s)
						}
					}
				}
				if len(on[i].Files) != len(off[i].Files) {
					t.Errorf("%s: %d files with containerHost, %d without", on[i].Host, len(on[i].Files), len(off[i].Files))
				}
			}
			for _, s := range labOnly {
				// failCgroupV1 exists from 1.31; before, cgroup v1 needs nothing.
				want := s != "failCgroupV1" || v.k8s != "1.30"
				if seen[s] != want {
					t.Errorf("containerHost: %s rendered=%v, want %v", s, seen[s], want)
				}
			}
		})
	}
}

// diffLines are the lines of b not in a.
func diffLines(a, b []byte) []string {
	have := map[string]int{}
	for _, l := range strings.Split(string(a), "\n") {
		have[l]++
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if have[l] > 0 {
			have[l]--
			continue
		}
		out = append(out, l)
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// Every worker and control-plane host routes every other worker's subnet
// via that worker; nothing routes a worker's own subnet; cni none: no
// routes, no CNI config, no bridge plugins, and the controller-manager
// allocates node CIDRs.
func TestPodRoutesAndCNI(t *testing.T) {
	inv := workerInventory(t, "1.36", "", false)
	pods := subnets(t, inv)
	ms, err := Render(inv, pods)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		u, ok := m.File(UnitPath(PodRoutes))
		if !ok {
			t.Fatalf("%s: no %s", m.Host, PodRoutes)
		}
		opts, err := unit.DeserializeOptions(bytes.NewReader(u.Content))
		if err != nil {
			t.Fatalf("%s: unit.Deserialize: %v", m.Host, err)
		}
		got := map[string][]string{}
		for _, o := range opts {
			got[o.Section+"."+o.Name] = append(got[o.Section+"."+o.Name], o.Value)
		}
		wantStart := len(inv.Workers)
		wantPre, wantStop := []string(nil), []string{"/sbin/ip route flush proto 70"}
		if m.Role == Worker {
			// Its own subnet needs no route, but its pods' egress is
			// masqueraded: deleted first (idempotent), appended, deleted at stop.
			rule := "/sbin/iptables -w -t nat %s POSTROUTING -s 10.200.0.0/16 ! -d 10.200.0.0/16 -m comment --comment hardway-pod-egress -j MASQUERADE"
			wantPre = []string{"-" + fmt.Sprintf(rule, "-D")}
			wantStop = append(wantStop, "-"+fmt.Sprintf(rule, "-D"))
			if !slices.Contains(got["Service.ExecStart"], fmt.Sprintf(rule, "-A")) {
				t.Errorf("%s: no egress masquerade rule: %v", m.Host, got["Service.ExecStart"])
			}
		}
		if !slices.Equal(got["Service.Type"], []string{"oneshot"}) || !slices.Equal(got["Service.RemainAfterExit"], []string{"yes"}) ||
			len(got["Service.ExecStart"]) != wantStart || !slices.Equal(got["Service.ExecStartPre"], wantPre) ||
			!slices.Equal(got["Service.ExecStop"], wantStop) || !slices.Equal(got["Install.WantedBy"], []string{"multi-user.target"}) {
			t.Errorf("%s: %s: %v", m.Host, PodRoutes, got)
		}
		for _, w := range inv.Workers {
			line := fmt.Sprintf("ExecStart=/sbin/ip route replace %s via %s proto 70\n", pods[w.Name], w.IP())
			if got := bytes.Contains(u.Content, []byte(line)); got == (w.Name == m.Host) {
				t.Errorf("%s: route to %s's subnet present=%v:\n%s", m.Host, w.Name, got, u.Content)
			}
		}
		if m.Role == Worker {
			c, _ := m.File(BridgeConflist)
			k, _ := m.File(KubeletConfig)
			want := `"subnet": "` + pods[m.Host].String() + `"`
			if !bytes.Contains(c.Content, []byte(want)) || !bytes.Contains(k.Content, []byte("podCIDR: "+pods[m.Host].String()+"\n")) {
				t.Errorf("%s: CNI or kubelet without the node's subnet %s", m.Host, pods[m.Host])
			}
			// No NAT between pods: the plugin's ipMasq stays off (the unit
			// masquerades only egress), and no loopback config that containerd
			// would fall back to without the bridge one.
			if !bytes.Contains(c.Content, []byte(`"ipMasq": false`)) {
				t.Errorf("%s: bridge CNI without ipMasq false:\n%s", m.Host, c.Content)
			}
			for _, f := range m.Files {
				if strings.HasPrefix(f.Path, CNIConfDir+"/") && f.Path != BridgeConflist {
					t.Errorf("%s: CNI config %s besides the bridge one", m.Host, f.Path)
				}
			}
			if _, ok := m.File(CNIBinDir + "/loopback"); !ok {
				t.Errorf("%s lacks the loopback plugin containerd's CRI uses", m.Host)
			}
		}
	}

	none := workerInventory(t, "1.36", "cni: none", false)
	ms, err = Render(none, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, f := range m.Files {
			if f.Path == UnitPath(PodRoutes) || strings.HasPrefix(f.Path, CNIConfDir+"/") || f.Path == CNIBinDir+"/bridge" {
				t.Errorf("cni none: %s gets %s", m.Host, f.Path)
			}
			if bytes.Contains(f.Content, []byte("podCIDR")) {
				t.Errorf("cni none: %s %s sets a podCIDR", m.Host, f.Path)
			}
		}
		if m.Role == Worker {
			if _, ok := m.File(CNIBinDir + "/loopback"); !ok {
				t.Errorf("cni none: %s lacks the loopback plugin containerd needs", m.Host)
			}
		}
	}
	if got := flagMap(t, none, none.ControlPlane[0], ControllerManager)["allocate-node-cidrs"]; got != "true" {
		t.Errorf("cni none: --allocate-node-cidrs=%s", got)
	}
}

func TestRenderChecksSubnets(t *testing.T) {
	inv := workerInventory(t, "1.36", "", false)
	pods := subnets(t, inv)
	delete(pods, "worker-2")
	if _, err := Render(inv, pods); err == nil || !strings.Contains(err.Error(), "worker-2 has no pod subnet") {
		t.Errorf("missing subnet: %v", err)
	}
	pods = subnets(t, inv)
	pods["worker-2"] = pods["worker-1"]
	if _, err := Render(inv, pods); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping subnets: %v", err)
	}
	pods = subnets(t, inv)
	pods["worker-2"] = netip.MustParsePrefix("10.201.0.0/24")
	if _, err := Render(inv, pods); err == nil || !strings.Contains(err.Error(), "not inside network.podCIDR") {
		t.Errorf("subnet outside podCIDR: %v", err)
	}
}

func TestKubeProxyMode(t *testing.T) {
	for _, tc := range []struct{ network, want string }{{"", "iptables"}, {"kubeProxyMode: nftables", "nftables"}} {
		inv := workerInventory(t, "1.36", tc.network, false)
		if got := flagMap(t, inv, inv.Workers[0], KubeProxy)["proxy-mode"]; got != tc.want {
			t.Errorf("%q: --proxy-mode=%s, want %s", tc.network, got, tc.want)
		}
	}
}

func TestImagePath(t *testing.T) {
	if got := ImagePath("registry.k8s.io/pause:3.10.2"); got != "/var/lib/hardway/images/registry.k8s.io_pause_3.10.2.tar" {
		t.Errorf("ImagePath = %s", got)
	}
}

// Image tarballs go to every worker under ImageDir, named for the release
// set; the inventory's pause image is the sandbox image.
func TestImages(t *testing.T) {
	inv := workerInventory(t, "1.36", "", false)
	inv.Images = []inventory.Image{{Name: "registry.k8s.io/pause:3.10"}, {Name: "hardway.local/hello:v1"}}
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		f, ok := m.File(ImagePath("hardway.local/hello:v1"))
		if ok != (m.Role == Worker) {
			t.Errorf("%s: image tarball present=%v", m.Host, ok)
		}
		if ok && (f.Source == nil || f.Source.String() != "binary image:hardway.local/hello:v1" || f.Mode != ModePublic || len(f.Components) != 0) {
			t.Errorf("%s: image file %+v", m.Host, f)
		}
		if c, ok := m.File(ContainerdConfig); ok && !bytes.Contains(c.Content, []byte(`sandbox = "registry.k8s.io/pause:3.10"`+"\n")) {
			t.Errorf("%s: sandbox image is not the inventory's pause:\n%s", m.Host, c.Content)
		}
	}
	inv.ContainerdVersion = "v1.7.22"
	if _, err := render(t, inv); err == nil || !strings.Contains(err.Error(), "containerd 2.x") {
		t.Errorf("containerd 1.7: %v", err)
	}
}

// In a mixed cluster each manifest names its host's architecture, and a
// worker gets only the image tarballs listed for it; the sandbox image is
// the same name on both.
func TestImagesPerArch(t *testing.T) {
	inv := workerInventory(t, "1.36", "", false)
	inv.Workers[1].Arch = "arm64"
	inv.Images = []inventory.Image{
		{Name: "registry.k8s.io/pause:3.10"},
		{Name: "registry.k8s.io/pause:3.10", Arch: "arm64"},
		{Name: "hardway.local/hello:v1"},
	}
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		want := "amd64"
		if m.Host == "worker-2" {
			want = "arm64"
		}
		if m.Arch != want {
			t.Errorf("%s: arch %q, want %s", m.Host, m.Arch, want)
		}
		if !bytes.HasPrefix(m.Text(), []byte("# Files hardway pushes to "+m.Host+" (linux/"+want+").")) {
			t.Errorf("%s: manifest text %q", m.Host, m.Text()[:80])
		}
		if m.Role != Worker {
			continue
		}
		_, pause := m.File(ImagePath("registry.k8s.io/pause:3.10"))
		_, hello := m.File(ImagePath("hardway.local/hello:v1"))
		if !pause || hello != (want == "amd64") {
			t.Errorf("%s (%s): pause %v, hello %v", m.Host, want, pause, hello)
		}
		if c, ok := m.File(ContainerdConfig); !ok || !bytes.Contains(c.Content, []byte(`sandbox = "registry.k8s.io/pause:3.10"`+"\n")) {
			t.Errorf("%s: sandbox image", m.Host)
		}
	}
}

// A sole worker has no route to add but pods whose egress is masqueraded:
// it still gets the unit, with the rule only.
func TestSoleWorkerGetsEgressRule(t *testing.T) {
	inv, err := inventory.Parse("inventory.yaml", "/nonexistent/inventory.yaml", []byte(`cluster: lab
kubernetesVersion: "1.36"
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21}
`))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Render(inv, subnets(t, inv))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		u, ok := m.File(UnitPath(PodRoutes))
		if !ok {
			t.Fatalf("%s: no %s", m.Host, PodRoutes)
		}
		has := bytes.Contains(u.Content, []byte("-j MASQUERADE"))
		if has != (m.Role == Worker) || (m.Role == Worker && bytes.Contains(u.Content, []byte("route replace"))) {
			t.Errorf("%s:\n%s", m.Host, u.Content)
		}
	}
}

// The kubelet and kube-proxy notice a connection to a lost control-plane
// host within 15 s (client-go's HTTP/2 health check, shortened in their
// units' environment), on real hosts as in the lab; the control plane's
// own components talk to their host's apiserver and keep the defaults.
func TestAPIClientsDetectALostBackend(t *testing.T) {
	for _, containerHost := range []bool{false, true} {
		inv := workerInventory(t, "1.36", "", containerHost)
		ms, err := Render(inv, subnets(t, inv))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			for _, c := range []string{Kubelet, KubeProxy, APIServer, ControllerManager, Scheduler} {
				u, ok := m.File(UnitPath(c))
				if !ok {
					continue
				}
				opts, err := unit.DeserializeOptions(bytes.NewReader(u.Content))
				if err != nil {
					t.Fatalf("%s %s: %v", m.Host, c, err)
				}
				var env []string
				for _, o := range opts {
					if o.Section == "Service" && o.Name == "Environment" {
						env = append(env, o.Value)
					}
				}
				var want []string
				if c == Kubelet || c == KubeProxy {
					want = []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS=10", "HTTP2_PING_TIMEOUT_SECONDS=5"}
				}
				if !slices.Equal(env, want) {
					t.Errorf("%s %s (containerHost %v): Environment %q, want %q", m.Host, c, containerHost, env, want)
				}
			}
		}
	}
}

// TestKubeletConfigAgainstRealBinary runs the mirror's kubelet on the
// rendered KubeletConfiguration, with and without containerHost: it must
// get past its own validation of the file (it then stops at the missing
// kubeconfig). A config it refuses (low threshold not below high) shows the
// check can fail.
func TestKubeletConfigAgainstRealBinary(t *testing.T) {
	kubelet := mirrortest.KubeBinary(t, "kubelet")
	run := func(cfg []byte) string {
		dir := t.TempDir()
		p := filepath.Join(dir, "kubelet.yaml")
		if err := os.WriteFile(p, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, kubelet, "--config", p, "--kubeconfig", filepath.Join(dir, "missing.kubeconfig"),
			"--root-dir", filepath.Join(dir, "root")).CombinedOutput()
		return string(out)
	}
	for _, ch := range []bool{false, true} {
		m := workerManifest(t, workerInventory(t, mirrortest.Kubernetes, "", ch))
		f, ok := m.File(KubeletConfig)
		if !ok {
			t.Fatal("no kubelet config")
		}
		out := run(f.Content)
		// Without containerHost, on a cgroup v1 machine (this kind is one),
		// the refusal a real host on cgroup v1 gets is the one expected.
		_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
		if !ch && err != nil && strings.Contains(out, "configured to not run on a host using cgroup v1") {
			continue
		}
		if strings.Contains(out, "failed to validate kubelet configuration") || !strings.Contains(out, "missing.kubeconfig") {
			t.Errorf("containerHost %v: the kubelet refused the rendered config:\n%s", ch, out)
		}
		if ch {
			bad := bytes.Replace(f.Content, []byte("imageGCLowThresholdPercent: 99"), []byte("imageGCLowThresholdPercent: 100"), 1)
			if out := run(bad); !strings.Contains(out, "failed to validate kubelet configuration") {
				t.Errorf("a config with the low threshold at the high one was not refused:\n%s", out)
			}
		}
	}
}
