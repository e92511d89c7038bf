package skew

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
)

// The facts the rules read, one table each, with where they come from. A
// fact that changes upstream is one row to correct here.

// etcdFloors: before etcd moves into minor To, every member must run at
// least Floor (the patch releases before it have upgrade blockers).
var etcdFloors = []struct {
	To, Floor string
	Source    string
}{
	// etcd.io/docs/latest/upgrades/upgrade_3_6 ("Update 3.5"): "make sure
	// that all of your 3.5 members are updated to 3.5.26 or later. Patch
	// releases 3.5.24 through 3.5.26 fix several potential upgrade
	// blockers." The v3.6 page of the same guide first said 3.5.20 (the
	// "too many learner member" error); the newest guide is what counts.
	{To: "3.6", Floor: "3.5.26", Source: "etcd.io/docs/latest/upgrades/upgrade_3_6"},
	// 3.6 → 3.7: the upgrade guide names no floor beyond etcd's general
	// rule ("update to the most recent patch version before upgrading to
	// the next minor"), which a plan cannot check offline.
}

// containerdFloors: the oldest containerd a kubelet of a version works with.
var containerdFloors = []struct {
	Kubelet, Containerd string
	Source              string
}{
	// SIG Node: Kubernetes 1.35 is the last release that supports
	// containerd 1.x; from 1.36 every node needs containerd 2.x first.
	// hardway's worker table (pkg/inventory workerTable) ships v2.4.2.
	{Kubelet: ">= 1.36.0", Containerd: "2.0.0", Source: "Kubernetes 1.35 release notes: last release supporting containerd 1.x"},
}

// runcFloors: the oldest runc a containerd of a version is tested with.
var runcFloors = []struct {
	Containerd, Runc string
	Source           string
}{
	// containerd docs/RUNC.md: use a runc "equal to or higher than" the one
	// in the release's script/setup/runc-version; containerd 2.0.0 pinned
	// runc v1.2.x. hardway's worker table ships runc v1.5.3.
	{Containerd: ">= 2.0.0", Runc: "1.2.0", Source: "containerd docs/RUNC.md and script/setup/runc-version (2.0.0: runc v1.2)"},
}

// Rule is one row of the rule table.
type Rule struct {
	Name   string // "control-plane-one-minor": the prefix of each violation
	Doc    string // one line, for --help
	Source string // where the rule is documented
	check  func(s *state) []Violation
}

// Rules is the rule table, in the order violations are reported.
func Rules() []Rule {
	return []Rule{
		{"unreadable", "every component's running version must be read: a rule that cannot be evaluated blocks",
			"hardway: the plan decides from what runs, not from the inventory", ruleUnreadable},
		{"target-supported", "the target Kubernetes and etcd are versions hardway renders for",
			"pkg/inventory: supported ranges", ruleTargetSupported},
		{"downgrade", "a target older than what runs (minor or patch) is refused unless --allow-downgrade",
			"kubernetes.io/releases/version-skew-policy (upgrades only; kubeadm refuses downgrades too)", ruleDowngrade},
		{"control-plane-one-minor", "the control plane moves one minor at a time (1.35 → 1.37 is refused: 1.36 first)",
			"kubernetes.io/releases/version-skew-policy#supported-component-upgrade-order", ruleOneMinor},
		{"apiserver-skew", "the kube-apiservers are within one minor of each other, now and during the roll",
			"kubernetes.io/releases/version-skew-policy#kube-apiserver", ruleAPIServerSkew},
		{"controller-manager-scheduler", "kube-controller-manager and kube-scheduler are never newer than the oldest apiserver, at most one minor older",
			"kubernetes.io/releases/version-skew-policy#kube-controller-manager-kube-scheduler-and-cloud-controller-manager", ruleControllers},
		{"kubelet-kube-proxy", "kubelet and kube-proxy are never newer than the oldest apiserver and at most three minors older, also with the control plane at the target",
			"kubernetes.io/releases/version-skew-policy#kubelet and #kube-proxy", ruleKubelets},
		{"etcd-supported", "etcd is a minor the target Kubernetes is paired with",
			"kubeadm cmd/kubeadm/app/constants (SupportedEtcdVersion); pkg/inventory etcdTable", ruleEtcdSupported},
		{"etcd-one-minor", "etcd moves one minor at a time",
			"etcd.io/docs/v3.6/upgrades/upgrading-etcd: \"Upgrading one minor version at a time\"", ruleEtcdOneMinor},
		{"etcd-patch-floor", "before etcd moves to a new minor every member runs at least that minor's documented patch floor",
			"etcd.io/docs/latest/upgrades/upgrade_3_6", ruleEtcdFloor},
		{"container-runtime", "containerd and runc are versions the target kubelet supports",
			"Kubernetes 1.35 release notes (last with containerd 1.x); containerd docs/RUNC.md", ruleRuntime},
	}
}

