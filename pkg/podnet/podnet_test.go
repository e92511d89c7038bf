package podnet

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

func alloc(kv ...string) Allocation {
	a := Allocation{}
	for i := 0; i < len(kv); i += 2 {
		a[kv[i]] = netip.MustParsePrefix(kv[i+1])
	}
	return a
}

func TestAllocate(t *testing.T) {
	pod := netip.MustParsePrefix("10.200.0.0/16")
	for _, tc := range []struct {
		name     string
		existing Allocation
		workers  []string
		pod      string
		want     Allocation
		changed  bool
	}{
		{"fresh", nil, []string{"w1", "w2", "w3"}, "",
			alloc("w1", "10.200.0.0/24", "w2", "10.200.1.0/24", "w3", "10.200.2.0/24"), true},
		{"unchanged", alloc("w1", "10.200.0.0/24", "w2", "10.200.1.0/24"), []string{"w1", "w2"}, "",
			alloc("w1", "10.200.0.0/24", "w2", "10.200.1.0/24"), false},
		{"removing one renumbers no other", alloc("w1", "10.200.0.0/24", "w2", "10.200.1.0/24", "w3", "10.200.2.0/24"), []string{"w1", "w3"}, "",
			alloc("w1", "10.200.0.0/24", "w3", "10.200.2.0/24"), true},
		{"a new worker takes the lowest free", alloc("w1", "10.200.0.0/24", "w3", "10.200.2.0/24"), []string{"w1", "w3", "w4"}, "",
			alloc("w1", "10.200.0.0/24", "w3", "10.200.2.0/24", "w4", "10.200.1.0/24"), true},
		{"order in the inventory does not matter", alloc("w1", "10.200.5.0/24", "w2", "10.200.0.0/24"), []string{"w2", "w1"}, "",
			alloc("w1", "10.200.5.0/24", "w2", "10.200.0.0/24"), false},
		{"outside a changed podCIDR", alloc("w1", "10.200.0.0/24", "w2", "10.201.0.0/24"), []string{"w1", "w2"}, "10.201.0.0/16",
			alloc("w1", "10.201.1.0/24", "w2", "10.201.0.0/24"), true},
		{"wrong size", alloc("w1", "10.200.0.0/25"), []string{"w1"}, "",
			alloc("w1", "10.200.0.0/24"), true},
		{"duplicate in an edited file", alloc("w1", "10.200.3.0/24", "w2", "10.200.3.0/24"), []string{"w1", "w2"}, "",
			alloc("w1", "10.200.3.0/24", "w2", "10.200.0.0/24"), true},
		{"small pod network: quarters", nil, []string{"w1", "w2"}, "10.200.0.0/24",
			alloc("w1", "10.200.0.0/26", "w2", "10.200.0.64/26"), true},
		{"ipv6", nil, []string{"w1", "w2"}, "fd00:200::/56",
			alloc("w1", "fd00:200::/64", "w2", "fd00:200:0:1::/64"), true},
		{"no workers", alloc("w1", "10.200.0.0/24"), nil, "", Allocation{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod
			if tc.pod != "" {
				p = netip.MustParsePrefix(tc.pod)
			}
			got, changed, err := Allocate(tc.existing, tc.workers, p)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tc.want) || changed != tc.changed {
				t.Errorf("got %v changed=%v, want %v changed=%v", got, changed, tc.want, tc.changed)
			}
		})
	}
}

func TestAllocateFull(t *testing.T) {
	pod := netip.MustParsePrefix("10.200.0.0/22")
	a, _, err := Allocate(nil, []string{"w1", "w2", "w3", "w4"}, pod)
	if err != nil || len(a) != 4 {
		t.Fatalf("four /24 in a /22: %v %v", a, err)
	}
	_, _, err = Allocate(a, []string{"w1", "w2", "w3", "w4", "w5"}, pod)
	if err == nil || !strings.Contains(err.Error(), "no free /24 subnet left for worker w5") || usererr.HintOf(err) == "" {
		t.Fatalf("fifth worker in a /22: %v (hint %q)", err, usererr.HintOf(err))
	}
}

func TestSubnetBits(t *testing.T) {
	for _, tc := range []struct {
		pod  string
		want int
	}{{"10.200.0.0/16", 24}, {"10.0.0.0/8", 24}, {"10.200.0.0/22", 24}, {"10.200.0.0/23", 25}, {"10.200.0.0/24", 26}, {"fd00::/48", 64}, {"fd00::/64", 66}} {
		if got := SubnetBits(netip.MustParsePrefix(tc.pod)); got != tc.want {
			t.Errorf("SubnetBits(%s) = %d, want %d", tc.pod, got, tc.want)
		}
	}
}

func TestLoadSave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod-subnets.yaml")
	empty, err := Load(path)
	if err != nil || len(empty) != 0 {
		t.Fatalf("missing file: %v %v", empty, err)
	}
	a := alloc("worker-2", "10.200.1.0/24", "worker-1", "10.200.0.0/24")
	if err := Save(path, a); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(b), "subnets:\n  worker-1: 10.200.0.0/24\n  worker-2: 10.200.1.0/24\n") {
		t.Errorf("file:\n%s", b)
	}
	got, err := Load(path)
	if err != nil || !got.Equal(a) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if err := os.WriteFile(path, []byte("subnets:\n  worker-1: 10.200.0.0/99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || usererr.HintOf(err) == "" {
		t.Errorf("bad prefix: %v", err)
	}
}

