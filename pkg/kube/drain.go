package kube

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/hardway/hardway/pkg/usererr"
)

// DrainOptions bound a Drain.
type DrainOptions struct {
	// Timeout bounds the evictions and the wait for the evicted pods to be
	// gone, all pods together; 0 waits as long as it takes (as kubectl
	// drain --timeout=0).
	Timeout time.Duration
	// GracePeriod is each pod's grace period; 0 keeps the pod's own
	// terminationGracePeriodSeconds.
	GracePeriod time.Duration
	// Out gets one progress line per step ("drain worker-1: evicting
	// default/web-abc"); nil keeps quiet.
	Out io.Writer
}

// evictRetry is how long Drain waits before it asks again for an eviction
// that was refused with 429 (a PodDisruptionBudget that allows no
// disruption now): kubectl drain's default. Tests shorten it. The helper
// sleeps it through, so a drain can end up to this much after its Timeout.
var evictRetry = 5 * time.Second

// Cordon marks the Node unschedulable; a cordoned Node is left as it is.
func Cordon(ctx context.Context, cs kubernetes.Interface, node string) error {
	_, err := setUnschedulable(ctx, cs, node, true)
	return err
}

// Uncordon makes the Node schedulable again; a schedulable Node is left as
// it is.
func Uncordon(ctx context.Context, cs kubernetes.Interface, node string) error {
	_, err := setUnschedulable(ctx, cs, node, false)
	return err
}

// setUnschedulable patches spec.unschedulable to on the way kubectl cordon
// does; changed says whether the Node needed it.
func setUnschedulable(ctx context.Context, cs kubernetes.Interface, node string, on bool) (changed bool, err error) {
	verb := "cordon"
	if !on {
		verb = "uncordon"
	}
	n, err := GetNode(ctx, cs, node)
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", verb, node, err)
	}
	if n == nil {
		return false, usererr.New(fmt.Errorf("%s %s: no such Node", verb, node), causeHint(CauseUnregistered, node))
	}
	if n.Spec.Unschedulable == on {
		return false, nil
	}
	if err := drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: cs}, n, on); err != nil {
		return false, fmt.Errorf("%s %s: %w", verb, node, err)
	}
	return true, nil
}

// PodsOn lists the pods bound to node, in every namespace.
func PodsOn(ctx context.Context, cs kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("pods on %s: %w", node, err)
	}
	return l.Items, nil
}

// Drain cordons the Node and evicts its pods, as kubectl drain does,
// waiting until the evicted pods are gone. DaemonSet pods and static
// (mirror) pods stay: they belong to the node and come back with it.
// Evictions, never deletes, so PodDisruptionBudgets are respected: while
// one refuses, Drain asks again until o.Timeout, then names the pods still
// there and the budgets that keep them. A pod that no controller would
// recreate elsewhere refuses the drain before anything is evicted. The
// Node stays cordoned when Drain fails.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, o DrainOptions) error {
	say := &progress{out: o.Out, node: node}
	changed, err := setUnschedulable(ctx, cs, node, true)
	if err != nil {
		return err
	}
	if changed {
		say.line("cordoned")
	} else {
		say.line("already cordoned")
	}
	h := drainHelper(ctx, cs, o, say)
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return drainRefused(ctx, cs, node, errs)
	}
	if w := list.Warnings(); w != "" {
		say.line("%s", w)
	}
	pods := list.Pods()
	if len(pods) == 0 {
		say.line("no pods to evict")
		return nil
	}
	// The helper deletes the pods instead when the apiserver serves no
	// eviction subresource; that would skip the budgets, so refuse.
	gv, err := drain.CheckEvictionSupport(cs)
	if err != nil {
		return fmt.Errorf("drain %s: discover the eviction API: %w", node, err)
	}
	if gv.Empty() {
		return fmt.Errorf("drain %s: the apiserver serves no pods/eviction subresource, and deleting the pods instead would ignore their PodDisruptionBudgets", node)
	}
	start := time.Now()
	if err := h.DeleteOrEvictPods(pods); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("drain %s: %w", node, ctx.Err())
		}
		return notEvicted(ctx, cs, node, pods, o.Timeout, time.Since(start), err)
	}
	say.line("drained")
	return nil
}