// state is the input with the facts every rule needs worked out once.
type state struct {
	in        Input
	t         Target
	oldestAPI *Observation // nil: no apiserver version read
}

func newState(in Input) *state {
	s := &state{in: in, t: in.Target}
	for _, o := range s.of(APIServer) {
		if s.oldestAPI == nil || o.Version.LessThan(s.oldestAPI.Version) {
			o := o
			s.oldestAPI = &o
		}
	}
	return s
}

// of are the observations with a version of the named components.
func (s *state) of(comps ...string) []Observation {
	var out []Observation
	for _, o := range s.in.Observed {
		if o.Version != nil && slices.Contains(comps, o.Component) {
			out = append(out, o)
		}
	}
	return out
}

// where names an observation: "kubelet on w1" (", as its Node reports" for
// a Node's version).
func where(o Observation) string {
	s := o.Component + " on " + o.Host
	if o.Source == FromNode {
		s += " (its Node)"
	}
	return s
}

func ruleUnreadable(s *state) []Violation {
	var out []Violation
	for _, o := range s.in.Observed {
		if o.Version != nil {
			continue
		}
		out = append(out, Violation{Host: o.Host, Component: o.Component,
			Message: fmt.Sprintf("cannot read the %s version on %s: %s", o.Component, o.Host, o.Err),
			Fix:     "check the host and the binary with 'hardway verify', then plan again"})
	}
	return out
}

func ruleTargetSupported(s *state) []Violation {
	var out []Violation
	if k := s.t.Kubernetes; k != nil && !inventory.SupportsKubernetes(k) {
		out = append(out, Violation{Component: APIServer,
			Message: fmt.Sprintf("Kubernetes %s is outside what hardway supports (1.30 to 1.37)", Tag(k)),
			Fix:     "pick a target within 1.30 to 1.37: hardway upgrade plan --to 1." + fmt.Sprint(min(max(minor(k), 30), 37))})
	}
	if e := s.t.Etcd; e != nil && !inventory.SupportsEtcd(e) {
		out = append(out, Violation{Component: Etcd,
			Message: fmt.Sprintf("etcd %s is outside what hardway supports (3.5 to 3.7)", Tag(e)),
			Fix:     "leave etcdVersion out of the inventory to get the tested etcd of the target Kubernetes"})
	}
	return out
}

func ruleDowngrade(s *state) []Violation {
	if s.in.AllowDowngrade {
		return nil
	}
	var out []Violation
	for _, o := range s.in.Observed {
		t := s.t.For(o.Component)
		if o.Version == nil || t == nil || !t.LessThan(o.Version) {
			continue
		}
		kind := "a minor downgrade"
		if minorOf(t) == minorOf(o.Version) {
			kind = "a patch downgrade"
		}
		if t.Segments()[0] != o.Version.Segments()[0] {
			kind = "a major downgrade"
		}
		out = append(out, Violation{Host: o.Host, Component: o.Component,
			Message: fmt.Sprintf("%s runs %s; the target %s is %s", where(o), Tag(o.Version), Tag(t), kind),
			Fix:     fmt.Sprintf("target %s or later, or pass --allow-downgrade if the downgrade is meant", Tag(o.Version))})
	}
	return out
}

