// Package kube talks to the apiserver with client-go: the RBAC that lets the
// apiserver reach kubelets (server-side apply), readiness, leader leases,
// nodes, and the probe Secret that proves encryption at rest.
package kube

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// FieldManager owns the fields hardway applies.
const FieldManager = "hardway"

// DialFunc opens a connection, e.g. through SSH.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Client builds a clientset from a kubeconfig file, optionally pointing it
// at another server (one apiserver of several) and dialling through dial.
func Client(kubeconfig, server string, dial DialFunc) (kubernetes.Interface, *rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	if server != "" {
		cfg.Host = server
	}
	if dial != nil {
		cfg.Dial = dial
	}
	cfg.UserAgent = "hardway"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, cfg, nil
}

// The RBAC for apiserver → kubelet (logs, exec, metrics), as in k8s-facts.
const (
	KubeletAPIRole    = "system:kube-apiserver-to-kubelet"
	KubeletAPIBinding = "system:kube-apiserver"
)

var kubeletAPIResources = []string{"nodes/proxy", "nodes/stats", "nodes/log", "nodes/spec", "nodes/metrics"}

// RBACState says how the live RBAC differs from what it must be; empty means equal.
func RBACState(ctx context.Context, cs kubernetes.Interface, subject string) ([]string, error) {
	var diffs []string
	role, err := cs.RbacV1().ClusterRoles().Get(ctx, KubeletAPIRole, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		diffs = append(diffs, "ClusterRole "+KubeletAPIRole+" missing")
	case err != nil:
		return nil, fmt.Errorf("read ClusterRole %s: %w", KubeletAPIRole, err)
	default:
		if !roleOK(role) {
			diffs = append(diffs, "ClusterRole "+KubeletAPIRole+" has other rules")
		}
	}
	b, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, KubeletAPIBinding, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		diffs = append(diffs, "ClusterRoleBinding "+KubeletAPIBinding+" missing")
	case err != nil:
		return nil, fmt.Errorf("read ClusterRoleBinding %s: %w", KubeletAPIBinding, err)
	default:
		if b.RoleRef.Name != KubeletAPIRole || b.RoleRef.Kind != "ClusterRole" {
			diffs = append(diffs, fmt.Sprintf("ClusterRoleBinding %s refers to %s %s", KubeletAPIBinding, b.RoleRef.Kind, b.RoleRef.Name))
		}
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != "User" || b.Subjects[0].Name != subject {
			var got []string
			for _, s := range b.Subjects {
				got = append(got, s.Kind+" "+s.Name)
			}
			diffs = append(diffs, fmt.Sprintf("ClusterRoleBinding %s binds %s, not User %s (the CN of the apiserver's kubelet client certificate)",
				KubeletAPIBinding, strings.Join(got, ", "), subject))
		}
	}
	return diffs, nil
}

func roleOK(r *rbacv1.ClusterRole) bool {
	if len(r.Rules) != 1 {
		return false
	}
	rule := r.Rules[0]
	res := append([]string{}, rule.Resources...)
	sort.Strings(res)
	want := append([]string{}, kubeletAPIResources...)
	sort.Strings(want)
	return slices.Equal(rule.APIGroups, []string{""}) && slices.Equal(res, want) && slices.Equal(rule.Verbs, []string{"*"})
}

// ApplyRBAC server-side applies the ClusterRole and its binding to subject.
func ApplyRBAC(ctx context.Context, cs kubernetes.Interface, subject string) error {
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	role := rbacac.ClusterRole(KubeletAPIRole).
		WithAnnotations(map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"}).
		WithLabels(map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}).
		WithRules(rbacac.PolicyRule().WithAPIGroups("").WithResources(kubeletAPIResources...).WithVerbs("*"))
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("apply ClusterRole %s: %w", KubeletAPIRole, err)
	}
	binding := rbacac.ClusterRoleBinding(KubeletAPIBinding).
		WithRoleRef(rbacac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(KubeletAPIRole)).
		WithSubjects(rbacac.Subject().WithAPIGroup("rbac.authorization.k8s.io").WithKind("User").WithName(subject))
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("apply ClusterRoleBinding %s: %w", KubeletAPIBinding, err)
	}
	return nil
}

// Readyz returns the verbose /readyz text; err is set unless it says ok.
func Readyz(ctx context.Context, cs kubernetes.Interface) (string, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").DoRaw(ctx)
	out := string(body)
	if err != nil {
		return out, fmt.Errorf("/readyz: %w", err)
	}
	return out, nil
}

// Livez is /livez.
func Livez(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.Discovery().RESTClient().Get().AbsPath("/livez").DoRaw(ctx)
	return err
}

// FailedReadyChecks picks the "[-]name failed" lines of a verbose /readyz.
func FailedReadyChecks(verbose string) []string {
	var out []string
	for _, l := range strings.Split(verbose, "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, strings.TrimPrefix(l, "[-]"))
		}
	}
	return out
}

// LeaseHolder returns the holder of the kube-system lease name ("" if none).
func LeaseHolder(ctx context.Context, cs kubernetes.Interface, name string) (string, error) {
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("lease kube-system/%s: %w", name, err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// ProbeSecret is the Secret verify writes to prove encryption at rest.
const (
	ProbeNamespace = "kube-system"
	ProbeName      = "hardway-encryption-probe"
)

// WriteProbeSecret creates or updates the probe Secret.
func WriteProbeSecret(ctx context.Context, cs kubernetes.Interface) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ProbeName, Namespace: ProbeNamespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "hardway"}},
		StringData: map[string]string{"probe": "hardway verify writes this to check encryption at rest"}}
	_, err := cs.CoreV1().Secrets(ProbeNamespace).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().Secrets(ProbeNamespace).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", ProbeNamespace, ProbeName, err)
	}
	return nil
}

// ProbeKey is the probe Secret's key in etcd.
func ProbeKey() string { return "/registry/secrets/" + ProbeNamespace + "/" + ProbeName }

// NodeProblem is a node that is not Ready, with why.
type NodeProblem struct {
	Node   string
	Reason string
	Hint   string
}

// NodeProblems lists NotReady nodes, not-ready taints and the missing-CNI
// case, which is the most common reason in a hard-way cluster.
func NodeProblems(nodes []corev1.Node) []NodeProblem {
	var out []NodeProblem
	for _, n := range nodes {
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady || c.Status == corev1.ConditionTrue {
				continue
			}
			p := NodeProblem{Node: n.Name, Reason: fmt.Sprintf("NotReady: %s %s", c.Reason, c.Message)}
			if strings.Contains(c.Message, "cni") || strings.Contains(c.Message, "network plugin") {
				p.Hint = "no CNI config in /etc/cni/net.d: install a CNI whose pool matches network.podCIDR; its DaemonSet must tolerate node.kubernetes.io/not-ready"
			} else {
				p.Hint = "see 'journalctl -u kubelet' on " + n.Name
			}
			out = append(out, p)
		}
		for _, t := range n.Spec.Taints {
			if t.Key == "node.kubernetes.io/not-ready" {
				out = append(out, NodeProblem{Node: n.Name, Reason: "taint node.kubernetes.io/not-ready:" + string(t.Effect),
					Hint: "pods that do not tolerate it (a CNI DaemonSet, say) stay Pending until the node is Ready"})
			}
		}
	}
	return out
}