// drainHelper is kubectl drain's helper with the rules of an in-place
// upgrade.
func drainHelper(ctx context.Context, cs kubernetes.Interface, o DrainOptions, say *progress) *drain.Helper {
	grace := -1 // the helper's word for the pod's own grace period
	if o.GracePeriod > 0 {
		// Rounded up: 0 would mean "kill now".
		grace = int(math.Ceil(o.GracePeriod.Seconds()))
	}
	var mu sync.Mutex
	tries := map[string]int{}
	return &drain.Helper{
		Ctx:    ctx,
		Client: cs,
		// Not forced: a bare pod (no controller) evicted would be gone for
		// good, so drainRefused names it and the user decides.
		Force:               false,
		IgnoreAllDaemonSets: true,
		// The node is upgraded in place and comes back with its disks, but
		// an evicted pod's emptyDir is gone with the pod whatever we do:
		// refusing such pods would only block the drain.
		DeleteEmptyDirData:   true,
		DisableEviction:      false,
		GracePeriodSeconds:   grace,
		Timeout:              o.Timeout,
		EvictErrorRetryDelay: evictRetry,
		// The helper's own lines are kubectl's (they name its flags);
		// ours come from the callbacks below.
		Out:    io.Discard,
		ErrOut: io.Discard,
		// Called before each attempt, from one goroutine per pod: the
		// second attempt means the first was refused.
		OnPodDeletionOrEvictionStarted: func(p *corev1.Pod, _ bool) {
			key := p.Namespace + "/" + p.Name
			mu.Lock()
			tries[key]++
			n := tries[key]
			mu.Unlock()
			switch n {
			case 1:
				say.line("evicting %s", key)
			case 2:
				say.line("eviction of %s refused for now (a PodDisruptionBudget?), asking again every %s", key, evictRetry)
			}
		},
		OnPodDeletionOrEvictionFinished: func(p *corev1.Pod, _ bool, err error) {
			if err == nil {
				say.line("%s/%s gone", p.Namespace, p.Name)
			}
		},
	}
}

// progress writes "drain <node>: ..." lines; the helper calls it from
// several goroutines.
type progress struct {
	mu   sync.Mutex
	out  io.Writer
	node string
}

func (p *progress) line(format string, a ...any) {
	if p.out == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "drain %s: %s\n", p.node, fmt.Sprintf(format, a...))
}

// unmanagedText is how the helper's refusal of bare pods begins ("cannot
// delete Pods that declare no controller (use --force to override): ...");
// drainRefused says it in its own words, without kubectl's flag.
const unmanagedText = "Pods that declare no controller"

// drainRefused explains why the helper refused to drain the node at all:
// bare pods, which no controller would recreate elsewhere, are named with
// what to do about them; other refusals are passed on.
func drainRefused(ctx context.Context, cs kubernetes.Interface, node string, errs []error) error {
	var other []error
	for _, e := range errs {
		if !strings.Contains(e.Error(), unmanagedText) {
			other = append(other, e)
		}
	}
	pods, err := PodsOn(ctx, cs, node)
	if err != nil || len(other) == len(errs) {
		return fmt.Errorf("drain %s: %w", node, utilerrors.NewAggregate(errs))
	}
	byNS := map[string][]string{}
	var bare []string
	for _, p := range pods {
		if unmanaged(p) {
			bare = append(bare, p.Namespace+"/"+p.Name)
			byNS[p.Namespace] = append(byNS[p.Namespace], usererr.Quote(p.Name))
		}
	}
	if len(bare) == 0 { // gone since the helper looked
		return fmt.Errorf("drain %s: %w", node, utilerrors.NewAggregate(errs))
	}
	msg := fmt.Sprintf("drain %s: pod %s has no controller (Deployment, StatefulSet, Job, ...) to recreate it elsewhere once evicted", node, bare[0])
	if len(bare) > 1 {
		msg = fmt.Sprintf("drain %s: %d pods have no controller (Deployment, StatefulSet, Job, ...) to recreate them elsewhere once evicted: %s",
			node, len(bare), strings.Join(bare, ", "))
	}
	if len(other) > 0 {
		msg += "; also " + utilerrors.NewAggregate(other).Error()
	}
	var cmds []string
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		cmds = append(cmds, fmt.Sprintf("kubectl -n %s delete pod %s", usererr.Quote(ns), strings.Join(byNS[ns], " ")))
	}
	them := "it"
	if len(bare) > 1 {
		them = "them"
	}
	hint := fmt.Sprintf("delete %s if %s may be lost ('%s') or run %s under a controller (a Deployment, say) that recreates %s elsewhere, then run 'hardway upgrade apply' again; nothing was evicted, %s stays cordoned",
		them, map[string]string{"it": "it", "them": "they"}[them], strings.Join(cmds, "; "), them, them, node)
	return usererr.New(fmt.Errorf("%s", msg), hint)
}

// unmanaged is the helper's bare pod: running, no controller, not static.
func unmanaged(p corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	return metav1.GetControllerOf(&p) == nil
}