// The control plane moves one minor at a time: an apiserver at the target
// while another is still at the current version must be within one minor.
func ruleOneMinor(s *state) []Violation {
	t := s.t.Kubernetes
	if t == nil {
		return nil
	}
	var out []Violation
	for _, o := range s.of(APIServer, ControllerManager, Scheduler) {
		if minor(t)-minor(o.Version) <= 1 || o.Version.Segments()[0] != t.Segments()[0] {
			continue
		}
		next := fmt.Sprintf("%d.%d", t.Segments()[0], minor(o.Version)+1)
		out = append(out, Violation{Host: o.Host, Component: o.Component,
			Message: fmt.Sprintf("%s runs %s; %s skips %s", where(o), Tag(o.Version), Tag(t), strings.Join(skipped(o.Version, t), ", ")),
			Fix:     fmt.Sprintf("upgrade to v%s.x first: hardway upgrade apply --to %s", next, next)})
	}
	return dedupeByHostMinor(out)
}

// skipped are the minors between from and to, exclusive.
func skipped(from, to *version.Version) []string {
	var out []string
	for m := minor(from) + 1; m < minor(to); m++ {
		out = append(out, fmt.Sprintf("%d.%d", to.Segments()[0], m))
	}
	return out
}

// dedupeByHostMinor keeps one one-minor violation per host: the three
// control-plane binaries of a host are one step to take, not three.
func dedupeByHostMinor(vs []Violation) []Violation {
	seen := map[string]bool{}
	var out []Violation
	for _, v := range vs {
		if seen[v.Host] {
			continue
		}
		seen[v.Host] = true
		out = append(out, v)
	}
	return out
}

func ruleAPIServerSkew(s *state) []Violation {
	api := s.of(APIServer)
	if len(api) == 0 {
		return nil
	}
	lo, hi := api[0], api[0]
	for _, o := range api {
		if o.Version.LessThan(lo.Version) {
			lo = o
		}
		if hi.Version.LessThan(o.Version) {
			hi = o
		}
	}
	if minor(hi.Version)-minor(lo.Version) <= 1 {
		// During the roll the spread is the target against the oldest: the
		// one-minor rule refuses exactly that, per host.
		return nil
	}
	return []Violation{{Host: lo.Host, Component: APIServer,
		Message: fmt.Sprintf("the apiservers span %s (%s) to %s (%s): more than one minor apart now", Tag(lo.Version), lo.Host, Tag(hi.Version), hi.Host),
		Fix:     fmt.Sprintf("bring %s's apiserver to %d.%d first (an interrupted upgrade? 'hardway upgrade apply' finishes it)", lo.Host, hi.Version.Segments()[0], minor(hi.Version)-1)}}
}

func ruleControllers(s *state) []Violation {
	if s.oldestAPI == nil {
		return nil
	}
	api := s.oldestAPI
	var out []Violation
	fixNow := fmt.Sprintf("bring the control plane to one version first: hardway upgrade apply --to %s", minorOf(api.Version))
	for _, o := range s.of(ControllerManager, Scheduler) {
		switch {
		case minor(o.Version) > minor(api.Version):
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s, newer than the oldest apiserver (%s on %s)", where(o), Tag(o.Version), Tag(api.Version), api.Host),
				Fix:     fmt.Sprintf("upgrade the apiserver on %s to %s first, or put %s back to %s with 'hardway up'", api.Host, minorOf(o.Version), o.Component, minorOf(api.Version))})
		case minor(api.Version)-minor(o.Version) > 1:
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s, more than one minor older than the oldest apiserver (%s on %s)", where(o), Tag(o.Version), Tag(api.Version), api.Host),
				Fix:     fixNow})
		case s.t.Kubernetes != nil && minor(s.t.Kubernetes)-minor(api.Version) <= 1 && minor(s.t.Kubernetes)-minor(o.Version) > 1:
			// The apiservers move first: with them at the target, this one
			// would be two minors behind until its turn.
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s; with the apiservers at %s it would be more than one minor older", where(o), Tag(o.Version), Tag(s.t.Kubernetes)),
				Fix:     fixNow})
		}
	}
	return out
}

