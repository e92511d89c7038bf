package cluster

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/addons"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
)

// `rotate ca --which kubernetes --dry-run` on a converged control plane:
// every phase is planned — the new CA, the bundle, the CA and every
// kubeconfig pushed, the apiservers, controller-managers and schedulers
// restarted host by host, the waits for kube-root-ca.crt, the reissue of the
// CA's leaves — and nothing changes: no host is sent a command that writes,
// etcd is not touched (nor restarted), the state directory is the same.
func TestKubernetesCARotationPlanOnlyReads(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	text := "controlPlane:\n  - {name: c1, address: 10.240.0.11}\n  - {name: c2, address: 10.240.0.12}\n  - {name: c3, address: 10.240.0.13}\n"
	p := filepath.Join(root, "inventory.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Parse(p, p, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := pki.Generate(ctx, inv, st, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster(t, inv, Options{State: st, Release: releaseOptionsIn(inv, root)}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	api := fake.NewClientset()
	fc.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
	before := treeHash(t, root)

	rot := fc.CARotation(CARotateOptions{Which: pki.WhichKubernetes, DryRun: true})
	rot.ready = func(context.Context, inventory.Host) error { return nil }
	if err := rot.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ph := range rot.Phases() {
		res, err := (&plan.Runner{Out: io.Discard, DryRun: true}).Run(ctx, ph.Steps)
		if err != nil {
			t.Fatalf("phase %s: %v", ph.Name, err)
		}
		for _, s := range res.Steps {
			for _, a := range s.Actions {
				lines = append(lines, s.Name+" "+a.Host+": "+string(a.Kind)+" "+a.Desc)
			}
		}
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		"new-ca : reissue make a new ca ",
		"write the new ca to " + string(st) + "/pki/ca.crt",
		"rewrite every kubeconfig in " + st.KubeconfigDir() + " with the bundle",
		"trust-both/push c2: write write /var/lib/kubernetes/ca-trust.crt",
		"trust-both/push c2: write write /var/lib/kubernetes/ca.key",
		"trust-both/push c3: write write /var/lib/kubernetes/kube-scheduler.kubeconfig",
		"trust-both/control-plane c1: restart kube-apiserver: restart",
		"trust-both/control-plane c3: restart kube-controller-manager: restart",
		"trust-both/control-plane c2: restart kube-scheduler: restart",
		"trust-both/kube-root-ca : wait wait until kube-root-ca.crt in every namespace holds the trust bundle (old + new CA",
		"reissue : reissue reissue 6 certificate(s)",
		"reissue/push c1: write write /var/lib/kubernetes/kube-apiserver.crt",
		"reissue/push c1: write write /var/lib/kubernetes/apiserver-kubelet-client.key",
		"reissue/control-plane c3: restart kube-apiserver: restart",
		"write " + string(st) + "/pki/ca-trust-bundle.crt (the new CA alone)",
		"drop-old/control-plane c1: restart kube-apiserver: restart",
		"drop-old/kube-root-ca : wait wait until kube-root-ca.crt in every namespace holds the trust bundle (the new CA alone",
		"drop-old/record : write rotation complete",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("plan lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "etcd: restart") || strings.Contains(all, "/etc/etcd/") {
		t.Errorf("the cluster CA's rotation touches etcd:\n%s", all)
	}
	for _, h := range fc.Inv.ControlPlane {
		cmds := fc.commands(h.Name)
		if len(cmds) == 0 {
			t.Fatalf("%s was never asked anything: the test proves nothing", h.Name)
		}
		assertReadOnly(t, h.Name, cmds)
	}
	if m := fc.etcd.mutations(); len(m) > 0 {
		t.Errorf("etcd changed: %q", m)
	}
	if after := treeHash(t, root); after != before {
		t.Error("the local directory (inventory, state) changed")
	}
	for _, a := range api.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" {
			t.Errorf("the API was changed: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// The add-ons step restarts CoreDNS once per phase: a Deployment not yet
// marked with the phase's bundle is patched (only its pod template's
// annotation) and waited for; once marked and rolled out, nothing is
// planned, so a resumed rotation does not restart it again.
func TestKubernetesCARotationAddons(t *testing.T) {
	ctx := context.Background()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := state.Dir(t.TempDir())
	if _, err := pki.Generate(ctx, inv, st, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	api := fake.NewClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: addons.DNSNamespace, Name: addons.DNSDeployment, Generation: 1},
		Spec:   appsv1.DeploymentSpec{Replicas: &two},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}})
	c := New(inv, Options{State: st})
	c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
	rot := c.CARotation(CARotateOptions{Which: pki.WhichKubernetes})
	rot.target, _ = pki.LookupCATarget(pki.WhichKubernetes)
	if rot.preview, err = pki.StartCARotation(inv, st, pki.WhichKubernetes, rot.o.Now()); err != nil {
		t.Fatal(err)
	}
	as, err := rot.planAddons(pki.PhaseTrustBoth)(ctx, nil)
	if err != nil || len(as) != 2 || as[0].Kind != plan.Apply || !strings.Contains(as[0].Desc, "restart Deployment kube-system/coredns") || as[1].Kind != plan.Wait {
		t.Fatalf("%v %q", err, descs(as))
	}
	if err := as[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := api.AppsV1().Deployments(addons.DNSNamespace).Get(ctx, addons.DNSDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Annotations[caTrustAnnotation]; got != bundleDigest(rot.preview.Bundle(pki.PhaseTrustBoth)) {
		t.Fatalf("annotation %q", got)
	}
	if as, err := rot.planAddons(pki.PhaseTrustBoth)(ctx, nil); err != nil || len(as) != 0 {
		t.Errorf("marked and rolled out: %v %q", err, descs(as))
	}
	// Phase 3's bundle differs: restarted again.
	if as, err := rot.planAddons(pki.PhaseDropOld)(ctx, nil); err != nil || len(as) != 2 {
		t.Errorf("drop-old: %v %q", err, descs(as))
	}
}

// A rotation's worker gate: a Ready Node whose kubelet does not renew its
// Lease while it is watched (a restarted kubelet that cannot reach the
// apiserver stays Ready for 40 s) is not Ready again; one that renews is.
func TestFreshHeartbeatGate(t *testing.T) {
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21}
`))
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	renew := metav1.NewMicroTime(time.Now().Add(-5 * time.Second))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "worker-1"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
	api := fake.NewClientset(node, lease)
	c := New(inv, Options{})
	c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }

	// Ready without the gate: at once.
	if err := c.waitNodesReady(t.Context(), []string{"worker-1"}); err != nil {
		t.Fatal(err)
	}
	// With it and no renewal: not Ready (cut short here; up waits minutes).
	c.freshHeartbeat = true
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	err = c.waitNodesReady(ctx, []string{"worker-1"})
	cancel()
	if err == nil {
		t.Fatal("a Node without a heartbeat since the wait began passed the gate")
	}
	// A renewal while it is watched: Ready.
	go func() {
		time.Sleep(1500 * time.Millisecond)
		l := lease.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		api.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(context.Background(), l, metav1.UpdateOptions{})
	}()
	if err := c.waitNodesReady(t.Context(), []string{"worker-1"}); err != nil {
		t.Fatalf("renewed: %v", err)
	}
}
