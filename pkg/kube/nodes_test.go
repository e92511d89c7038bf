package kube

import (
	"context"
	"net/netip"
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

func TestPendingBehindTaint(t *testing.T) {
	pending := func(ns, name, msg string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: msg}}}}
	}
	taint := "0/2 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. preemption: 0/2 nodes are available"
	pods := []corev1.Pod{
		pending("kube-system", "calico-kube-controllers-1", taint),
		pending("kube-system", "coredns-1", taint),
		pending("default", "big", "0/2 nodes are available: 2 Insufficient memory."),
		{ObjectMeta: metav1.ObjectMeta{Name: "running"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	}
	p := PendingBehindTaint(pods)
	if p == nil || !strings.HasPrefix(p.Reason, "2 pod(s) Pending behind the node.kubernetes.io/not-ready taint: kube-system/calico-kube-controllers-1, kube-system/coredns-1") ||
		!strings.Contains(p.Hint, "DaemonSet") || !strings.Contains(p.Hint, "tolerate") {
		t.Fatalf("got %+v", p)
	}
	if p := PendingBehindTaint(pods[2:]); p != nil {
		t.Fatalf("no taint: %+v", p)
	}
}

func TestIPPoolProblems(t *testing.T) {
	list := `{"apiVersion":"crd.projectcalico.org/v1","kind":"IPPoolList","items":[
	 {"metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"192.168.0.0/16","ipipMode":"Always"}},
	 {"metadata":{"name":"good"},"spec":{"cidr":"10.200.0.0/16"}},
	 {"metadata":{"name":"inside"},"spec":{"cidr":"10.200.128.0/17"}},
	 {"metadata":{"name":"off"},"spec":{"cidr":"172.16.0.0/16","disabled":true}},
	 {"metadata":{"name":"services"},"spec":{"cidr":"10.32.0.0/16"}},
	 {"metadata":{"name":"v6"},"spec":{"cidr":"fd00::/48"}}]}`
	hosts := map[string]netip.Addr{"controller-1": netip.MustParseAddr("192.168.1.11")}
	ps, err := IPPoolProblems([]byte(list), netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.32.0.0/24"), hosts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Reason)
		if !strings.Contains(p.Hint, "CALICO_IPV4POOL_CIDR=10.200.0.0/16") {
			t.Errorf("hint %q", p.Hint)
		}
	}
	want := []string{
		"IPPool default-ipv4-ippool cidr 192.168.0.0/16 differs from network.podCIDR 10.200.0.0/16; contains host controller-1 (192.168.1.11)",
		"IPPool services cidr 10.32.0.0/16 differs from network.podCIDR 10.200.0.0/16; overlaps the service range 10.32.0.0/24",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := IPPoolProblems([]byte("<html>"), netip.Prefix{}, netip.Prefix{}, nil); err == nil {
		t.Fatal("garbage accepted")
	}
}
