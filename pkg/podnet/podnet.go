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
// A worker removed from the inventory keeps its subnet (and the file keeps
// how hardway reached it over SSH) until `up` has drained it, stopped it and
// deleted its Node: only then is the subnet free for another worker, so that
// no new worker's pods share addresses with pods the old one may still run.
//
// Allocate is pure; Load and Save are the only I/O, for the caller to do
// (a Plan reads, an Action writes).
package podnet

import (
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"
	"strings"

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

// String is "worker-1=10.200.0.0/24, ..." in name order.
func (a Allocation) String() string {
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, w+"="+a[w].String())
	}
	return strings.Join(parts, ", ")
}
