// Package podnet gives every worker its own pod subnet, carved from the
// inventory's network.podCIDR, and keeps the choice in the state directory
// (pod-subnets.yaml).
//
// The bridge CNI config on a worker, its kubelet's podCIDR and the routes on
// every other host all name that subnet, so it must never move while the
// worker exists: a worker keeps its subnet as long as it is in the
// inventory, removing one worker renumbers no other, and a new or re-added
// worker takes the lowest free subnet.
//
// Allocate is pure; Load and Save are the only I/O, for the caller to do
// (a Plan reads, an Action writes).
package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"net/netip"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// Allocation is each worker's pod subnet, by worker name.
type Allocation map[string]netip.Prefix

// Equal reports whether a and b give every worker the same subnet.
func (a Allocation) Equal(b Allocation) bool { return maps.Equal(a, b) }

// SubnetBits is the prefix length of a worker's subnet in pod: a /24 (IPv4)
// or /64 (IPv6) as the controller-manager would cut, or, from a network too
// small for four of those, a quarter of it.
func SubnetBits(pod netip.Prefix) int {
	want := 24
	if pod.Addr().Is6() {
		want = 64
	}
	if pod.Bits() <= want-2 {
		return want
	}
	return min(pod.Bits()+2, pod.Addr().BitLen())
}

// nth is the i-th subnet of length bits in pod, if there is one.
func nth(pod netip.Prefix, bits, i int) (netip.Prefix, bool) {
	host := pod.Addr().BitLen() - bits
	if i < 0 || bits-pod.Bits() < 63 && int64(i) >= int64(1)<<(bits-pod.Bits()) {
		return netip.Prefix{}, false
	}
	base := pod.Masked().Addr().AsSlice()
	n := new(big.Int).SetBytes(base)
	n.Add(n, new(big.Int).Lsh(big.NewInt(int64(i)), uint(host)))
	b := n.FillBytes(make([]byte, len(base)))
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, bits), true
}

// Allocate returns the subnet of every worker in workers: its subnet in
// existing if that is still a subnet of pod of the right size, else the
// lowest free one. Workers not in workers are dropped, which frees their
// subnets. changed reports whether the result differs from existing (it
// must then be saved before anything uses it).
func Allocate(existing Allocation, workers []string, pod netip.Prefix) (Allocation, bool, error) {
	if !pod.IsValid() {
		return nil, false, fmt.Errorf("pod subnets: no valid pod network")
	}
	pod = pod.Masked()
	bits := SubnetBits(pod)
	out := Allocation{}
	var used []netip.Prefix
	for _, w := range workers {
		s, ok := existing[w]
		if !ok || s.Bits() != bits || s != s.Masked() || !pod.Contains(s.Addr()) {
			continue
		}
		if slices.ContainsFunc(used, s.Overlaps) {
			continue // two workers on one subnet (an edited file): the second gets a new one
		}
		out[w] = s
		used = append(used, s)
	}
	next := 0
	for _, w := range workers {
		if _, ok := out[w]; ok {
			continue
		}
		for {
			s, ok := nth(pod, bits, next)
			if !ok {
				return nil, false, usererr.Errorf(
					fmt.Sprintf("each worker takes a /%d of network.podCIDR: widen it (a /16 holds 256 workers) or remove workers", bits),
					"network.podCIDR %s has no free /%d subnet left for worker %s", pod, bits, w)
			}
			next++
			if !slices.ContainsFunc(used, s.Overlaps) {
				out[w] = s
				used = append(used, s)
				break
			}
		}
	}
	return out, !out.Equal(existing), nil
}

// file is pod-subnets.yaml.
type file struct {
	Subnets map[string]string `yaml:"subnets"`
}

const header = `# Pod subnets of the workers, written by hardway. Keep this file with the
# rest of the state directory: a worker keeps its subnet as long as it is
# listed here, so that removing one worker never renumbers another.
`

// Load reads an allocation; a missing file is an empty allocation.
func Load(path string) (Allocation, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Allocation{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod subnets: %w", err)
	}
	hint := "the file is written by hardway; restore it from your backup of the state directory (deleting it gives workers new subnets)"
	var f file
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), hint)
	}
	out := Allocation{}
	for w, s := range f.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usererr.New(fmt.Errorf("%s: worker %s: %w", path, w, err), hint)
		}
		out[w] = p
	}
	return out, nil
}

// Marshal is the file's content: sorted, so the same allocation is always
// the same bytes.
func Marshal(a Allocation) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	if len(a) == 0 {
		b.WriteString("subnets: {}\n")
		return b.Bytes()
	}
	b.WriteString("subnets:\n")
	for _, w := range slices.Sorted(maps.Keys(a)) {
		fmt.Fprintf(&b, "  %s: %s\n", w, a[w])
	}
	return b.Bytes()
}

// Save writes a atomically (a crash leaves the old file or the new one).
func Save(path string, a Allocation) error {
	if err := fsutil.WriteFile(path, Marshal(a), 0o644); err != nil {
		return fmt.Errorf("pod subnets: %w", err)
	}
	return nil
}

// ForInventory loads the state directory's allocation and allocates for
// inv's workers, writing nothing: what 'hardway render' and a Plan use.
// changed says that Save must run before the result is pushed anywhere.
// With network.cni none hardway allocates nothing (the CNI does).
func ForInventory(d state.Dir, inv *inventory.Inventory) (Allocation, bool, error) {
	existing, err := Load(d.PodSubnets())
	if err != nil {
		return nil, false, err
	}
	if inv.Network.CNI == inventory.CNINone {
		return existing, false, nil
	}
	names := make([]string, len(inv.Workers))
	for i, w := range inv.Workers {
		names[i] = w.Name
	}
	return Allocate(existing, names, inv.Network.PodNet())
}

// String is "worker-1=10.200.0.0/24, ..." in name order.
func (a Allocation) String() string {
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, w+"="+a[w].String())
	}
	return strings.Join(parts, ", ")
}
