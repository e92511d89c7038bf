package kube

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestApplyRBACConverges(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	const cn = "kube-apiserver-kubelet-client"
	diffs, err := RBACState(ctx, cs, cn)
	if err != nil || len(diffs) != 2 {
		t.Fatalf("empty cluster: %v %v", diffs, err)
	}
	if err := ApplyRBAC(ctx, cs, cn); err != nil {
		t.Fatal(err)
	}
	if diffs, err := RBACState(ctx, cs, cn); err != nil || len(diffs) != 0 {
		t.Fatalf("after apply: %v %v", diffs, err)
	}
	// A binding to the wrong user (the tutorial's "kubernetes") is named.
	diffs, _ = RBACState(ctx, cs, "someone-else")
	if len(diffs) != 1 || !strings.Contains(diffs[0], "binds User "+cn+", not User someone-else") {
		t.Fatalf("wrong subject: %v", diffs)
	}
	role, _ := cs.RbacV1().ClusterRoles().Get(ctx, KubeletAPIRole, metav1.GetOptions{})
	if role.Annotations["rbac.authorization.kubernetes.io/autoupdate"] != "true" || role.Labels["kubernetes.io/bootstrapping"] != "rbac-defaults" {
		t.Fatalf("role metadata %+v", role.ObjectMeta)
	}
}

func TestNodeProblems(t *testing.T) {
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "w1"},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
				Reason: "KubeletNotReady", Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni config uninitialized"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "w2"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
	}
	ps := NodeProblems(nodes)
	if len(ps) != 2 || ps[0].Node != "w1" || !strings.Contains(ps[0].Hint, "/etc/cni/net.d") || !strings.Contains(ps[1].Reason, "not-ready:NoSchedule") {
		t.Fatalf("%+v", ps)
	}
}

func TestFailedReadyChecks(t *testing.T) {
	v := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed\n"
	if got := FailedReadyChecks(v); len(got) != 1 || got[0] != "etcd failed: reason withheld" {
		t.Fatalf("%q", got)
	}
}