// maxKubeletSkew: kubelet and kube-proxy may be up to three minors older
// than kube-apiserver (version-skew-policy, since 1.28).
const maxKubeletSkew = 3

func ruleKubelets(s *state) []Violation {
	var out []Violation
	api := s.oldestAPI
	t := s.t.Kubernetes
	for _, o := range s.of(Kubelet, KubeProxy) {
		switch {
		case api != nil && minor(o.Version) > minor(api.Version):
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s, newer than the oldest apiserver (%s on %s)", where(o), Tag(o.Version), Tag(api.Version), api.Host),
				Fix:     fmt.Sprintf("put %s on %s back to the control plane's version with 'hardway up' (it installs the inventory's), then plan again", o.Component, o.Host)})
		case api != nil && minor(api.Version)-minor(o.Version) > maxKubeletSkew:
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s, more than %d minors older than the oldest apiserver (%s on %s)", where(o), Tag(o.Version), maxKubeletSkew, Tag(api.Version), api.Host),
				Fix:     fmt.Sprintf("upgrade %s on %s to the control plane's version first: hardway up", o.Component, o.Host)})
		case t != nil && minor(t)-minor(o.Version) > maxKubeletSkew:
			// The workers move after the control plane: until its turn this
			// one would run against apiservers at the target.
			fix := fmt.Sprintf("upgrade %s on %s to %d.%d or later first", o.Component, o.Host, t.Segments()[0], minor(t)-maxKubeletSkew)
			if api != nil {
				fix += ": hardway upgrade apply --to " + minorOf(api.Version) + " (the workers follow the control plane)"
			}
			out = append(out, Violation{Host: o.Host, Component: o.Component,
				Message: fmt.Sprintf("%s runs %s; with the control plane at %s it would be %d minors behind (at most %d)", where(o), Tag(o.Version), Tag(t), minor(t)-minor(o.Version), maxKubeletSkew),
				Fix:     fix})
		}
	}
	// kube-proxy may be up to three minors older or newer than the kubelet
	// beside it.
	kubelets := map[string]*version.Version{}
	for _, o := range s.of(Kubelet) {
		if o.Source == FromBinary {
			kubelets[o.Host] = o.Version
		}
	}
	for _, o := range s.of(KubeProxy) {
		k, ok := kubelets[o.Host]
		if !ok {
			continue
		}
		if d := minor(o.Version) - minor(k); d > maxKubeletSkew || -d > maxKubeletSkew {
			out = append(out, Violation{Host: o.Host, Component: KubeProxy,
				Message: fmt.Sprintf("kube-proxy on %s runs %s, more than %d minors from its kubelet (%s)", o.Host, Tag(o.Version), maxKubeletSkew, Tag(k)),
				Fix:     fmt.Sprintf("bring %s's kubelet and kube-proxy to the control plane's version first: hardway up", o.Host)})
		}
	}
	return out
}

