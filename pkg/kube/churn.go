package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/usererr"
)

// StaleNodes are the Nodes whose names are not in known, sorted.
func StaleNodes(nodes []corev1.Node, known []string) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if !slices.Contains(known, n.Name) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// HardwayWorker says whether a Node carries a pod subnet from pod: with the
// bridge CNI the controller-manager allocates none, so only hardway set it.
func HardwayWorker(n corev1.Node, pod netip.Prefix) bool {
	p, err := netip.ParsePrefix(n.Spec.PodCIDR)
	return err == nil && pod.IsValid() && pod.Contains(p.Addr())
}

// RemoveCommand is what a user runs to remove a stale Node by hand: drain
// it, stop its kubelet (a running kubelet registers the Node again), delete.
func RemoveCommand(name string) string {
	q := usererr.Quote(name)
	return fmt.Sprintf("kubectl drain %s --ignore-daemonsets --delete-emptydir-data --force; on %s: systemctl disable --now kubelet kube-proxy; kubectl delete node %s", q, q, q)
}

// DrainForRemoval cordons the Node of a worker that leaves the cluster and
// evicts its pods (DaemonSet and static pods stay: they belong to the node),
// waiting until they are gone. Evictions go through the Eviction API, so
// PodDisruptionBudgets are respected: one that keeps refusing ends the drain
// with an error after timeout, naming the pods. A Node that does not exist
// is drained. When the Node is not Ready (its kubelet is gone), pods already
// being deleted are not waited for: no kubelet would ever confirm it, and
// deleting the Node lets the pod garbage collector remove them. Drain is
// the one for a node that stays (kubectl's drain helper): it refuses bare
// pods and waits for every evicted pod.
func DrainForRemoval(ctx context.Context, cs kubernetes.Interface, name string, timeout time.Duration) error {
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	node, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("cordon %s: %w", name, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return fmt.Errorf("pods on %s: %w", name, err)
		}
		if n, err := GetNode(ctx, cs, name); err == nil && n != nil {
			node = n
		}
		ready, _ := NodeReady(node)
		var left []string
		for _, p := range pods.Items {
			if stays(p) {
				continue
			}
			// A pod being deleted is gone when its object is: its kubelet
			// removes it after the containers stopped and the volumes were
			// cleaned (a terminal phase comes before that; stopping the
			// kubelet in between would leave the object behind).
			if p.DeletionTimestamp != nil {
				if ready {
					left = append(left, p.Namespace+"/"+p.Name)
				}
				continue
			}
			left = append(left, p.Namespace+"/"+p.Name)
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
			if err := cs.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) {
				return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drain %s: %d pod(s) still there after %s (a PodDisruptionBudget that allows no disruption?): %s", name, len(left), timeout, strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// DeleteNode deletes the Node, then the pods still bound to it (its
// DaemonSet pods, any pod its stopped kubelet never finished), with no grace
// period: no kubelet will ever stop them, and the pod garbage collector
// would only do the same after its quarantine. A Node that does not exist is
// no error.
func DeleteNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Node %s: %w", name, err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("pods on %s: %w", name, err)
	}
	zero := int64(0)
	for _, p := range pods.Items {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s of the deleted Node %s: %w", p.Namespace, p.Name, name, err)
		}
	}
	return nil
}

// stays says whether a pod belongs to its node: DaemonSet pods (the
// DaemonSet would put them back) and static (mirror) pods.
func stays(p corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// CalicoNodeAPIs are where Calico keeps one object per node it knows, and
// the resource kubectl deletes one by: its CRD (what the calico-node pods
// write), then the projectcalico.org/v3 API that the Calico API server
// serves in front of it.
var CalicoNodeAPIs = []struct{ Path, Resource string }{
	{"/apis/crd.projectcalico.org/v1/nodes", "nodes.crd.projectcalico.org"},
	{"/apis/projectcalico.org/v3/nodes", "nodes.projectcalico.org"},
}

// CalicoNodeNames reads Calico's node objects from the first API of
// CalicoNodeAPIs the cluster serves; found is false without Calico.
// resource is what kubectl deletes them by.
func CalicoNodeNames(ctx context.Context, cs kubernetes.Interface) (names []string, resource string, found bool, err error) {
	rc := cs.Discovery().RESTClient()
	if rc == nil {
		return nil, "", false, nil // a fake clientset
	}
	for _, api := range CalicoNodeAPIs {
		body, err := rc.Get().AbsPath(api.Path).DoRaw(ctx)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, "", false, fmt.Errorf("list Calico nodes (%s): %w", api.Resource, err)
		}
		names, err = ParseNames(body)
		return names, api.Resource, true, err
	}
	return nil, "", false, nil
}

// ParseNames reads the object names of a List.
func ParseNames(list []byte) ([]string, error) {
	var v struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(list, &v); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var out []string
	for _, it := range v.Items {
		out = append(out, it.Metadata.Name)
	}
	sort.Strings(out)
	return out, nil
}
