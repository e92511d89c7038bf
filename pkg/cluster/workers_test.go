package cluster

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
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
}

func TestWorkerFactProblems(t *testing.T) {
	all := "cgroupfs cgroup2fs\ntool ip yes\ntool iptables yes\ntool iptables-restore yes\ntool iptables-save yes\ntool nft yes\ntool conntrack yes\n"
	if p, w := workerFactProblems(all, false, "iptables", 36); len(p)+len(w) != 0 {
		t.Fatalf("all there: %v %v", p, w)
	}
	v1 := strings.Replace(all, "cgroup2fs", "tmpfs", 1)
	p, _ := workerFactProblems(v1, false, "iptables", 36)
	if len(p) != 1 || !strings.Contains(p[0], "cgroup v1") || !strings.Contains(p[0], "hint:") {
		t.Fatalf("cgroup v1 on a real host: %v", p)
	}
	if p, w := workerFactProblems(v1, true, "iptables", 36); len(p)+len(w) != 0 {
		t.Fatalf("cgroup v1 on a container host: %v %v", p, w)
	}
	if p, w := workerFactProblems(v1, false, "iptables", 33); len(p) != 0 || len(w) != 1 {
		t.Fatalf("cgroup v1 before 1.35: %v %v", p, w)
	}
	noIpt := strings.NewReplacer("tool iptables yes", "tool iptables no", "tool iptables-restore yes", "tool iptables-restore no", "tool conntrack yes", "tool conntrack no").Replace(all)
	p, w := workerFactProblems(noIpt, false, "iptables", 36)
	if len(p) != 1 || !strings.Contains(p[0], "iptables (for kube-proxy in iptables mode), iptables-restore") || !strings.HasSuffix(p[0], "install the package(s) iptables)") {
		t.Fatalf("no iptables: %v", p)
	}
	if len(w) != 1 || !strings.Contains(w[0], "conntrack") {
		t.Fatalf("no conntrack: %v", w)
	}
	// nftables mode needs nft, not iptables.
	noNft := strings.Replace(noIpt, "tool nft yes", "tool nft no", 1)
	if p, _ := workerFactProblems(noNft, false, "nftables", 36); len(p) != 1 || !strings.Contains(p[0], "nft (for kube-proxy in nftables mode)") || strings.Contains(p[0], "iptables-restore") {
		t.Fatalf("nftables mode: %v", p)
	}
}
