package cluster

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	k8sversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// A phase's push writes only its hosts' files of its components: c2's
// apiserver unit, not c1's nor c2's scheduler unit that also drifted.
func TestScopedPushWritesOnlyItsHostAndComponents(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	ctx := context.Background()
	for _, h := range []string{"c1", "c2"} {
		for _, comp := range []string{units.APIServer, units.Scheduler} {
			p := units.UnitPath(comp)
			fc.model[h].files[p] = "644 root 0 root 0 12 0000"
			fc.model[h].content[p] = "[Service]\nExecStart=/bin/false\n"
		}
	}
	all, err := fc.planPush(ctx, nil)
	if err != nil || len(all) != 4 {
		t.Fatalf("unscoped: %v %q (want the 4 drifted units: the test proves nothing otherwise)", err, descs(all))
	}
	fc.opt.Scope = &Scope{Hosts: []string{"c2"}, Components: []string{units.APIServer}}
	as, err := fc.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Host != "c2" || !strings.Contains(as[0].Desc, units.UnitPath(units.APIServer)) {
		t.Fatalf("scoped push: %q", descs(as))
	}
	// A scope with no components takes every file of its hosts.
	fc.opt.Scope = &Scope{Hosts: []string{"c1"}}
	as, err = fc.planPush(ctx, nil)
	if err != nil || len(as) != 2 || as[0].Host != "c1" || as[1].Host != "c1" {
		t.Fatalf("host scope: %v %q", err, descs(as))
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}
}

