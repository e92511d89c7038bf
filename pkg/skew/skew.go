// Package skew decides whether a cluster may move to a target version:
// from the versions its hosts really run (not what the inventory says) it
// computes every component's move, now → target, and checks the
// documented version-skew and upgrade rules before anything is touched.
//
// It is pure logic: the observations come from pkg/cluster (binaries'
// --version over SSH, each Node's status.nodeInfo) and the result is
// printed by internal/cli. 'hardway upgrade plan' shows it; 'hardway
// upgrade apply' is to refuse exactly what it refuses.
package skew

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
)

// The components whose versions the rules speak of.
const (
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kubelet           = "kubelet"
	KubeProxy         = "kube-proxy"
	Etcd              = "etcd"
	Containerd        = "containerd"
	Runc              = "runc"
)

// Where an observation was read.
const (
	FromBinary = "binary" // '<binary> --version' on the host: what is installed
	FromNode   = "node"   // the Node's status.nodeInfo: what the kubelet that registered runs
	FromAPI    = "api"    // an apiserver's /version: what serves
)

// Role says which hosts run a component.
type Role string

const (
	ControlPlane Role = "control-plane"
	Worker       Role = "worker"
)

// Component is one row of the component table: which hosts run it and
// which part of the target it moves to.
type Component struct {
	Name   string
	Role   Role
	target func(Target) *version.Version
}

// Components is the component table, in the order an upgrade moves them:
// etcd, the apiservers, their clients, then each worker's runtime before its
// kubelet and kube-proxy.
func Components() []Component {
	k8s := func(t Target) *version.Version { return t.Kubernetes }
	return []Component{
		{Etcd, ControlPlane, func(t Target) *version.Version { return t.Etcd }},
		{APIServer, ControlPlane, k8s},
		{ControllerManager, ControlPlane, k8s},
		{Scheduler, ControlPlane, k8s},
		{Containerd, Worker, func(t Target) *version.Version { return t.Containerd }},
		{Runc, Worker, func(t Target) *version.Version { return t.Runc }},
		{Kubelet, Worker, k8s},
		{KubeProxy, Worker, k8s},
	}
}

// Names are the components hosts of role run, in upgrade order.
func Names(role Role) []string {
	var out []string
	for _, c := range Components() {
		if c.Role == role {
			out = append(out, c.Name)
		}
	}
	return out
}

func lookup(name string) (Component, bool) {
	i := slices.IndexFunc(Components(), func(c Component) bool { return c.Name == name })
	if i < 0 {
		return Component{}, false
	}
	return Components()[i], true
}

// Observation is one component's version as read on one host.
type Observation struct {
	Host      string           `json:"host"`
	Component string           `json:"component"`
	Source    string           `json:"source"` // FromBinary or FromNode
	Version   *version.Version `json:"-"`      // nil when it could not be read
	Raw       string           `json:"version,omitempty"`
	// Err says why the version could not be read (host unreachable,
	// binary missing, output not understood). The plan is then blocked:
	// it cannot prove a rule it cannot evaluate.
	Err string `json:"error,omitempty"`
}

// Target is what the cluster is to run after the upgrade.
type Target struct {
	Kubernetes *version.Version
	Etcd       *version.Version
	Containerd *version.Version // nil: no workers
	Runc       *version.Version
}

// For is the target version of the named component (nil: none).
func (t Target) For(component string) *version.Version {
	c, ok := lookup(component)
	if !ok {
		return nil
	}
	return c.target(t)
}

// Input is what Check decides from.
type Input struct {
	Observed []Observation
	Target   Target
	// AllowDowngrade lets a target older than what runs pass (the caller
	// asked for a downgrade on purpose).
	AllowDowngrade bool
}

// Change classes of a Move.
const (
	Upgrade   = "upgrade"
	Same      = "none"
	Downgrade = "downgrade"
	Unknown   = "unknown" // the running version could not be read
)

// Move is one component on one host, now → target.
type Move struct {
	Host      string `json:"host"`
	Component string `json:"component"`
	Now       string `json:"now"` // "v1.35.2"; "?" when unknown
	Target    string `json:"target"`
	Change    string `json:"change"`
}

// Violation is one broken rule, with its fix.
type Violation struct {
	Rule      string `json:"rule"`
	Host      string `json:"host,omitempty"`
	Component string `json:"component,omitempty"`
	Message   string `json:"message"`
	Fix       string `json:"fix"`
}

