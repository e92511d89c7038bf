package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
)

// withWorkers is an inventory of one controller, c1, and n workers w1..wn.
func withWorkers(t *testing.T, n int) *inventory.Inventory {
	t.Helper()
	src := "controlPlane:\n  - {name: c1, address: 10.240.0.11}\nworkers:\n"
	for i := 1; i <= n; i++ {
		src += fmt.Sprintf("  - {name: w%d, address: 10.240.0.%d}\n", i, 20+i)
	}
	inv, err := inventory.Parse("inv.yaml", "inv.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// The dns step's plan only reads; its apply converges, and the next plan
// is empty; a CoreDNS scaled to 0 is planned back.
func TestPlanDNS(t *testing.T) {
	ctx := context.Background()
	c := New(withWorkers(t, 1), Options{})
	api := fake.NewClientset()
	c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }

	as, err := c.planDNS(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Kind != plan.Apply || as[1].Kind != plan.Wait ||
		!strings.Contains(as[0].Desc, "Service kube-dns on 10.32.0.10, 2 replicas, no upstream") || !strings.Contains(as[0].Diff, "Deployment kube-system/coredns missing") {
		t.Fatalf("plan on an empty cluster: %+v", as)
	}
	for _, a := range api.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" {
			t.Errorf("the plan sent a %s %s", v, a.GetResource().Resource)
		}
	}
	if err := as[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	if as, err := c.planDNS(ctx, nil); err != nil || len(as) != 0 {
		t.Fatalf("plan after apply: %v %+v", err, as)
	}
	d, _ := api.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	zero := int32(0)
	d.Spec.Replicas = &zero
	if _, err := api.AppsV1().Deployments("kube-system").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	as, err = c.planDNS(ctx, nil)
	if err != nil || len(as) == 0 || !strings.Contains(as[0].Diff, "spec.replicas is 0, want 2") {
		t.Fatalf("plan after a scale to 0: %v %+v", err, as)
	}
}