func ruleEtcdSupported(s *state) []Violation {
	k, e := s.t.Kubernetes, s.t.Etcd
	if k == nil || e == nil {
		return nil
	}
	minors := inventory.EtcdMinorsFor(k)
	if minors == nil || (e.Segments()[0] == 3 && slices.Contains(minors, minor(e))) {
		return nil
	}
	var want []string
	for _, m := range minors {
		want = append(want, fmt.Sprintf("3.%d", m))
	}
	fix := "set etcdVersion to a " + strings.Join(want, " or ") + " release"
	if d := inventory.DefaultEtcdFor(k); d != "" {
		fix = "leave etcdVersion out of the inventory (Kubernetes " + minorOf(k) + " defaults to " + d + "), or " + fix
	}
	return []Violation{{Component: Etcd,
		Message: fmt.Sprintf("etcd %s is not paired with Kubernetes %s (it is tested with etcd %s)", Tag(e), minorOf(k), strings.Join(want, ", ")),
		Fix:     fix}}
}

func ruleEtcdOneMinor(s *state) []Violation {
	t := s.t.Etcd
	if t == nil {
		return nil
	}
	var out []Violation
	for _, o := range s.of(Etcd) {
		if o.Version.Segments()[0] != t.Segments()[0] || minor(t)-minor(o.Version) <= 1 {
			continue
		}
		out = append(out, Violation{Host: o.Host, Component: Etcd,
			Message: fmt.Sprintf("etcd on %s runs %s; %s skips %s", o.Host, Tag(o.Version), Tag(t), strings.Join(skipped(o.Version, t), ", ")),
			Fix:     fmt.Sprintf("upgrade etcd to the newest 3.%d patch first (etcdVersion in the inventory, then 'hardway up')", minor(o.Version)+1)})
	}
	return out
}

func ruleEtcdFloor(s *state) []Violation {
	t := s.t.Etcd
	if t == nil {
		return nil
	}
	var out []Violation
	for _, o := range s.of(Etcd) {
		if !o.Version.LessThan(t) || minorOf(o.Version) == minorOf(t) {
			continue
		}
		for _, f := range etcdFloors {
			floor := version.Must(version.NewVersion(f.Floor))
			if f.To != minorOf(t) || minorOf(floor) != minorOf(o.Version) || !o.Version.LessThan(floor) {
				continue
			}
			out = append(out, Violation{Host: o.Host, Component: Etcd,
				Message: fmt.Sprintf("etcd on %s runs %s; moving to %s needs %s or later first (%s)", o.Host, Tag(o.Version), f.To, Tag(floor), f.Source),
				Fix:     fmt.Sprintf("upgrade etcd within %s first: set etcdVersion: %s (or a later %s) in the inventory, run 'hardway up', then plan again", minorOf(o.Version), Tag(floor), minorOf(o.Version))})
		}
	}
	return out
}

func ruleRuntime(s *state) []Violation {
	var out []Violation
	k, c, r := s.t.Kubernetes, s.t.Containerd, s.t.Runc
	if k != nil && c != nil {
		for _, f := range containerdFloors {
			if !version.MustConstraints(version.NewConstraint(f.Kubelet)).Check(k.Core()) {
				continue
			}
			if floor := version.Must(version.NewVersion(f.Containerd)); c.LessThan(floor) {
				out = append(out, Violation{Component: Containerd,
					Message: fmt.Sprintf("the target containerd %s is older than %s, the oldest kubelet %s works with (%s)", Tag(c), Tag(floor), minorOf(k), f.Source),
					Fix:     "leave containerdVersion out of the inventory for the tested one, or set it to " + Tag(floor) + " or later"})
			}
			break // the first row that applies is the one that counts
		}
	}
	if c != nil && r != nil {
		for _, f := range runcFloors {
			if !version.MustConstraints(version.NewConstraint(f.Containerd)).Check(c.Core()) {
				continue
			}
			if floor := version.Must(version.NewVersion(f.Runc)); r.LessThan(floor) {
				out = append(out, Violation{Component: Runc,
					Message: fmt.Sprintf("the target runc %s is older than %s, the oldest containerd %s is tested with (%s)", Tag(r), Tag(floor), minorOf(c), f.Source),
					Fix:     "leave runcVersion out of the inventory for the tested one, or set it to " + Tag(floor) + " or later"})
			}
			break
		}
	}
	return out
}