// The phases: etcd followers first and the leader last, each apiserver,
// the controllers together, each worker, and a last whole up; a downgrade
// runs them the other way round, the last up still last.
func TestUpgradePhases(t *testing.T) {
	cp, workers, nodes := healthy("1.35.4", "3.6.15")
	fx := newUpgradeFixture(t, cp, workers, nodes)
	e := &fakeEtcd{health: map[string]bool{}}
	e.converged(fx.c.Inv)
	// c2 leads: the fake's leader is its first member.
	e.members[0], e.members[1] = e.members[1], e.members[0]
	fx.c.newEtcd = func() (etcdAPI, error) { return e, nil }
	ctx := context.Background()
	p, err := fx.c.PlanUpgrade(ctx, UpgradeOptions{To: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Blocked() {
		t.Fatalf("blocked: %q", violations(p))
	}
	names := func(ps []UpgradePhase) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	phases := fx.c.UpgradePhases(ctx, p)
	want := []string{"etcd c1", "etcd c3", "etcd c2", "kube-apiserver c1", "kube-apiserver c2", "kube-apiserver c3", "controllers", "worker w1", "worker w2", "finish"}
	if got := names(phases); !slices.Equal(got, want) {
		t.Fatalf("phases:\n  %q\nwant\n  %q", got, want)
	}
	for _, ph := range phases {
		switch ph.Kind {
		case PhaseEtcd:
			if !slices.Equal(ph.Components, []string{units.Etcd}) || len(ph.Hosts) != 1 {
				t.Errorf("%s: %+v", ph.Name, ph)
			}
		case PhaseWorker:
			if ph.Components != nil || !strings.Contains(ph.Desc, "cordon, drain, kubelet v1.35.4 → v1.36.3, kube-proxy v1.35.4 → v1.36.3") {
				t.Errorf("%s: %+v", ph.Name, ph)
			}
		}
	}
	if !strings.Contains(phases[2].Desc, "(leader)") || !strings.Contains(phases[0].Desc, "etcd v3.6.15 → v3.6.16 on c1 (follower)") {
		t.Errorf("etcd descs: %q / %q", phases[0].Desc, phases[2].Desc)
	}

	// A downgrade: workers first.
	cp, workers, nodes = healthy("1.36.3", "3.6.16")
	fx = newUpgradeFixture(t, cp, workers, nodes)
	p, err = fx.c.PlanUpgrade(ctx, UpgradeOptions{To: "v1.35.4", AllowDowngrade: true})
	if err != nil {
		t.Fatal(err)
	}
	got := names(fx.c.UpgradePhases(ctx, p))
	want = []string{"worker w1", "worker w2", "controllers", "kube-apiserver c1", "kube-apiserver c2", "kube-apiserver c3", "finish"}
	if !slices.Equal(got, want) {
		t.Errorf("downgrade phases:\n  %q\nwant\n  %q", got, want)
	}
}

// While an upgrade is half-way, up refuses before it reads a host, and
// names what finishes it; the upgrade's own runs are not refused.
func TestUpRefusesDuringAnUpgrade(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	rec := &UpgradeRecord{From: "v1.35.4", To: "v1.36.3", Started: time.Now(),
		Phases: []UpgradePhase{{Name: "kube-apiserver c1"}, {Name: "worker w1"}, {Name: "finish"}}, Done: []string{"kube-apiserver c1"}}
	if err := SaveUpgrade(st, rec); err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	r := &plan.Runner{Out: &strings.Builder{}, DryRun: true}
	_, err := r.Run(context.Background(), fc.Steps())
	if err == nil || !strings.Contains(err.Error(), "an upgrade from v1.35.4 to v1.36.3 is half-way: 1 of 3 phases done; left: worker w1, finish") ||
		!strings.Contains(usererr.HintOf(err), "'hardway upgrade apply' finishes it") {
		t.Fatalf("up during an upgrade: %v (hint %q)", err, usererr.HintOf(err))
	}
	for _, h := range inv.ControlPlane {
		if n := len(fc.commands(h.Name)); n != 0 {
			t.Errorf("%s was asked %d command(s) before the refusal", h.Name, n)
		}
	}
	up := newFakeCluster(t, inv, Options{State: st, Upgrading: true}, models(inv, runningHost))
	steps := up.Steps()
	if _, err := steps[0].Plan(context.Background(), nil); err != nil && strings.Contains(err.Error(), "half-way") {
		t.Errorf("the upgrade's own run was refused: %v", err)
	}
}

// The record round-trips, and Left follows Done.
func TestUpgradeRecord(t *testing.T) {
	st := state.Dir(filepath.Join(t.TempDir(), ".hardway"))
	if r, err := LoadUpgrade(st); r != nil || err != nil {
		t.Fatalf("no record: %v %v", r, err)
	}
	rec := &UpgradeRecord{From: "v1.35.4", To: "v1.36.3", Phases: []UpgradePhase{{Name: "a"}, {Name: "b", Hosts: []string{"w1"}}}, Done: []string{"a"}, Cordoned: []string{"w1"}}
	if err := SaveUpgrade(st, rec); err != nil {
		t.Fatal(err)
	}
	got, err := LoadUpgrade(st)
	if err != nil || got == nil || got.To != "v1.36.3" || len(got.Left()) != 1 || got.Left()[0].Name != "b" || !slices.Equal(got.Cordoned, []string{"w1"}) {
		t.Fatalf("%+v %v", got, err)
	}
	if err := FinishUpgrade(st); err != nil {
		t.Fatal(err)
	}
	if r, _ := LoadUpgrade(st); r != nil {
		t.Error("the record is still there")
	}
}

// verify's versions check: what serves, by the skew rules that need no
// target (a Node's kubelet ahead of the apiservers fails with the rule's
// fix), and an upgrade record fails it until the upgrade is finished.
func TestCheckVersions(t *testing.T) {
	cp, workers, nodes := healthy("1.35.4", "3.6.16")
	nodes["w2"] = "v1.36.3"
	fx := newUpgradeFixture(t, cp, workers, nodes)
	fx.api.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{GitVersion: "v1.35.4"}
	msgs := func() string {
		var out []string
		for _, r := range fx.c.checkVersions(context.Background()) {
			out = append(out, string(r.Status)+" "+r.Host+": "+r.Message+" (hint: "+r.Hint+")")
		}
		return strings.Join(out, "\n")
	}
	got := msgs()
	if !strings.Contains(got, "fail w2: kubelet on w2 (its Node) runs v1.36.3, newer than the oldest apiserver (v1.35.4 on c1)") {
		t.Errorf("a kubelet ahead of the apiservers:\n%s", got)
	}
	if strings.Contains(got, "w1") {
		t.Errorf("w1 runs the apiservers' version:\n%s", got)
	}
	nodes["w2"] = "v1.35.4"
	fx = newUpgradeFixture(t, cp, workers, nodes)
	fx.api.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{GitVersion: "v1.35.4"}
	if got := msgs(); !strings.HasPrefix(got, "pass ") {
		t.Errorf("converged:\n%s", got)
	}
	rec := &UpgradeRecord{From: "v1.35.4", To: "v1.36.3", Phases: []UpgradePhase{{Name: "worker w2"}, {Name: "finish"}}}
	if err := SaveUpgrade(fx.c.opt.State, rec); err != nil {
		t.Fatal(err)
	}
	if got := msgs(); !strings.Contains(got, "fail : an upgrade from v1.35.4 to v1.36.3 is half-way: 0 of 2 phases done; left: worker w2, finish (hint: 'hardway upgrade apply -i") {
		t.Errorf("half-way:\n%s", got)
	}
}