func TestForInventoryWritesNothing(t *testing.T) {
	dir := state.Dir(t.TempDir())
	src := "cluster: lab\ncontrolPlane:\n  - {name: c1, address: 10.240.0.11}\nworkers:\n  - {name: w1, address: 10.240.0.21}\n  - {name: w2, address: 10.240.0.22}\n"
	inv, err := inventory.Parse("inv.yaml", "/nonexistent/inv.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a, changed, err := ForInventory(dir, inv)
	if err != nil || !changed || a.String() != "w1=10.200.0.0/24, w2=10.200.1.0/24" {
		t.Fatalf("ForInventory = %v %v %v", a, changed, err)
	}
	if _, err := os.Stat(dir.PodSubnets()); !os.IsNotExist(err) {
		t.Fatalf("ForInventory wrote %s", dir.PodSubnets())
	}
	_, next, _, err := ForState(dir, inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveState(dir.PodSubnets(), next); err != nil {
		t.Fatal(err)
	}
	if b, changed, err := ForInventory(dir, inv); err != nil || changed || !b.Equal(a) {
		t.Fatalf("after Save: %v %v %v", b, changed, err)
	}
	// A new address is a change (the host record).
	inv.Workers[1].Address = "10.240.0.32"
	if _, changed, err := ForInventory(dir, inv); err != nil || !changed {
		t.Fatalf("new address: changed=%v %v", changed, err)
	}
}

func parseInv(t *testing.T, workers ...string) *inventory.Inventory {
	t.Helper()
	src := "cluster: lab\ncontrolPlane:\n  - {name: c1, address: 10.240.0.11}\n"
	if len(workers) > 0 {
		src += "workers:\n"
	}
	for _, w := range workers {
		src += "  - " + w + "\n"
	}
	inv, err := inventory.Parse("inv.yaml", "/nonexistent/inv.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// A removed worker keeps its subnet and host record until Without: a new
// worker added in the same run takes another subnet; re-added later, a
// worker gets the lowest free one again.
func TestRemovedWorkerKeepsSubnetUntilFreed(t *testing.T) {
	two := parseInv(t, "{name: w1, address: 10.240.0.21}", "{name: w2, address: 10.240.0.22, ssh: {port: 2222}}")
	cur, err := Next(&State{}, two)
	if err != nil || cur.Subnets.String() != "w1=10.200.0.0/24, w2=10.200.1.0/24" {
		t.Fatalf("two workers: %v %v", cur, err)
	}
	one := parseInv(t, "{name: w1, address: 10.240.0.21}", "{name: w3, address: 10.240.0.23}")
	next, err := Next(cur, one)
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Subnets.String(); got != "w1=10.200.0.0/24, w2=10.200.1.0/24, w3=10.200.2.0/24" {
		t.Fatalf("w2 removed, w3 added: %s", got)
	}
	if r := next.Removed(one); !slices.Equal(r, []string{"w2"}) {
		t.Fatalf("removed %v", r)
	}
	h := next.Hosts["w2"].InventoryHost("w2")
	if h.Address != "10.240.0.22" || h.SSH == nil || h.SSH.Port != 2222 {
		t.Fatalf("w2's host record: %+v", h)
	}
	freed := next.Without("w2")
	if r := freed.Removed(one); len(r) != 0 || freed.Subnets.String() != "w1=10.200.0.0/24, w3=10.200.2.0/24" {
		t.Fatalf("freed: %v %v", freed.Subnets, r)
	}
	if next.Subnets["w2"] != netip.MustParsePrefix("10.200.1.0/24") {
		t.Fatal("Without changed its receiver")
	}
	// Back in the inventory: the lowest free subnet (its old one).
	back, err := Next(freed, parseInv(t, "{name: w1, address: 10.240.0.21}", "{name: w3, address: 10.240.0.23}", "{name: w2, address: 10.240.0.22}"))
	if err != nil || back.Subnets.String() != "w1=10.200.0.0/24, w2=10.200.1.0/24, w3=10.200.2.0/24" {
		t.Fatalf("re-added: %v %v", back.Subnets, err)
	}
	// The file round-trips both sections.
	path := filepath.Join(t.TempDir(), "pod-subnets.yaml")
	if err := SaveState(path, next); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(path)
	if err != nil || !got.Equal(next) {
		b, _ := os.ReadFile(path)
		t.Fatalf("round trip: %v\n%s", err, b)
	}
}

// A podCIDR that no longer holds a worker's subnet is refused, naming it:
// the worker's Node keeps its spec.podCIDR, and a new subnet in its CNI
// config would break its new pods. A new worker still gets one.
func TestChangedPodCIDRRefused(t *testing.T) {
	dir := state.Dir(t.TempDir())
	inv := parseInv(t, "{name: w1, address: 10.240.0.21}")
	_, next, _, err := ForState(dir, inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveState(dir.PodSubnets(), next); err != nil {
		t.Fatal(err)
	}
	src := "cluster: lab\nnetwork: {podCIDR: 10.201.0.0/16}\ncontrolPlane:\n  - {name: c1, address: 10.240.0.11}\nworkers:\n  - {name: w1, address: 10.240.0.21}\n"
	moved, err := inventory.Parse("inv.yaml", "/nonexistent/inv.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ForInventory(dir, moved)
	if err == nil || !strings.Contains(err.Error(), "network.podCIDR 10.201.0.0/16 does not hold the pod subnets the workers have: w1's 10.200.0.0/24 (now 10.201.0.0/24)") ||
		!strings.Contains(usererr.HintOf(err), "kubectl delete node") {
		t.Fatalf("changed podCIDR: %v (hint %q)", err, usererr.HintOf(err))
	}
	// Without the state's line (renumbered on purpose), it is allocated.
	if err := os.Remove(dir.PodSubnets()); err != nil {
		t.Fatal(err)
	}
	if a, _, err := ForInventory(dir, moved); err != nil || a.String() != "w1=10.201.0.0/24" {
		t.Fatalf("renumbered on purpose: %v %v", a, err)
	}
}
