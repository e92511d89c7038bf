package podnet

import (
	"net/netip"
	"os"
	"path/filepath"
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
	if err := Save(dir.PodSubnets(), a); err != nil {
		t.Fatal(err)
	}
	if b, changed, err := ForInventory(dir, inv); err != nil || changed || !b.Equal(a) {
		t.Fatalf("after Save: %v %v %v", b, changed, err)
	}
}
