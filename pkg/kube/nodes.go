package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/usererr"
)

// Why a node is not Ready, in the words verify and up use. Each has one
// hint; the detail says what the host or the API showed.
const (
	CauseRuntimeDown  = "runtime down"
	CauseCNIMissing   = "CNI config missing"
	CauseCertRefused  = "certificate refused"
	CauseKubeletDown  = "kubelet down"
	CauseNotReady     = "NotReady"
	CauseUnregistered = "not registered"
)

// Diagnosis is why one node is not Ready.
type Diagnosis struct {
	Cause  string // one of the Cause constants
	Detail string // the evidence: a condition message, a journal line
	Hint   string
}

func (d *Diagnosis) String() string {
	if d.Detail == "" {
		return d.Cause
	}
	return d.Cause + ": " + d.Detail
}

// NodeReady says whether the node's Ready condition is True, and otherwise
// the condition's reason and message ("" when the kubelet never posted one).
func NodeReady(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return true, ""
		}
		return false, strings.TrimSpace(c.Reason + " " + c.Message)
	}
	return false, "no Ready condition yet (the kubelet has not posted its status)"
}

// hints for each cause; host is the node's name.
func causeHint(cause, host string) string {
	switch cause {
	case CauseRuntimeDown:
		return fmt.Sprintf("see 'journalctl -u containerd' on %s; 'crictl --runtime-endpoint unix:///run/containerd/containerd.sock info' shows what the runtime says", host)
	case CauseCNIMissing:
		return fmt.Sprintf("no usable config in /etc/cni/net.d or no plugins in /opt/cni/bin on %s: with network.cni: bridge 'hardway up' writes them; with cni: none install your CNI (its DaemonSet must tolerate node.kubernetes.io/not-ready)", host)
	case CauseCertRefused:
		return fmt.Sprintf("the apiserver refuses the kubelet's client certificate on %s (another CA, expired, or not CN=system:node:%s): 'hardway certs check', then 'hardway up' pushes a fresh one", host, host)
	case CauseKubeletDown:
		return fmt.Sprintf("see 'journalctl -u kubelet' on %s; 'hardway up' starts it", host)
	case CauseUnregistered:
		return fmt.Sprintf("the kubelet on %s has not registered: see 'journalctl -u kubelet' there (can it reach the apiserver?)", host)
	}
	return fmt.Sprintf("see 'journalctl -u kubelet' on %s", host)
}

// Diagnose builds a Diagnosis for host with the standard hint.
func Diagnose(cause, detail, host string) *Diagnosis {
	return &Diagnosis{Cause: cause, Detail: oneLine(detail, 240), Hint: causeHint(cause, host)}
}

// DiagnoseCondition classifies a NotReady condition's text.
func DiagnoseCondition(msg, host string) *Diagnosis {
	l := strings.ToLower(msg)
	switch {
	case strings.Contains(l, "cni config uninitialized"), strings.Contains(l, "cni plugin not initialized"),
		strings.Contains(l, "networkpluginnotready"), strings.Contains(l, "network plugin"):
		return Diagnose(CauseCNIMissing, msg, host)
	case strings.Contains(l, "container runtime is down"), strings.Contains(l, "container runtime status check"),
		strings.Contains(l, "runtimeready=false"), strings.Contains(l, "pleg is not healthy"):
		return Diagnose(CauseRuntimeDown, msg, host)
	case strings.Contains(l, "stopped posting node status"):
		return Diagnose(CauseKubeletDown, msg, host)
	}
	return Diagnose(CauseNotReady, msg, host)
}

