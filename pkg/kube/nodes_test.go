package kube

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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
	// containerd 2.2+ adds a condition for deprecated features in use
	// (cgroup v1 here): not a reason for the kubelet, so not one for us.
	ready := `{"status":{"conditions":[{"type":"RuntimeReady","status":true},{"type":"NetworkReady","status":true},
	{"type":"ContainerdHasNoDeprecationWarnings","status":false,"reason":"ContainerdHasDeprecationWarnings","message":"{\"io.containerd.deprecation/cgroup-v1\":\"The support for cgroup v1 is deprecated\"}"}]},"lastCNILoadStatus":"OK"}`
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
	// 1.36's scheduler no longer names the taint: the nodes say which.
	pods = append(pods, pending("default", "pinned", "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s). no new claims to deallocate"))
	tainted := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: NotReadyTaint, Effect: corev1.TaintEffectNoSchedule}}}}}
	if p := PendingBehindTaint(pods, nil); p == nil || !strings.HasPrefix(p.Reason, "2 pod(s)") {
		t.Fatalf("no tainted node: %+v", p)
	}
	p := PendingBehindTaint(pods, tainted)
	if p == nil || !strings.HasPrefix(p.Reason, "3 pod(s) Pending behind the node.kubernetes.io/not-ready taint: default/pinned, kube-system/calico-kube-controllers-1, kube-system/coredns-1") ||
		!strings.Contains(p.Hint, "DaemonSet") || !strings.Contains(p.Hint, "tolerate") {
		t.Fatalf("got %+v", p)
	}
	if p := PendingBehindTaint(pods[2:4], tainted); p != nil {
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

func TestStaleNodesAndDrainForRemoval(t *testing.T) {
	ctx := context.Background()
	node := func(name, cidr string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	}
	nodes := []corev1.Node{node("worker-1", "10.200.0.0/24"), node("worker-3", "10.200.2.0/24"), node("joined", "")}
	stale := StaleNodes(nodes, []string{"controller-1", "worker-1"})
	if len(stale) != 2 || stale[0].Name != "joined" || stale[1].Name != "worker-3" {
		t.Fatalf("stale %v", stale)
	}
	pod := netip.MustParsePrefix("10.200.0.0/16")
	if HardwayWorker(stale[0], pod) || !HardwayWorker(stale[1], pod) {
		t.Fatal("HardwayWorker")
	}

	cs := fake.NewClientset(&nodes[1],
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "worker-3"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: "kube-system", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "x"}}}, Spec: corev1.PodSpec{NodeName: "worker-3"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "worker-1"}})
	// The fake does not filter by field or evict: do both as the apiserver would.
	var evicted []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		evicted = append(evicted, ev.Namespace+"/"+ev.Name)
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		objs, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "")
		if err != nil {
			return true, nil, err
		}
		l := objs.(*corev1.PodList)
		var keep []corev1.Pod
		for _, p := range l.Items {
			if sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
				keep = append(keep, p)
			}
		}
		l.Items = keep
		return true, l, nil
	})
	if err := DrainForRemoval(ctx, cs, "worker-3", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if strings.Join(evicted, ",") != "default/app" {
		t.Fatalf("evicted %v", evicted)
	}
	if n, _ := GetNode(ctx, cs, "worker-3"); n == nil || !n.Spec.Unschedulable {
		t.Fatalf("not cordoned: %+v", n)
	}
	if err := DeleteNode(ctx, cs, "worker-3"); err != nil {
		t.Fatal(err)
	}
	if n, _ := GetNode(ctx, cs, "worker-3"); n != nil {
		t.Fatal("node not deleted")
	}
	// Its DaemonSet pod, which no kubelet will stop, went with it; the
	// pod on another node stays.
	if l, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); len(l.Items) != 1 || l.Items[0].Name != "elsewhere" {
		t.Fatalf("pods after the Node's deletion: %v", l.Items)
	}
	// Gone already: nothing to do.
	if err := DrainForRemoval(ctx, cs, "worker-3", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := DeleteNode(ctx, cs, "worker-3"); err != nil {
		t.Fatal(err)
	}

	// A PodDisruptionBudget that allows no disruption: the eviction is
	// refused (429) until the timeout, which names the pod.
	ready := nodes[1].DeepCopy()
	ready.Name = "worker-4"
	ready.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, ready, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "worker-4"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusals := 0
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		refusals++
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 1)
	})
	err := DrainForRemoval(ctx, cs, "worker-4", 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "default/guarded") || refusals < 2 {
		t.Fatalf("drain against a PDB: %v (%d refusals)", err, refusals)
	}
	// Its kubelet gone (NotReady): a pod being deleted is not waited for.
	notReady := ready.DeepCopy()
	notReady.Name = "worker-5"
	notReady.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	now := metav1.Now()
	if _, err := cs.CoreV1().Nodes().Create(ctx, notReady, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "default", DeletionTimestamp: &now, Finalizers: []string{"x"}},
		Spec: corev1.PodSpec{NodeName: "worker-5"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := DrainForRemoval(ctx, cs, "worker-5", time.Second); err != nil {
		t.Fatalf("drain of a NotReady node: %v", err)
	}
	if names, err := ParseNames([]byte(`{"items":[{"metadata":{"name":"b"}},{"metadata":{"name":"a"}}]}`)); err != nil || strings.Join(names, ",") != "a,b" {
		t.Fatalf("names %v %v", names, err)
	}
}
