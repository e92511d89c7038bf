package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/usererr"
)

// NotReadyTaint is the taint the node lifecycle controller puts on a node
// that is not Ready; pods that do not tolerate it are not scheduled there.
const NotReadyTaint = "node.kubernetes.io/not-ready"

// PendingBehindTaint finds pods the scheduler cannot place because every
// node carries the not-ready taint: the seeds' "CNI pods Pending" failure,
// where the CNI's own DaemonSet (which would make the nodes Ready) does not
// tolerate it. It returns one problem naming up to five pods.
//
// The scheduler names the taint in older versions; from 1.3x it says only
// "had untolerated taint(s)", so such a pod counts while a node carries the
// not-ready taint.
func PendingBehindTaint(pods []corev1.Pod, nodes []corev1.Node) *NodeProblem {
	tainted := false
	for _, n := range nodes {
		for _, t := range n.Spec.Taints {
			tainted = tainted || t.Key == NotReadyTaint
		}
	}
	var names []string
	for _, p := range pods {
		if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
				continue
			}
			if strings.Contains(c.Message, NotReadyTaint) || tainted && strings.Contains(c.Message, "untolerated taint") {
				names = append(names, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	shown := names
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return &NodeProblem{
		Reason: fmt.Sprintf("%d pod(s) Pending behind the %s taint: %s", len(names), NotReadyTaint, strings.Join(shown, ", ")),
		Hint: "nodes stay NotReady until a CNI runs, and nothing else is scheduled meanwhile: check the CNI's DaemonSet " +
			"('kubectl -n kube-system get ds'; its pods must tolerate " + NotReadyTaint + ":NoSchedule, as Calico's, Cilium's and Flannel's do) and its logs",
	}
}

// PendingPods lists the Pending pods of the cluster.
func PendingPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
	if err != nil {
		return nil, fmt.Errorf("list pending pods: %w", err)
	}
	return l.Items, nil
}

// IPPoolPath is where Calico's IPPool objects live (its CRDs, installed by
// Calico's manifests or operator).
const IPPoolPath = "/apis/crd.projectcalico.org/v1/ippools"

// CalicoIPPools reads Calico's IPPool list raw; found is false when the CRD
// is not installed (no Calico: nothing to compare).
func CalicoIPPools(ctx context.Context, cs kubernetes.Interface) (body []byte, found bool, err error) {
	rc := cs.Discovery().RESTClient()
	if rc == nil {
		return nil, false, nil // a fake clientset
	}
	body, err = rc.Get().AbsPath(IPPoolPath).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list Calico IPPools: %w", err)
	}
	return body, true, nil
}

// IPPoolProblems compares each IPPool's CIDR with the cluster's networks: a
// pool that is not network.podCIDR (Calico's default 192.168.0.0/16 is the
// classic) gives pods addresses no route, Node podCIDR or kube-proxy
// --cluster-cidr knows; one that overlaps the service range or a host's
// address breaks those.
func IPPoolProblems(list []byte, podCIDR, serviceCIDR netip.Prefix, hosts map[string]netip.Addr) ([]NodeProblem, error) {
	var v struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				CIDR     string `json:"cidr"`
				Disabled bool   `json:"disabled"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(list, &v); err != nil {
		return nil, fmt.Errorf("IPPool list: %w", err)
	}
	hostNames := make([]string, 0, len(hosts))
	for n := range hosts {
		hostNames = append(hostNames, n)
	}
	sort.Strings(hostNames)
	var out []NodeProblem
	for _, it := range v.Items {
		if it.Spec.Disabled {
			continue
		}
		name := "IPPool " + it.Metadata.Name
		p, err := netip.ParsePrefix(it.Spec.CIDR)
		if err != nil {
			out = append(out, NodeProblem{Reason: fmt.Sprintf("%s: cidr %q is not a CIDR", name, it.Spec.CIDR), Hint: "fix the IPPool's spec.cidr"})
			continue
		}
		p = p.Masked()
		if p.Addr().Is4() != podCIDR.Addr().Is4() {
			continue // the other family of a dual-stack pool set
		}
		var why []string
		if !(podCIDR.Contains(p.Addr()) && p.Bits() >= podCIDR.Bits()) {
			why = append(why, fmt.Sprintf("differs from network.podCIDR %s", podCIDR))
		}
		if serviceCIDR.IsValid() && p.Overlaps(serviceCIDR) {
			why = append(why, fmt.Sprintf("overlaps the service range %s", serviceCIDR))
		}
		for _, n := range hostNames {
			if p.Contains(hosts[n]) {
				why = append(why, fmt.Sprintf("contains host %s (%s)", n, hosts[n]))
			}
		}
		if len(why) == 0 {
			continue
		}
		out = append(out, NodeProblem{
			Reason: fmt.Sprintf("%s cidr %s %s", name, p, strings.Join(why, "; ")),
			Hint: fmt.Sprintf("give Calico network.podCIDR (CALICO_IPV4POOL_CIDR=%s, or the operator's Installation ipPools) and delete the wrong pool with 'kubectl delete ippools.crd.projectcalico.org %s' before pods use it",
				podCIDR, usererr.Quote(it.Metadata.Name)),
		})
	}
	return out, nil
}
