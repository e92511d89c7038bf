package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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

// State is pod-subnets.yaml: each worker's subnet, and how hardway reached
// each worker. A worker the inventory no longer lists stays in both until
// `up` has removed it (see Removed and Without).
type State struct {
	Subnets Allocation
	Hosts   map[string]Host
}

// Host is how hardway reaches a worker over SSH, as the inventory said when
// it was last recorded: what `up` needs to stop the kubelet of a worker
// removed from the inventory (the global ssh settings still come from it).
type Host struct {
	Address         string         `yaml:"address"`
	InternalAddress string         `yaml:"internalAddress,omitempty"`
	SSH             *inventory.SSH `yaml:"ssh,omitempty"`
}

// InventoryHost is h as an inventory host named name.
func (h Host) InventoryHost(name string) inventory.Host {
	return inventory.Host{Name: name, Address: h.Address, InternalAddress: h.InternalAddress, SSH: h.SSH}
}

func hostOf(h inventory.Host) Host {
	return Host{Address: h.Address, InternalAddress: h.InternalAddress, SSH: h.SSH}
}

// Equal reports whether s and o hold the same subnets and hosts.
func (s *State) Equal(o *State) bool {
	return s.Subnets.Equal(o.Subnets) && maps.EqualFunc(s.Hosts, o.Hosts, func(a, b Host) bool {
		ya, _ := yaml.Marshal(a)
		yb, _ := yaml.Marshal(b)
		return bytes.Equal(ya, yb)
	})
}

// Without is s less the named workers: their subnets are free.
func (s *State) Without(names ...string) *State {
	out := &State{Subnets: maps.Clone(s.Subnets), Hosts: maps.Clone(s.Hosts)}
	if out.Subnets == nil {
		out.Subnets = Allocation{}
	}
	for _, n := range names {
		delete(out.Subnets, n)
		delete(out.Hosts, n)
	}
	return out
}

// Removed are the workers s lists that inv does not, sorted: removed from
// the inventory, and not yet cleaned up by `up`.
func (s *State) Removed(inv *inventory.Inventory) []string {
	var out []string
	for _, n := range slices.Concat(slices.Collect(maps.Keys(s.Subnets)), slices.Collect(maps.Keys(s.Hosts))) {
		if !isWorker(inv, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func isWorker(inv *inventory.Inventory, name string) bool {
	return slices.ContainsFunc(inv.Workers, func(h inventory.Host) bool { return h.Name == name })
}

// Next is the state for inv: every worker of it with its subnet (kept, or
// the lowest free one) and its host as the inventory has it; workers removed
// from the inventory keep their subnet and host until Without drops them, so
// that no new worker takes a subnet whose pods may still run. With
// network.cni none the subnets are left as they are (your CNI allocates).
func Next(cur *State, inv *inventory.Inventory) (*State, error) {
	out := &State{Subnets: maps.Clone(cur.Subnets), Hosts: map[string]Host{}}
	if out.Subnets == nil {
		out.Subnets = Allocation{}
	}
	removed := cur.Removed(inv)
	for _, n := range removed {
		if h, ok := cur.Hosts[n]; ok {
			out.Hosts[n] = h
		}
	}
	for _, w := range inv.Workers {
		out.Hosts[w.Name] = hostOf(w)
	}
	if inv.Network.CNI == inventory.CNINone {
		return out, nil
	}
	// The removed workers first, with the subnets they have: Allocate keeps
	// valid existing subnets before it hands out new ones.
	var names []string
	for _, n := range removed {
		if _, ok := cur.Subnets[n]; ok {
			names = append(names, n)
		}
	}
	for _, w := range inv.Workers {
		names = append(names, w.Name)
	}
	a, _, err := Allocate(cur.Subnets, names, inv.Network.PodNet())
	if err != nil {
		return nil, err
	}
	for _, n := range removed {
		// A removed worker's subnet that is no longer valid (podCIDR
		// changed) is not reserved: nothing new was ever routed to it.
		if a[n] != cur.Subnets[n] {
			delete(a, n)
		}
	}
	// A worker of the inventory keeps the subnet the state gave it: its
	// Node's spec.podCIDR cannot change, and a new one in the CNI config
	// would give its new pods addresses no route leads to. A podCIDR that
	// no longer holds it is refused here, before render or any push.
	var moved []string
	for _, w := range inv.Workers {
		if old, ok := cur.Subnets[w.Name]; ok && a[w.Name] != old {
			moved = append(moved, fmt.Sprintf("%s's %s (now %s)", w.Name, old, a[w.Name]))
		}
	}
	if len(moved) > 0 {
		return nil, usererr.Errorf("put network.podCIDR back to a range that holds them; to renumber the workers on purpose, delete their Nodes (kubectl delete node NAME: their pods are recreated) and their lines in "+
			"pod-subnets.yaml in the state directory, then run up",
			"network.podCIDR %s does not hold the pod subnets the workers have: %s", inv.Network.PodNet(), strings.Join(moved, ", "))
	}
	out.Subnets = a
	return out, nil
}

// file is pod-subnets.yaml.
type file struct {
	Subnets map[string]string `yaml:"subnets"`
	Hosts   map[string]Host   `yaml:"hosts,omitempty"`
}

const header = `# Pod subnets of the workers, written by hardway. Keep this file with the
# rest of the state directory: a worker keeps its subnet as long as it is
# listed here, so that removing one worker never renumbers another. hosts:
# is how hardway reaches each worker, so that 'hardway up' can still stop one
# you removed from the inventory; it and its subnet leave this file once up
# has removed the worker (drained, stopped, Node deleted).
`

// LoadState reads pod-subnets.yaml; a missing file is an empty state.
func LoadState(path string) (*State, error) {
	out := &State{Subnets: Allocation{}, Hosts: map[string]Host{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod subnets: %w", err)
	}
	hint := "the file is written by hardway; restore it from your backup of the state directory (deleting it gives workers new subnets)"
	var f file
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), hint)
	}
	for w, s := range f.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usererr.New(fmt.Errorf("%s: worker %s: %w", path, w, err), hint)
		}
		out.Subnets[w] = p
	}
	for w, h := range f.Hosts {
		out.Hosts[w] = h
	}
	return out, nil
}