// criInfo is the part of 'crictl info' (CRI Status, verbose) we read.
type criInfo struct {
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Status  bool   `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
	LastCNILoadStatus string `json:"lastCNILoadStatus"`
}

// DiagnoseCRI reads 'crictl info' output: nil when the runtime and its
// network are ready, else the runtime or the CNI config as the cause.
func DiagnoseCRI(out []byte, host string) (*Diagnosis, error) {
	var info criInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("crictl info: %w", err)
	}
	if len(info.Status.Conditions) == 0 {
		return nil, fmt.Errorf("crictl info: no runtime conditions in %q", oneLine(string(out), 120))
	}
	for _, c := range info.Status.Conditions {
		// Only these two decide whether the kubelet can run pods; others
		// (containerd's ContainerdHasNoDeprecationWarnings, say) inform.
		if c.Status || c.Type != "RuntimeReady" && c.Type != "NetworkReady" {
			continue
		}
		msg := strings.TrimSpace(c.Reason + " " + c.Message)
		if c.Type == "NetworkReady" {
			if info.LastCNILoadStatus != "" && info.LastCNILoadStatus != "OK" {
				msg = info.LastCNILoadStatus
			}
			return Diagnose(CauseCNIMissing, msg, host), nil
		}
		return Diagnose(CauseRuntimeDown, c.Type+"=false "+msg, host), nil
	}
	return nil, nil
}

// certPatterns are what a kubelet logs when the apiserver refuses its
// client certificate or it refuses the apiserver's.
var certPatterns = []string{
	"x509:", "unauthorized", "certificate has expired", "bad certificate",
	"unknown authority", "is not allowed to modify node", "tls: failed to verify",
}

// DiagnoseKubeletLog finds the most telling line in the kubelet's journal
// (newest last): a refused certificate, then an unreachable runtime.
func DiagnoseKubeletLog(journal, host string) *Diagnosis {
	lines := strings.Split(strings.TrimSpace(journal), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.ToLower(lines[i])
		for _, p := range certPatterns {
			if strings.Contains(l, p) {
				return Diagnose(CauseCertRefused, lines[i], host)
			}
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.ToLower(lines[i])
		if strings.Contains(l, "containerd.sock") && (strings.Contains(l, "connection refused") || strings.Contains(l, "no such file")) {
			return Diagnose(CauseRuntimeDown, lines[i], host)
		}
		if strings.Contains(l, "cni config uninitialized") || strings.Contains(l, "no network config found") {
			return Diagnose(CauseCNIMissing, lines[i], host)
		}
	}
	return nil
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// GetNode returns the named Node, or nil when it does not exist.
func GetNode(ctx context.Context, cs kubernetes.Interface, name string) (*corev1.Node, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read Node %s: %w", name, err)
	}
	return n, nil
}

// LeaseRenewTime is when the named Node's kubelet last renewed its Lease
// (kube-node-lease, every 10 s by default), as text for comparing; "" when
// it has none yet. A renewal proves that the kubelet reaches the apiserver
// with its credentials now, which a Node's Ready (kept for 40 s after the
// kubelet stops) does not.
func LeaseRenewTime(ctx context.Context, cs kubernetes.Interface, name string) (string, error) {
	l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read Lease %s/%s: %w", corev1.NamespaceNodeLease, name, err)
	}
	if l.Spec.RenewTime == nil {
		return "", nil
	}
	return l.Spec.RenewTime.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), nil
}

// RegisterNode creates the Node object before its kubelet first starts, with
// spec.podCIDR set to the subnet hardway allocated. The kubelet then adopts
// it, and the controller-manager's range allocator marks the subnet as used
// instead of handing out the next free one: the Node and the CNI config on
// the host agree whatever order the kubelets register in.
func RegisterNode(ctx context.Context, cs kubernetes.Interface, name, podCIDR string) error {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return SetPodCIDR(ctx, cs, name, podCIDR)
	}
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	return nil
}

// SetPodCIDR sets spec.podCIDR on a Node that has none yet (the field is
// immutable once set); a different subnet already there is an error.
func SetPodCIDR(ctx context.Context, cs kubernetes.Interface, name, podCIDR string) error {
	n, err := GetNode(ctx, cs, name)
	if err != nil {
		return err
	}
	if n == nil {
		return fmt.Errorf("node %s: not found", name)
	}
	switch n.Spec.PodCIDR {
	case podCIDR:
		return nil
	case "":
	default:
		return PodCIDRConflict(name, n.Spec.PodCIDR, podCIDR)
	}
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, podCIDR, podCIDR)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("set spec.podCIDR of Node %s: %w", name, err)
	}
	return nil
}

// PodCIDRConflict is the error for a Node whose podCIDR is not the one
// hardway allocated (the controller-manager gave it another subnet because
// the kubelet registered before hardway created the Node).
func PodCIDRConflict(name, got, want string) error {
	return usererr.New(fmt.Errorf("node %s has spec.podCIDR %s, but its CNI config uses %s (hardway's allocation)", name, got, want),
		fmt.Sprintf("spec.podCIDR is immutable: 'kubectl delete node %s', then 'hardway up' registers it again with %s (its pods are recreated)", name, want))
}
