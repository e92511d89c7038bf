package kube

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/usererr"
)

func TestNodeReady(t *testing.T) {
	n := &corev1.Node{}
	if ok, why := NodeReady(n); ok || !strings.Contains(why, "no Ready condition") {
		t.Fatalf("fresh node: %v %q", ok, why)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"}}
	ok, why := NodeReady(n)
	if ok || !strings.HasPrefix(why, "KubeletNotReady container runtime network") {
		t.Fatalf("not ready: %v %q", ok, why)
	}
	if d := DiagnoseCondition(why, "worker-1"); d.Cause != CauseCNIMissing || !strings.Contains(d.Hint, "/etc/cni/net.d") {
		t.Fatalf("diagnosis %+v", d)
	}
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	if ok, _ := NodeReady(n); !ok {
		t.Fatal("ready node not ready")
	}
}

func TestDiagnoseCondition(t *testing.T) {
	for msg, want := range map[string]string{
		"KubeletNotReady container runtime network not ready: cni config uninitialized": CauseCNIMissing,
		"KubeletNotReady container runtime is down":                                     CauseRuntimeDown,
		"NodeStatusUnknown Kubelet stopped posting node status.":                        CauseKubeletDown,
		"KubeletNotReady something else":                                                CauseNotReady,
	} {
		if d := DiagnoseCondition(msg, "w"); d.Cause != want || d.Hint == "" {
			t.Errorf("%q: %+v, want %s", msg, d, want)
		}
	}
}

func TestDiagnoseCRI(t *testing.T) {
	ready := `{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":true}]},"lastCNILoadStatus":"OK"}`
	if d, err := DiagnoseCRI([]byte(ready), "w"); d != nil || err != nil {
		t.Fatalf("ready: %v %v", d, err)
	}
	noCNI := `{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":false,"reason":"NetworkPluginNotReady","message":"Network plugin returns error: cni plugin not initialized"}]},
	"lastCNILoadStatus":"cni config load failed: no network config found in /etc/cni/net.d: cni plugin not initialized: failed to load cni config"}`
	d, err := DiagnoseCRI([]byte(noCNI), "worker-2")
	if err != nil || d.Cause != CauseCNIMissing || !strings.Contains(d.Detail, "no network config found in /etc/cni/net.d") || !strings.Contains(d.Hint, "worker-2") {
		t.Fatalf("no cni: %+v %v", d, err)
	}
	down := `{"status":{"conditions":[{"type":"RuntimeReady","status":false,"reason":"x","message":"y"},{"type":"NetworkReady","status":true}]}}`
	if d, _ := DiagnoseCRI([]byte(down), "w"); d == nil || d.Cause != CauseRuntimeDown {
		t.Fatalf("runtime: %+v", d)
	}
	if _, err := DiagnoseCRI([]byte("not json"), "w"); err == nil {
		t.Fatal("garbage accepted")
	}
	if _, err := DiagnoseCRI([]byte("{}"), "w"); err == nil {
		t.Fatal("no conditions accepted")
	}
}

func TestDiagnoseKubeletLog(t *testing.T) {
	cert := `Nov 30 kubelet[1]: I1130 starting
Nov 30 kubelet[1]: E1130 "Unable to register node with API server" err="Unauthorized" node="worker-1"`
	if d := DiagnoseKubeletLog(cert, "worker-1"); d == nil || d.Cause != CauseCertRefused || !strings.Contains(d.Detail, "Unauthorized") {
		t.Fatalf("cert: %+v", d)
	}
	x509 := `E1130 tls: failed to verify certificate: x509: certificate signed by unknown authority`
	if d := DiagnoseKubeletLog(x509, "w"); d == nil || d.Cause != CauseCertRefused {
		t.Fatalf("x509: %+v", d)
	}
	rt := `E1130 "failed to connect" err="dial unix /run/containerd/containerd.sock: connect: connection refused"`
	if d := DiagnoseKubeletLog(rt, "w"); d == nil || d.Cause != CauseRuntimeDown {
		t.Fatalf("runtime: %+v", d)
	}
	if d := DiagnoseKubeletLog("I1130 all fine", "w"); d != nil {
		t.Fatalf("fine log: %+v", d)
	}
}

func TestRegisterNode(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	if n, err := GetNode(ctx, cs, "worker-1"); n != nil || err != nil {
		t.Fatalf("missing node: %v %v", n, err)
	}
	if err := RegisterNode(ctx, cs, "worker-1", "10.200.0.0/24"); err != nil {
		t.Fatal(err)
	}
	n, err := GetNode(ctx, cs, "worker-1")
	if err != nil || n.Spec.PodCIDR != "10.200.0.0/24" || len(n.Spec.PodCIDRs) != 1 {
		t.Fatalf("registered: %+v %v", n, err)
	}
	// Again: a no-op.
	if err := RegisterNode(ctx, cs, "worker-1", "10.200.0.0/24"); err != nil {
		t.Fatal(err)
	}
	// A node the kubelet registered without a subnet gets ours.
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := RegisterNode(ctx, cs, "worker-2", "10.200.1.0/24"); err != nil {
		t.Fatal(err)
	}
	if n, _ := GetNode(ctx, cs, "worker-2"); n.Spec.PodCIDR != "10.200.1.0/24" {
		t.Fatalf("patched: %+v", n.Spec)
	}
	// Another subnet: an error naming the fix.
	err = RegisterNode(ctx, cs, "worker-2", "10.200.5.0/24")
	if err == nil || !strings.Contains(usererr.HintOf(err), "kubectl delete node worker-2") {
		t.Fatalf("conflict: %v (hint %q)", err, usererr.HintOf(err))
	}
}
