package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/units"
)

// A cluster an earlier hardway set up: its apiservers and controller-managers
// read the cluster CA itself (--client-ca-file=ca.crt), and no host has the
// trust bundle. The first up with this hardway pushes the bundle and the two
// units and restarts exactly those two services, one host at a time; once
// pushed, up plans nothing.
func TestClusterCATrustBundleUpgrade(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 5e9}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	for _, h := range inv.ControlPlane {
		m := fc.model[h.Name]
		delete(m.files, units.CATrustCert)
		for _, comp := range []string{units.APIServer, units.ControllerManager} {
			m.files[units.UnitPath(comp)] = "644 root 0 root 0 9 0000"
		}
	}
	push, err := fc.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range push {
		got = append(got, a.Host+" "+strings.Fields(a.Desc)[1]+" "+strings.Join(a.Restarts, ","))
	}
	var want []string
	for _, h := range []string{"c1", "c2", "c3"} {
		want = append(want,
			h+" /etc/systemd/system/kube-apiserver.service kube-apiserver",
			h+" /var/lib/kubernetes/ca-trust.crt kube-apiserver,kube-controller-manager",
			h+" /etc/systemd/system/kube-controller-manager.service kube-controller-manager")
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("push:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	earlier := plan.Planned(push)
	if et, err := fc.planEtcd(ctx, earlier); err != nil || len(et) != 0 {
		t.Errorf("etcd: %v %q", err, descs(et))
	}
	cp, err := fc.planControlPlane(ctx, earlier)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := descs(cp), []string{
		"restart c1: kube-apiserver: restart (files changed)",
		"restart c2: kube-apiserver: restart (files changed)",
		"restart c3: kube-apiserver: restart (files changed)",
		"restart c1: kube-controller-manager: restart (files changed)",
		"restart c2: kube-controller-manager: restart (files changed)",
		"restart c3: kube-controller-manager: restart (files changed)",
	}; !slices.Equal(got, want) {
		t.Errorf("control plane:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, a := range cp {
		if a.Parallel {
			t.Errorf("%s runs beside others: a restart of a running service rolls", a.Desc)
		}
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}
	fc.pushed()
	if push, err := fc.planPush(ctx, nil); err != nil || len(push) != 0 {
		t.Errorf("after the push: %v %q", err, descs(push))
	}
}
