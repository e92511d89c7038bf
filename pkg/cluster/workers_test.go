package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

func TestImagePresent(t *testing.T) {
	out := `{"images":[
	 {"id":"sha256:aaa","repoTags":["registry.k8s.io/pause:3.10.2"],"repoDigests":[],"size":"300000","pinned":true},
	 {"id":"sha256:bbb","repoTags":["hardway.local/hello:v1"]},
	 {"id":"sha256:ccc","repoTags":["docker.io/library/busybox:1"]}]}`
	have, err := parseCrictlImages([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id string
		want     bool
	}{
		{"registry.k8s.io/pause:3.10.2", "sha256:aaa", true},
		{"registry.k8s.io/pause:3.10.2", "sha256:zzz", false}, // same name, other bytes: import
		{"hardway.local/hello:v1", "sha256:bbb", true},
		{"hardway.local/hello:v2", "sha256:bbb", false},
		{"busybox:1", "sha256:ccc", true}, // docker names are normalized
	} {
		if got := imagePresent(have, tc.name, tc.id); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.name, tc.id, got, tc.want)
		}
	}
	if _, err := parseCrictlImages([]byte("E1130 connect: connection refused")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func TestCNISubnets(t *testing.T) {
	conf := `{"cniVersion":"1.0.0","name":"bridge","plugins":[
	 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.200.1.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
	 {"type":"portmap","capabilities":{"portMappings":true}}]}`
	got, err := cniSubnets([]byte(conf))
	if err != nil || !slices.Equal(got, []string{"10.200.1.0/24"}) {
		t.Fatalf("conflist: %v %v", got, err)
	}
	got, err = cniSubnets([]byte(`{"type":"bridge","ipam":{"type":"host-local","subnet":"10.200.0.0/24"}}`))
	if err != nil || !slices.Equal(got, []string{"10.200.0.0/24"}) {
		t.Fatalf("single: %v %v", got, err)
	}
	if _, err := cniSubnets([]byte(`{"plugins":[{"type":"loopback"}]}`)); err == nil {
		t.Fatal("no subnet accepted")
	}
}

func TestMissingRoutes(t *testing.T) {
	c := &Cluster{Inv: &inventory.Inventory{Workers: []inventory.Host{
		{Name: "worker-1", Address: "10.240.0.21"}, {Name: "worker-2", Address: "10.240.0.22"}, {Name: "worker-3", Address: "10.240.0.23"}}}}
	subnets := map[string]netip.Prefix{
		"worker-1": netip.MustParsePrefix("10.200.0.0/24"),
		"worker-2": netip.MustParsePrefix("10.200.1.0/24"),
		"worker-3": netip.MustParsePrefix("10.200.2.0/24"),
	}
	out := `default via 10.240.0.1 dev eth0
10.200.0.0/24 dev cni0 proto kernel scope link src 10.200.0.1
10.200.1.0/24 via 10.240.0.22 dev eth0 proto static
10.200.2.0/24 via 10.240.0.99 dev eth0
10.240.0.0/24 dev eth0 proto kernel scope link src 10.240.0.21`
	miss := c.missingRoutes("worker-1", parseRoutes(out), subnets)
	// worker-3's subnet goes to the wrong gateway: missing.
	if !slices.Equal(miss, []string{"10.200.2.0/24 via 10.240.0.23 (worker-3)"}) {
		t.Fatalf("missing %v", miss)
	}
	// A control-plane host needs all three.
	if miss := c.missingRoutes("controller-1", parseRoutes(out), subnets); len(miss) != 2 {
		t.Fatalf("control plane: %v", miss)
	}
	// hardway's routes (proto 70) that no worker wants: a removed worker's.
	out70 := `10.200.1.0/24 via 10.240.0.22 dev eth0 proto 70
10.200.2.0/24 via 10.240.0.23 dev eth0 proto 70
10.200.7.0/24 via 10.240.0.27 dev eth0 proto 70
10.200.9.0/24 via 10.240.0.29 dev eth0 proto static`
	if stale := c.staleRoutes("worker-1", parseRoutes(out70), subnets); !slices.Equal(stale, []string{"10.200.7.0/24 via 10.240.0.27"}) {
		t.Fatalf("stale %v", stale)
	}
}

func TestWorkerFactProblems(t *testing.T) {
	all := "cgroupfs cgroup2fs\ntool ip yes\ntool modprobe yes\ntool iptables yes\ntool iptables-restore yes\ntool iptables-save yes\ntool nft yes\ntool conntrack yes\n"
	real := workerNeeds{mode: "iptables", bridge: true, minor: 36, swap: inventory.SwapFail}
	lab := real
	lab.containerHost = true
	with := func(n workerNeeds, f func(*workerNeeds)) workerNeeds { f(&n); return n }
	if p, w := workerFactProblems(all, real); len(p)+len(w) != 0 {
		t.Fatalf("all there: %v %v", p, w)
	}
	v1 := strings.Replace(all, "cgroup2fs", "tmpfs", 1)
	p, _ := workerFactProblems(v1, real)
	if len(p) != 1 || !strings.Contains(p[0], "cgroup v1") || !strings.Contains(p[0], "hint:") {
		t.Fatalf("cgroup v1 on a real host: %v", p)
	}
	if p, w := workerFactProblems(v1, lab); len(p)+len(w) != 0 {
		t.Fatalf("cgroup v1 on a container host: %v %v", p, w)
	}
	if p, w := workerFactProblems(v1, with(real, func(n *workerNeeds) { n.minor = 33 })); len(p) != 0 || len(w) != 1 || !strings.Contains(w[0], "systemd.unified_cgroup_hierarchy=1") {
		t.Fatalf("cgroup v1 before 1.35: %v %v", p, w)
	}
	noIpt := strings.NewReplacer("tool iptables yes", "tool iptables no", "tool iptables-restore yes", "tool iptables-restore no", "tool conntrack yes", "tool conntrack no").Replace(all)
	p, w := workerFactProblems(noIpt, real)
	if len(p) != 1 || !strings.Contains(p[0], "iptables (for kube-proxy in iptables mode), iptables-restore") || !strings.Contains(p[0], "install iptables (Debian's name) with the host's package manager") {
		t.Fatalf("no iptables, no distribution known: %v", p)
	}
	if len(w) != 1 || !strings.Contains(w[0], "conntrack") {
		t.Fatalf("no conntrack: %v", w)
	}
	// The hint names the distribution's package manager and package.
	fedora := noIpt + "osr ID=fedora\nosr VERSION_ID=41\n"
	if p, _ := workerFactProblems(fedora, real); len(p) != 1 || !strings.Contains(p[0], "hint: dnf install iptables-nft, or let up install them: hostPrep.packages: install") {
		t.Fatalf("fedora: %v", p)
	}
	debian := noIpt + "osr ID=debian\nosr VERSION_ID=\"13\"\n"
	if p, _ := workerFactProblems(debian, real); len(p) != 1 || !strings.Contains(p[0], "hint: apt-get install iptables,") {
		t.Fatalf("debian: %v", p)
	}
	// hostPrep.packages: install: the host step installs them; no problem,
	// no warning. Unless the package manager is unknown.
	install := with(real, func(n *workerNeeds) { n.install = true })
	if p, w := workerFactProblems(debian, install); len(p)+len(w) != 0 {
		t.Fatalf("install: %v %v", p, w)
	}
	if p, _ := workerFactProblems(noIpt+"osr ID=arch\n", install); len(p) != 1 {
		t.Fatalf("install, unknown package manager: %v", p)
	}
	// nftables mode needs nft, not iptables.
	noNft := strings.Replace(noIpt, "tool nft yes", "tool nft no", 1)
	if p, _ := workerFactProblems(noNft, with(real, func(n *workerNeeds) { n.mode, n.bridge = "nftables", false })); len(p) != 1 || !strings.Contains(p[0], "nft (for kube-proxy in nftables mode)") || strings.Contains(p[0], "iptables") {
		t.Fatalf("nftables mode, cni none: %v", p)
	}
	// Swap stops the kubelet: a problem on a real host, a warning on a
	// container host (the swap is its machine's); no swap line (an older
	// hardway's script) is no swap.
	if p, w := workerFactProblems(all+"swap 0\n", real); len(p)+len(w) != 0 {
		t.Fatalf("no swap: %v %v", p, w)
	}
	if p, _ := workerFactProblems(all+"swap 2\n", real); len(p) != 1 || !strings.Contains(p[0], "swap is on (2 in /proc/swaps)") || !strings.Contains(p[0], "swapoff -a") || !strings.Contains(p[0], "hostPrep.swap: limited") {
		t.Fatalf("swap on a real host: %v", p)
	}
	if p, w := workerFactProblems(all+"swap 1\n", lab); len(p) != 0 || len(w) != 1 {
		t.Fatalf("swap on a container host: %v %v", p, w)
	}
	// hostPrep.swap: limited: swap is fine, on cgroup v2 only.
	limited := with(real, func(n *workerNeeds) { n.swap = inventory.SwapLimited; n.minor = 33 })
	if p, w := workerFactProblems(all+"swap 1\n", limited); len(p)+len(w) != 0 {
		t.Fatalf("limited swap: %v %v", p, w)
	}
	if p, _ := workerFactProblems(strings.Replace(all, "cgroup2fs", "tmpfs", 1)+"swap 1\n", limited); len(p) != 1 || !strings.Contains(p[0], "LimitedSwap") {
		t.Fatalf("limited swap on cgroup v1: %v", p)
	}
	// ... but the bridge CNI's egress masquerade rule needs iptables.
	if p, _ := workerFactProblems(noNft, with(real, func(n *workerNeeds) { n.mode = "nftables" })); len(p) != 1 || !strings.Contains(p[0], "iptables (for the pods' egress masquerade rule") || strings.Contains(p[0], "iptables-restore") {
		t.Fatalf("nftables mode, cni bridge: %v", p)
	}
}

// workerModel is a fake worker (or control-plane host) for planWorkers: its
// units, restart markers and the images its containerd has.
type workerModel struct {
	mu      sync.Mutex
	units   map[string]remote.UnitState
	markers map[string]bool
	images  string // crictl images -o json
	cri     string // crictl info
	// conflist, routes and the kubelet's journal, for verify
	conflist, routes, journal string
	// oldLoopback is /etc/cni/net.d/99-loopback.conf (earlier hardway wrote it)
	oldLoopback string
	// registryFiles: hardway's files in containerd's hosts directory, as
	// readRegistryFilesCmd prints them
	registryFiles string
}

func (m *workerModel) answer(cmd string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	switch {
	case strings.HasPrefix(cmd, "echo '@units'"):
		b.WriteString(fakeShowUnits(cmd, func(comp string) remote.UnitState {
			st := m.units[comp]
			st.ActiveEnter = ""
			return st
		}))
		if strings.Contains(cmd, "echo '@restart'") {
			b.WriteString("@restart\n")
			for k := range m.markers {
				b.WriteString(k + "\n")
			}
		}
		if strings.Contains(cmd, "echo '@@") {
			// The captured reads, as the shell runs them: crictl images
			// only while containerd is active.
			active := m.units[Containerd].Active
			m.mu.Unlock()
			b.WriteString(fakeCaptured(cmd, func(c string) (string, error) {
				if strings.Contains(c, " images -o json") && strings.Contains(cmd, "if systemctl is-active --quiet containerd.service") && !active {
					return "", errSkipped
				}
				return m.answer(c)
			}))
			m.mu.Lock()
		}
		return b.String(), nil
	case strings.Contains(cmd, " info"):
		if m.cri == "" {
			return "", &remote.ExitError{Code: 1, Stderr: "connect: connection refused"}
		}
		b.WriteString(m.cri)
	case strings.HasPrefix(cmd, "cat /etc/cni/net.d/10-bridge.conflist"):
		if m.conflist == "" {
			return "", &remote.ExitError{Code: 1, Stderr: "No such file or directory"}
		}
		b.WriteString(m.conflist)
	case strings.HasPrefix(cmd, "cat /etc/cni/net.d/99-loopback.conf"):
		b.WriteString(m.oldLoopback)
	case cmd == readRegistryFilesCmd:
		b.WriteString(m.registryFiles)
	case cmd == "ip -4 route show":
		b.WriteString(m.routes)
	case strings.HasPrefix(cmd, "journalctl -u kubelet"):
		b.WriteString(m.journal)
	case strings.Contains(cmd, " images -o json"):
		if m.images == "" {
			return "", &remote.ExitError{Code: 1, Stderr: "connect: connection refused"}
		}
		b.WriteString(m.images)
	}
	return b.String(), nil
}

func running(comps ...string) *workerModel {
	m := &workerModel{units: map[string]remote.UnitState{}, markers: map[string]bool{}}
	for _, c := range comps {
		m.units[c] = remote.UnitState{Active: true, State: "active", Enabled: true}
	}
	return m
}

type workerFake struct {
	*Cluster
	hosts map[string]*remotetest.Fake
	kube  *kubefake.Clientset
}

// newWorkerFake is two workers and one control-plane host; each worker's
// manifest pushes the pause and hello image tarballs.
func newWorkerFake(t *testing.T, models map[string]*workerModel) *workerFake {
	t.Helper()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21}
  - {name: worker-2, address: 10.240.0.22}
`))
	if err != nil {
		t.Fatal(err)
	}
	wf := &workerFake{hosts: map[string]*remotetest.Fake{}, kube: kubefake.NewClientset()}
	for _, h := range inv.Hosts() {
		f := remotetest.New(t, h.Name)
		m := models[h.Name]
		f.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return m.answer(cmd) })
		wf.hosts[h.Name] = f
	}
	wf.Cluster = New(inv, Options{Connect: func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		if h, ok := wf.hosts[cfg.Name]; ok {
			return h, nil
		}
		return nil, &remote.DialError{Host: cfg.Name, Addr: cfg.Address, Kind: remote.ErrRetryable, Err: errors.New("no route to host")}
	}})
	wf.newKube = func(inventory.Host) (kubernetes.Interface, error) { return wf.kube, nil }
	img := func(name, id string) release.Artifact {
		return release.Artifact{Name: release.ImagePrefix + name, Arch: "amd64", Image: &release.ImageInfo{Name: name, ID: id}}
	}
	wf.set = &release.Set{Artifacts: []release.Artifact{img(pauseRef, "sha256:aaa"), img(helloRef, "sha256:bbb")}}
	wf.manifests = map[string]*units.Manifest{"c1": {Host: "c1"}}
	for _, w := range inv.Workers {
		wf.manifests[w.Name] = &units.Manifest{Host: w.Name, Arch: "amd64", Files: []units.File{
			{Path: "/var/lib/hardway/images/pause.tar", Source: &units.Source{Kind: units.SourceBinary, Name: release.ImagePrefix + pauseRef}},
			{Path: "/var/lib/hardway/images/hello.tar", Source: &units.Source{Kind: units.SourceBinary, Name: release.ImagePrefix + helloRef}},
		}}
	}
	return wf
}

const (
	pauseRef  = "registry.k8s.io/pause:3.10.2"
	helloRef  = "hardway.local/hello:v1"
	bothImgs  = `{"images":[{"id":"sha256:aaa","repoTags":["registry.k8s.io/pause:3.10.2"]},{"id":"sha256:bbb","repoTags":["hardway.local/hello:v1"]}]}`
	pauseOnly = `{"images":[{"id":"sha256:aaa","repoTags":["registry.k8s.io/pause:3.10.2"]}]}`
)

// wdescs is "kind host: desc" per action.
func wdescs(as []plan.Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s %s: %s", a.Kind, a.Host, a.Desc))
	}
	return out
}

// writes are the commands that are not reads.
func (wf *workerFake) writes() []string {
	var out []string
	for name, f := range wf.hosts {
		for _, c := range f.Commands() {
			if !strings.HasPrefix(c, "echo '@") && !strings.Contains(c, " images -o json") && !strings.HasPrefix(c, "cat ") {
				out = append(out, name+": "+c)
			}
		}
	}
	return out
}

func TestPlanWorkersFresh(t *testing.T) {
	wf := newWorkerFake(t, map[string]*workerModel{"c1": running(), "worker-1": running(), "worker-2": running()})
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"start worker-1: containerd: enable, start",
		"write worker-1: import 2 image(s) into containerd (containerd not running yet): hardway.local/hello:v1 (bbb), registry.k8s.io/pause:3.10.2 (aaa)",
		"apply worker-1: register Node worker-1 with spec.podCIDR 10.200.0.0/24",
		"start worker-1: kubelet: enable, start",
		"start worker-1: kube-proxy: enable, start",
		"start worker-1: hardway-pod-routes: enable, start",
		"start worker-2: containerd: enable, start",
		"write worker-2: import 2 image(s) into containerd (containerd not running yet): hardway.local/hello:v1 (bbb), registry.k8s.io/pause:3.10.2 (aaa)",
		"apply worker-2: register Node worker-2 with spec.podCIDR 10.200.1.0/24",
		"start worker-2: kubelet: enable, start",
		"start worker-2: kube-proxy: enable, start",
		"start worker-2: hardway-pod-routes: enable, start",
		// New workers start together and are waited for together.
		"wait : wait for Nodes worker-1, worker-2 to be Ready",
		"start c1: hardway-pod-routes: enable, start",
	}
	if got := wdescs(as); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The new workers' actions run side by side (each host's in order);
	// the wait does not; the controllers' routes units, not running yet,
	// start together after it.
	for i, a := range as {
		if a.Parallel != (i < 12 || i == 13) {
			t.Errorf("action %d %q: Parallel %v", i, want[i], a.Parallel)
		}
	}
	if w := wf.writes(); len(w) > 0 {
		t.Fatalf("the plan changed hosts: %v", w)
	}
	if l, _ := wf.kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("the plan registered nodes: %v", l.Items)
	}
	// Registering is an action: it creates the Node with the subnet.
	if err := as[2].Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, _ := kube.GetNode(t.Context(), wf.kube, "worker-1"); n == nil || n.Spec.PodCIDR != "10.200.0.0/24" {
		t.Fatalf("registered %+v", n)
	}
}

func readyNode(name, cidr string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func convergedWorkers(t *testing.T) (*workerFake, map[string]*workerModel) {
	models := map[string]*workerModel{"c1": running(PodRoutes),
		"worker-1": running(workerComponents()...), "worker-2": running(workerComponents()...)}
	models["worker-1"].images, models["worker-2"].images = bothImgs, bothImgs
	wf := newWorkerFake(t, models)
	for i, w := range []string{"worker-1", "worker-2"} {
		if _, err := wf.kube.CoreV1().Nodes().Create(t.Context(), readyNode(w, fmt.Sprintf("10.200.%d.0/24", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return wf, models
}

func TestPlanWorkersConverged(t *testing.T) {
	wf, _ := convergedWorkers(t)
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil || len(as) != 0 {
		t.Fatalf("converged: %v %v", wdescs(as), err)
	}
}

// The loopback config an earlier hardway wrote is removed (containerd would
// fall back to it); another file of that name is left alone.
func TestPlanWorkersRemovesOldLoopbackConf(t *testing.T) {
	wf, models := convergedWorkers(t)
	models["worker-1"].oldLoopback = `{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}`
	models["worker-2"].oldLoopback = `{"cniVersion": "1.0.0", "name": "mine", "type": "bridge"}`
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := wdescs(as); len(got) != 1 || !strings.HasPrefix(got[0], "write worker-1: remove /etc/cni/net.d/99-loopback.conf") {
		t.Fatalf("plan: %v", got)
	}
	if w := wf.writes(); len(w) > 0 {
		t.Fatalf("the plan changed hosts: %v", w)
	}
	if err := as[0].Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w := wf.writes(); !slices.Equal(w, []string{"worker-1: rm -f /etc/cni/net.d/99-loopback.conf"}) {
		t.Fatalf("removal ran %v", w)
	}
}

func TestPlanWorkersRollsRunningWorkers(t *testing.T) {
	wf, models := convergedWorkers(t)
	// Both kubelets' files changed (push planned it), and worker-2 lost an image.
	models["worker-2"].images = pauseOnly
	earlier := plan.Planned{
		{Host: "worker-1", Kind: plan.Write, Restarts: []string{Kubelet}},
		{Host: "worker-2", Kind: plan.Write, Restarts: []string{Kubelet, Containerd}},
	}
	as, err := wf.planWorkers(t.Context(), earlier)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"restart worker-1: kubelet: restart (files changed)",
		"wait worker-1: wait for Node worker-1 to be Ready",
		"restart worker-2: containerd: restart (files changed)",
		// containerd restarts in this run: its images are not asked, all are imported.
		"write worker-2: import 2 image(s) into containerd (containerd not running yet): hardway.local/hello:v1 (bbb), registry.k8s.io/pause:3.10.2 (aaa)",
		"restart worker-2: kubelet: restart (files changed)",
		"wait worker-2: wait for Node worker-2 to be Ready",
	}
	if got := wdescs(as); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Running workers roll one at a time: nothing here runs side by side.
	for i, a := range as {
		if a.Parallel {
			t.Errorf("action %d %q is Parallel on running workers", i, want[i])
		}
	}
}

func TestPlanWorkersMissingImageOnly(t *testing.T) {
	wf, models := convergedWorkers(t)
	models["worker-1"].images = pauseOnly
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := wdescs(as); len(got) != 1 || got[0] != "write worker-1: import 1 image(s) into containerd (not present): hardway.local/hello:v1 (bbb)" {
		t.Fatalf("plan: %v", got)
	}
}

func TestPlanWorkersPodCIDRConflict(t *testing.T) {
	wf, _ := convergedWorkers(t)
	if err := wf.kube.CoreV1().Nodes().Delete(t.Context(), "worker-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := wf.kube.CoreV1().Nodes().Create(t.Context(), readyNode("worker-2", "10.200.7.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := wf.planWorkers(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), "spec.podCIDR 10.200.7.0/24") || !strings.Contains(usererr.HintOf(err), "kubectl delete node worker-2") {
		t.Fatalf("conflict: %v (hint %q)", err, usererr.HintOf(err))
	}
}

func TestPlanWorkersRemovesStaleWorkers(t *testing.T) {
	wf, _ := convergedWorkers(t)
	// worker-3 left the inventory (a state from before hardway recorded
	// hosts: the Node's address is used); "joined" came in by other means
	// (no hardway subnet): only worker-3 is removed.
	w3 := readyNode("worker-3", "10.200.2.0/24")
	w3.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.240.0.23"}}
	for _, n := range []*corev1.Node{w3, readyNode("joined", "")} {
		if _, err := wf.kube.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"membership : cordon and drain Node worker-3 (not in the inventory; pod subnet 10.200.2.0/24): evict its pods (PodDisruptionBudgets respected, at most 2m0s; DaemonSet and static pods stay)",
		"membership worker-3: stop and disable kubelet and kube-proxy on worker-3 (10.240.0.23, the Node's InternalIP) so that it cannot register its Node again; " +
			"remove its pods, its pod network (cni0, the IPAM state, its routes and egress rule), its credentials; stop containerd (a host that does not answer is skipped with a warning)",
		"membership : delete Node worker-3",
	}
	if got := wdescs(as); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// worker-3 does not answer: a warning, and the Node goes all the same.
	var log strings.Builder
	wf.opt.Out = &log
	for _, a := range as {
		if err := a.Do(t.Context()); err != nil {
			t.Fatalf("%s: %v", a.Desc, err)
		}
	}
	if n, _ := kube.GetNode(t.Context(), wf.kube, "worker-3"); n != nil {
		t.Fatal("worker-3 still there")
	}
	if !strings.Contains(log.String(), "warning: worker-3 (10.240.0.23) does not answer") || !strings.Contains(log.String(), "registers Node worker-3 again") {
		t.Fatalf("no warning: %q", log.String())
	}
}

// A worker removed from the inventory, recorded in the state: drained,
// stopped over SSH (at the address recorded) before its Node is deleted,
// routes gone with the remaining hosts' unit restarts, subnet freed last.
func TestPlanWorkersRemovesRecordedWorker(t *testing.T) {
	models := map[string]*workerModel{"c1": running(PodRoutes),
		"worker-1": running(workerComponents()...), "worker-2": running(workerComponents()...)}
	models["worker-1"].images, models["worker-2"].images = bothImgs, bothImgs
	wf := newWorkerFake(t, models)
	wf.opt.State = state.Dir(t.TempDir())
	// up with both workers recorded them; then worker-2 left the inventory.
	st, err := podnet.Next(&podnet.State{}, wf.Inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := podnet.SaveState(wf.opt.State.PodSubnets(), st); err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"worker-1", "worker-2"} {
		if _, err := wf.kube.CoreV1().Nodes().Create(t.Context(), readyNode(w, fmt.Sprintf("10.200.%d.0/24", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wf.Inv.Workers = wf.Inv.Workers[:1]
	wf.Inv.Workers[0].Address = "10.240.0.21"
	// The render step records nothing new: worker-2 keeps its subnet
	// (and its host) until it is removed.
	if as, err := wf.recordPodSubnets(); err != nil || len(as) != 0 {
		t.Fatalf("record: %v %v", wdescs(as), err)
	}
	// push planned the new routes units (without worker-2's subnet).
	earlier := plan.Planned{{Host: "worker-1", Kind: plan.Write, Restarts: []string{PodRoutes}}, {Host: "c1", Kind: plan.Write, Restarts: []string{PodRoutes}}}
	as, err := wf.planWorkers(t.Context(), earlier)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"membership : cordon and drain Node worker-2 (not in the inventory; pod subnet 10.200.1.0/24): evict its pods (PodDisruptionBudgets respected, at most 2m0s; DaemonSet and static pods stay)",
		"membership worker-2: stop and disable kubelet and kube-proxy on worker-2 (10.240.0.22, as recorded in " + wf.opt.State.PodSubnets() + ") so that it cannot register its Node again; " +
			"remove its pods, its pod network (cni0, the IPAM state, its routes and egress rule), its credentials; stop containerd (a host that does not answer is skipped with a warning)",
		"membership : delete Node worker-2",
		"restart worker-1: hardway-pod-routes: restart (files changed)",
		"wait worker-1: wait for Node worker-1 to be Ready",
		"restart c1: hardway-pod-routes: restart (files changed)",
		"membership : free the pod subnets of removed workers in " + wf.opt.State.PodSubnets() + ": worker-2 (10.200.1.0/24)",
	}
	if got := wdescs(as); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Running routes units restart one host at a time.
	if as[5].Parallel {
		t.Errorf("%q is Parallel", want[5])
	}
	if w := wf.writes(); len(w) > 0 {
		t.Fatalf("the plan changed hosts: %v", w)
	}
	// The kubelet is stopped (and proven stopped) before the Node goes: a
	// running kubelet would register it again.
	var order []string
	wf.kube.PrependReactor("delete", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		order = append(order, fmt.Sprintf("delete Node after %d command(s) on worker-2", len(wf.hosts["worker-2"].Commands())))
		return false, nil, nil
	})
	for _, a := range as[:3] {
		if err := a.Do(t.Context()); err != nil {
			t.Fatalf("%s: %v", a.Desc, err)
		}
	}
	cmds := strings.Join(wf.hosts["worker-2"].Commands(), "\n")
	for _, want := range []string{"systemctl disable --now kubelet.service", "systemctl disable --now kube-proxy.service", "if systemctl is-active -q kubelet.service; then", "rmp --all --force",
		"systemctl disable --now hardway-pod-routes.service", "ip link delete cni0", "rm -rf /var/lib/cni/networks/bridge", "rm -f /var/lib/kubelet/kubelet.key"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("worker-2 did not run %q:\n%s", want, cmds)
		}
	}
	if strings.Index(cmds, "disable --now kubelet") > strings.Index(cmds, "rmp --all") {
		t.Error("pods removed before the kubelet stopped")
	}
	if !slices.Equal(order, []string{"delete Node after 1 command(s) on worker-2"}) {
		t.Fatalf("order: %v", order)
	}
	if n, _ := kube.GetNode(t.Context(), wf.kube, "worker-2"); n != nil {
		t.Fatal("worker-2 still there")
	}
	if err := as[len(as)-1].Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	after, err := podnet.LoadState(wf.opt.State.PodSubnets())
	if err != nil || after.Subnets.String() != "worker-1=10.200.0.0/24" || len(after.Hosts) != 1 {
		t.Fatalf("state after: %+v %v", after, err)
	}
}

// The last worker removed: the control-plane host's routes unit, which
// would have nothing to route, is stopped (taking its routes) and deleted.
func TestPlanWorkersLastWorkerRemoved(t *testing.T) {
	wf, _ := convergedWorkers(t)
	wf.opt.State = state.Dir(t.TempDir())
	st, err := podnet.Next(&podnet.State{}, wf.Inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := podnet.SaveState(wf.opt.State.PodSubnets(), st); err != nil {
		t.Fatal(err)
	}
	wf.Inv.Workers = nil
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(wdescs(as), "\n")
	for _, want := range []string{"membership : delete Node worker-1", "membership : delete Node worker-2",
		"write c1: remove hardway-pod-routes.service (no worker to route to: stopping it removes its routes), disable it, delete /etc/systemd/system/hardway-pod-routes.service"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	i := slices.IndexFunc(as, func(a plan.Action) bool { return a.Host == "c1" && a.Kind == plan.Write })
	if i < 0 || !strings.Contains(as[len(as)-1].Desc, "free the pod subnets of removed workers") {
		t.Fatalf("plan: %s", got)
	}
	if err := as[i].Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w := wf.writes(); !slices.Contains(w, "c1: systemctl disable --now hardway-pod-routes.service && rm -f /etc/systemd/system/hardway-pod-routes.service && systemctl daemon-reload && { systemctl reset-failed hardway-pod-routes.service 2>/dev/null || true; }") {
		t.Fatalf("ran %v", w)
	}
}

const criReady = `{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":true}]},"lastCNILoadStatus":"OK"}`

func conflist(subnet string) string {
	return `{"cniVersion":"1.0.0","name":"bridge","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"` + subnet + `"}]]}}]}`
}

// results is "status check host: message" per result.
func results(rs []verify.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s %s: %s", r.Status, r.Check, r.Host, r.Message))
	}
	return out
}

func TestCheckWorker(t *testing.T) {
	wf, models := convergedWorkers(t)
	for i, w := range []string{"worker-1", "worker-2"} {
		models[w].cri, models[w].conflist = criReady, conflist(fmt.Sprintf("10.200.%d.0/24", i))
	}
	models["worker-1"].routes = "10.200.1.0/24 via 10.240.0.22 dev eth0 proto 70\n"
	models["c1"].routes = "10.200.0.0/24 via 10.240.0.21 dev eth0 proto 70\n"
	w1 := wf.Inv.Workers[0]
	for _, r := range wf.checkWorker(t.Context(), w1) {
		if r.Status != verify.Pass {
			t.Errorf("converged worker: %s %s: %s (%s)", r.Status, r.Check, r.Message, r.Hint)
		}
	}
	// c1 lacks worker-2's subnet, worker-2 lacks worker-1's.
	got := results(wf.checkRoutes(t.Context()))
	want := []string{
		"fail routes c1: no route to 10.200.1.0/24 via 10.240.0.22 (worker-2)",
		"pass routes worker-1: routes to the pod subnets of 1 other worker(s)",
		"fail routes worker-2: no route to 10.200.0.0/24 via 10.240.0.21 (worker-1)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// worker-1 loses its CNI config: NetworkReady false, the Node NotReady.
	models["worker-1"].conflist = ""
	models["worker-1"].cri = `{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":false,"reason":"NetworkPluginNotReady","message":"cni plugin not initialized"}]},"lastCNILoadStatus":"cni config load failed: no network config found in /etc/cni/net.d"}`
	n, _ := kube.GetNode(t.Context(), wf.kube, "worker-1")
	n.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime network not ready: cni config uninitialized"}
	if _, err := wf.kube.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	byCheck := map[string]verify.Result{}
	for _, r := range wf.checkWorker(t.Context(), w1) {
		if r.Status != verify.Pass {
			byCheck[r.Check] = r
		}
	}
	for check, want := range map[string]string{
		"worker/cri":     "CNI config missing: cni config load failed: no network config found in /etc/cni/net.d",
		"worker/node":    "Node not Ready: CNI config missing",
		"worker/podcidr": "allocated 10.200.0.0/24, but no CNI config /etc/cni/net.d/10-bridge.conflist",
	} {
		r, ok := byCheck[check]
		if !ok || !strings.Contains(r.Message, want) || r.Hint == "" {
			t.Errorf("%s: %+v, want %q with a hint", check, r, want)
		}
	}
	if len(byCheck) != 3 {
		t.Errorf("failures: %v", byCheck)
	}

	// containerd down: the runtime is the cause.
	models["worker-1"].units[Containerd] = remote.UnitState{}
	d := wf.diagnoseWorker(t.Context(), "worker-1", n)
	if d.Cause != kube.CauseRuntimeDown || !strings.Contains(d.Hint, "journalctl -u containerd") {
		t.Fatalf("containerd down: %+v", d)
	}
	// Runtime fine, kubelet refused by the apiserver.
	models["worker-1"].units[Containerd] = remote.UnitState{Active: true, Enabled: true}
	models["worker-1"].cri = criReady
	models["worker-1"].journal = "Started kubelet.service - Kubernetes node agent.\nE1130 \"Unable to register node with API server\" err=\"Unauthorized\"\n"
	d = wf.diagnoseWorker(t.Context(), "worker-1", nil)
	if d.Cause != kube.CauseCertRefused || !strings.Contains(d.Detail, "Unauthorized") {
		t.Fatalf("cert refused: %+v", d)
	}
}

func TestPlanWorkersCNINone(t *testing.T) {
	models := map[string]*workerModel{"c1": running(), "worker-1": running(), "worker-2": running()}
	wf := newWorkerFake(t, models)
	wf.Inv.Network.CNI = inventory.CNINone
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(wdescs(as), "\n")
	// No Node registered with a subnet, no routes anywhere, and up waits
	// for the kubelets to register, not for Ready.
	if strings.Contains(got, "register Node") || strings.Contains(got, PodRoutes) ||
		!strings.Contains(got, "wait for Nodes worker-1, worker-2 to be registered (Ready once your CNI runs)") {
		t.Fatalf("plan:\n%s", got)
	}
}

// verify's cluster-wide view of churn: a removed worker's Node (in the state,
// or with a hardway subnet) fails with what removes it; a Node joined by
// other means is a warning; a removed worker whose removal did not finish
// is named.
func TestCheckNodesStale(t *testing.T) {
	wf, _ := convergedWorkers(t)
	wf.opt.State = state.Dir(t.TempDir())
	st, err := podnet.Next(&podnet.State{}, wf.Inv)
	if err != nil {
		t.Fatal(err)
	}
	st.Subnets["worker-3"] = netip.MustParsePrefix("10.200.2.0/24")
	st.Hosts["worker-3"] = podnet.Host{Address: "10.240.0.23"}
	if err := podnet.SaveState(wf.opt.State.PodSubnets(), st); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{readyNode("worker-4", "10.200.4.0/24"), readyNode("joined", "")} {
		if _, err := wf.kube.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(results(wf.checkNodes(t.Context())), "\n")
	for _, want := range []string{
		"fail nodes/stale worker-4: Node worker-4 is not in the inventory (a removed worker, pod subnet 10.200.4.0/24)",
		"warn nodes/stale joined: Node joined is not in the inventory (joined by other means?)",
		"warn nodes/stale worker-3: worker worker-3 left the inventory, and 'hardway up' has not finished removing it (its pod subnet 10.200.2.0/24 stays reserved",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("checkNodes lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "worker-1") || strings.Contains(got, "worker-2") {
		t.Errorf("names a worker of the inventory:\n%s", got)
	}
}
