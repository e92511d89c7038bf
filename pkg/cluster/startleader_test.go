package cluster

import (
	"context"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
)

// A started controller-manager or scheduler is waited for until its Lease
// names a leader, not only until /healthz answers (it answers before the
// first election is won): an up must not end on a cluster whose verify
// finds no leader. A restart of a running one needs no Lease wait.
func TestControlPlaneStartWaitsForLeader(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	for _, comp := range []string{units.ControllerManager, units.Scheduler} {
		t.Run(comp, func(t *testing.T) {
			fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 1e9}, models(inv, runningHost))
			for _, m := range fc.model {
				for _, c := range []string{units.APIServer, units.ControllerManager, units.Scheduler} {
					m.units[c] = remote.UnitState{State: "inactive", Enabled: true}
				}
			}
			fc.healthProbe = func(context.Context, inventory.Host, string) error { return nil }
			api := fake.NewClientset()
			fc.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
			as, err := fc.planControlPlane(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var start *plan.Action
			for i := range as {
				if as[i].Host == "c2" && strings.HasPrefix(as[i].Desc, comp+":") {
					start = &as[i]
				}
			}
			if start == nil || start.Kind != plan.Start {
				t.Fatalf("no start of %s on c2 in %q", comp, descs(as))
			}
			if err := start.Do(ctx); err == nil || !strings.Contains(err.Error(), "lease kube-system/"+comp) {
				t.Fatalf("no Lease yet: err = %v, want it to name the Lease", err)
			}
			holder := "c1_0f9c"
			if _, err := api.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: comp, Namespace: "kube-system"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := start.Do(ctx); err != nil {
				t.Fatalf("with a leader: %v", err)
			}
		})
	}
	t.Run("restart", func(t *testing.T) {
		fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 1e9}, models(inv, runningHost))
		fc.healthProbe = func(context.Context, inventory.Host, string) error { return nil }
		api := fake.NewClientset()
		fc.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
		as, err := fc.planControlPlane(ctx, plan.Planned{{Host: "c1", Kind: plan.Write, Restarts: []string{units.ControllerManager}}})
		if err != nil || len(as) != 1 || as[0].Kind != plan.Restart {
			t.Fatalf("%v %q", err, descs(as))
		}
		if err := as[0].Do(ctx); err != nil {
			t.Fatalf("restart of a running controller-manager: %v", err)
		}
	})
}