// Load reads the subnets of pod-subnets.yaml; a missing file is an empty
// allocation.
func Load(path string) (Allocation, error) {
	s, err := LoadState(path)
	if err != nil {
		return nil, err
	}
	return s.Subnets, nil
}

// MarshalState is the file's content: sorted, so the same state is always
// the same bytes.
func MarshalState(s *State) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	if len(s.Subnets) == 0 {
		b.WriteString("subnets: {}\n")
	} else {
		b.WriteString("subnets:\n")
		for _, w := range slices.Sorted(maps.Keys(s.Subnets)) {
			fmt.Fprintf(&b, "  %s: %s\n", w, s.Subnets[w])
		}
	}
	if len(s.Hosts) > 0 {
		// yaml.v3 sorts map keys.
		y, err := yaml.Marshal(map[string]map[string]Host{"hosts": s.Hosts})
		if err == nil {
			b.Write(y)
		}
	}
	return b.Bytes()
}

// Marshal is the file's content for an allocation alone.
func Marshal(a Allocation) []byte { return MarshalState(&State{Subnets: a}) }

// SaveState writes s atomically (a crash leaves the old file or the new one).
func SaveState(path string, s *State) error {
	if err := fsutil.WriteFile(path, MarshalState(s), 0o644); err != nil {
		return fmt.Errorf("pod subnets: %w", err)
	}
	return nil
}

// Save writes an allocation alone (no host records) atomically.
func Save(path string, a Allocation) error { return SaveState(path, &State{Subnets: a}) }

// ForState loads the state directory's file and computes Next for inv,
// writing nothing: changed says that SaveState must run before the result
// is pushed anywhere.
func ForState(d state.Dir, inv *inventory.Inventory) (cur, next *State, changed bool, err error) {
	cur, err = LoadState(d.PodSubnets())
	if err != nil {
		return nil, nil, false, err
	}
	next, err = Next(cur, inv)
	if err != nil {
		return nil, nil, false, err
	}
	return cur, next, !next.Equal(cur), nil
}

// ForInventory is the subnet of every worker of inv (and of removed workers
// not yet cleaned up), from the state directory's file, writing nothing: what
// 'hardway render' and a Plan use. changed says that the file must be saved
// before the result is pushed anywhere.
func ForInventory(d state.Dir, inv *inventory.Inventory) (Allocation, bool, error) {
	_, next, changed, err := ForState(d, inv)
	if err != nil {
		return nil, false, err
	}
	return next.Subnets, changed, nil
}