// notEvicted explains a failed eviction: which of pods are still there
// and, for each, the PodDisruptionBudgets that select it.
func notEvicted(ctx context.Context, cs kubernetes.Interface, node string, pods []corev1.Pod, timeout, took time.Duration, cause error) error {
	var stuck []corev1.Pod
	for _, p := range pods {
		cur, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && cur.UID != p.UID:
			continue // evicted (and maybe recreated under the same name)
		case err != nil:
			cur = &p // cannot tell: count it as there
		}
		stuck = append(stuck, *cur)
	}
	if len(stuck) == 0 {
		return fmt.Errorf("drain %s: %w", node, cause)
	}
	var reasons, hints []string
	terminating := 0
	hint := func(h string) {
		if !slices.Contains(hints, h) {
			hints = append(hints, h)
		}
	}
	for _, p := range stuck {
		pdbs, err := budgetsOf(ctx, cs, p)
		var why string
		switch {
		case p.DeletionTimestamp != nil:
			// Evicted: its budget let it go, its kubelet has not.
			terminating++
			why = "evicted, still terminating"
			hint(fmt.Sprintf("an evicted pod is gone when its kubelet has stopped it and its finalizers are done: see 'journalctl -u kubelet' on %s and 'kubectl -n %s get pod %s -o jsonpath={.metadata.finalizers}', or raise --drain-timeout",
				node, usererr.Quote(p.Namespace), usererr.Quote(p.Name)))
		case err != nil:
			why = err.Error()
		case len(pdbs) > 0:
			var d []string
			for _, b := range pdbs {
				d = append(d, describeBudget(b))
			}
			why = strings.Join(d, ", ")
			if len(pdbs) > 1 {
				hint("the eviction API refuses a pod that more than one PodDisruptionBudget selects: make their selectors disjoint ('kubectl get pdb -A -o wide')")
			} else {
				hint("the PDB blocks it until enough replicas are ready elsewhere: check 'kubectl get pdb -A' and the pods of its selector (are they Pending?), or raise --drain-timeout")
			}
		default:
			why = "no PodDisruptionBudget selects it now"
			hint("a PodDisruptionBudget may have refused it before it changed: check 'kubectl get pdb -A' and run again, or raise --drain-timeout")
		}
		reasons = append(reasons, p.Namespace+"/"+p.Name+": "+why)
	}
	if timeout <= 0 || took < timeout {
		return usererr.New(fmt.Errorf("drain %s: %w (%s)", node, cause, strings.Join(reasons, "; ")), strings.Join(hints, "; "))
	}
	verb := "evicted"
	if terminating == len(stuck) {
		verb = "gone"
	}
	var err error
	if len(stuck) == 1 {
		_, why, _ := strings.Cut(reasons[0], ": ")
		err = fmt.Errorf("drain %s: pod %s/%s not %s within %s: %s", node, stuck[0].Namespace, stuck[0].Name, verb, timeout, why)
	} else {
		err = fmt.Errorf("drain %s: %d pods not %s within %s: %s", node, len(stuck), verb, timeout, strings.Join(reasons, "; "))
	}
	return usererr.New(err, strings.Join(hints, "; "))
}

// budgetsOf lists the PodDisruptionBudgets in the pod's namespace whose
// selector matches it, by name.
func budgetsOf(ctx context.Context, cs kubernetes.Interface, p corev1.Pod) ([]policyv1.PodDisruptionBudget, error) {
	l, err := cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("PodDisruptionBudgets in %s: %w", p.Namespace, err)
	}
	var out []policyv1.PodDisruptionBudget
	for _, b := range l.Items {
		// A nil selector selects nothing, an empty one every pod, as the
		// eviction API reads them (and LabelSelectorAsSelector).
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// describeBudget says what a budget allows and why, from its status:
// "PodDisruptionBudget default/web allows 0 disruptions (minAvailable 3,
// 3 healthy)".
func describeBudget(b policyv1.PodDisruptionBudget) string {
	var rule string
	switch {
	case b.Spec.MinAvailable != nil:
		rule = "minAvailable " + b.Spec.MinAvailable.String() + ", "
	case b.Spec.MaxUnavailable != nil:
		rule = "maxUnavailable " + b.Spec.MaxUnavailable.String() + ", "
	}
	s := "s"
	if b.Status.DisruptionsAllowed == 1 {
		s = ""
	}
	return fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruption%s (%s%d healthy)",
		b.Namespace, b.Name, b.Status.DisruptionsAllowed, s, rule, b.Status.CurrentHealthy)
}