// Result is the plan's verdict.
type Result struct {
	Moves      []Move      `json:"moves"`
	Violations []Violation `json:"violations"`
}

// Blocked says whether any rule refuses the upgrade.
func (r Result) Blocked() bool { return len(r.Violations) > 0 }

// Check computes the moves and every violation, in rule order.
func Check(in Input) Result {
	res := Result{Moves: moves(in), Violations: []Violation{}}
	st := newState(in)
	for _, r := range Rules() {
		for _, v := range r.check(st) {
			v.Rule = r.Name
			res.Violations = append(res.Violations, v)
		}
	}
	return res
}

// runningRules are the rules that hold between running components
// whatever the target: what verify checks on a live cluster.
var runningRules = []string{"apiserver-skew", "controller-manager-scheduler", "kubelet-kube-proxy"}

// Running checks the running versions against the rules that need no
// target (apiservers within one minor, controllers and kubelets never
// newer than the oldest apiserver nor too far behind): a skew a stopped
// upgrade or a hand-installed binary left. Observations without a
// version are left out, not reported.
func Running(observed []Observation) []Violation {
	st := newState(Input{Observed: observed})
	out := []Violation{}
	for _, r := range Rules() {
		if !slices.Contains(runningRules, r.Name) {
			continue
		}
		for _, v := range r.check(st) {
			v.Rule = r.Name
			out = append(out, v)
		}
	}
	return out
}

// moves: one per host and component. The binary's version is what the
// host will run after a restart; a Node's kubelet version stands in when
// the binary could not be read.
func moves(in Input) []Move {
	type key struct{ host, comp string }
	best := map[key]Observation{}
	hostOrder := map[string]int{}
	rank := func(o Observation) int {
		switch {
		case o.Version != nil && o.Source == FromBinary:
			return 2
		case o.Version != nil:
			return 1
		}
		return 0
	}
	for _, o := range in.Observed {
		if _, ok := hostOrder[o.Host]; !ok {
			hostOrder[o.Host] = len(hostOrder)
		}
		k := key{o.Host, o.Component}
		if b, ok := best[k]; !ok || rank(o) > rank(b) {
			best[k] = o
		}
	}
	var out []Move
	for _, o := range best {
		m := Move{Host: o.Host, Component: o.Component, Now: "?", Target: "-", Change: Unknown}
		t := in.Target.For(o.Component)
		if t != nil {
			m.Target = Tag(t)
		}
		if o.Version != nil {
			m.Now = Tag(o.Version)
			m.Change = Same
			if t != nil {
				switch c := o.Version.Compare(t); {
				case c < 0:
					m.Change = Upgrade
				case c > 0:
					m.Change = Downgrade
				}
			}
		}
		out = append(out, m)
	}
	order := map[string]int{}
	for i, c := range Components() {
		order[c.Name] = i
	}
	// Hosts in the order observed, each host's components in upgrade order.
	slices.SortFunc(out, func(a, b Move) int {
		if d := hostOrder[a.Host] - hostOrder[b.Host]; d != 0 {
			return d
		}
		return order[a.Component] - order[b.Component]
	})
	return out
}

// Tag is "v" + the version, as releases are tagged.
func Tag(v *version.Version) string { return "v" + v.String() }

// minorOf is "1.36" for 1.36.3.
func minorOf(v *version.Version) string {
	s := v.Segments()
	return fmt.Sprintf("%d.%d", s[0], s[1])
}

func minor(v *version.Version) int { return v.Segments()[1] }

// reVersion finds the first X.Y.Z (with an optional pre-release) in a
// --version output: "Kubernetes v1.36.3", "etcd Version: 3.6.16",
// "containerd github.com/containerd/containerd/v2 v2.4.2 <sha>",
// "runc version 1.5.3".
var reVersion = regexp.MustCompile(`(?:^|[\s:])v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)(?:\s|$|\+)`)

// ParseVersionOutput reads the version out of a binary's --version output.
func ParseVersionOutput(out string) (*version.Version, error) {
	for _, line := range strings.Split(out, "\n") {
		if g := reVersion.FindStringSubmatch(line); g != nil {
			v, err := version.NewSemver(g[1])
			if err != nil {
				return nil, fmt.Errorf("version %q: %w", g[1], err)
			}
			return v, nil
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return nil, fmt.Errorf("no version in %q", first)
}
