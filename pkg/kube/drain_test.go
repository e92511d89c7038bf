package kube

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hardway/hardway/pkg/usererr"
)

// drainFake is a fake clientset that does what the apiserver does and the
// fake does not: filter pods by spec.nodeName, advertise and perform
// evictions (deleting the pod). It records the evictions and refuses
// plain pod deletes, which a drain must never send.
type drainFake struct {
	*fake.Clientset
	mu      sync.Mutex
	evicted []string
	grace   []*int64
	deletes int
}

func newDrainFake(t *testing.T, objs ...runtime.Object) *drainFake {
	t.Helper()
	f := &drainFake{Clientset: fake.NewClientset(objs...)}
	f.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Kind: "Pod", Namespaced: true},
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1", Namespaced: true},
	}}}
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	f.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		f.mu.Lock()
		f.evicted = append(f.evicted, ev.Namespace+"/"+ev.Name)
		f.grace = append(f.grace, ev.DeleteOptions.GracePeriodSeconds)
		f.mu.Unlock()
		return true, nil, f.Tracker().Delete(pods, ev.Namespace, ev.Name)
	})
	f.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		f.deletes++
		f.mu.Unlock()
		return true, nil, apierrors.NewForbidden(pods.GroupResource(), a.(k8stesting.DeleteAction).GetName(), nil)
	})
	f.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		objs, err := f.Tracker().List(pods, corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
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
	return f
}

func (f *drainFake) evictions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.evicted)
}

func worker(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// pod is a running pod on node, owned (as controller) by kind/owner unless
// kind is "".
func pod(ns, name, node, kind, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if kind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, UID: types.UID("uid-" + owner), Controller: &yes}}
	}
	return p
}

func unschedulable(t *testing.T, f *drainFake, node string) bool {
	t.Helper()
	n, err := GetNode(t.Context(), f, node)
	if err != nil || n == nil {
		t.Fatalf("node %s: %v %v", node, n, err)
	}
	return n.Spec.Unschedulable
}

func patches(f *drainFake) int {
	n := 0
	for _, a := range f.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			n++
		}
	}
	return n
}

func TestCordonUncordonIdempotent(t *testing.T) {
	ctx := t.Context()
	f := newDrainFake(t, worker("worker-1"))
	for i := range 2 {
		if err := Cordon(ctx, f, "worker-1"); err != nil {
			t.Fatal(err)
		}
		if !unschedulable(t, f, "worker-1") {
			t.Fatalf("cordon %d: schedulable", i)
		}
	}
	if n := patches(f); n != 1 {
		t.Fatalf("cordon twice wrote the Node %d times, want 1", n)
	}
	for i := range 2 {
		if err := Uncordon(ctx, f, "worker-1"); err != nil {
			t.Fatal(err)
		}
		if unschedulable(t, f, "worker-1") {
			t.Fatalf("uncordon %d: unschedulable", i)
		}
	}
	if n := patches(f); n != 2 {
		t.Fatalf("cordon and uncordon twice each wrote the Node %d times, want 2", n)
	}

	for _, op := range []struct {
		verb string
		fn   func(context.Context, *drainFake, string) error
	}{
		{"cordon", func(ctx context.Context, f *drainFake, n string) error { return Cordon(ctx, f, n) }},
		{"uncordon", func(ctx context.Context, f *drainFake, n string) error { return Uncordon(ctx, f, n) }},
	} {
		err := op.fn(ctx, f, "worker-9")
		if err == nil || err.Error() != op.verb+" worker-9: no such Node" || !strings.Contains(usererr.HintOf(err), "has not registered") {
			t.Fatalf("%s of a missing node: %v (hint %q)", op.verb, err, usererr.HintOf(err))
		}
	}
}

func TestDrainEvictsAndLeavesNodePods(t *testing.T) {
	web := pod("default", "web-abc", "worker-1", "ReplicaSet", "web")
	web.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mirror := pod("kube-system", "static-worker-1", "worker-1", "", "")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := pod("default", "job-done", "worker-1", "", "") // bare but finished: no reason to refuse
	done.Status.Phase = corev1.PodSucceeded
	f := newDrainFake(t, worker("worker-1"), worker("worker-2"),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cni"}},
		web, mirror, done,
		pod("kube-system", "cni-x1", "worker-1", "DaemonSet", "cni"),
		pod("default", "web-def", "worker-2", "ReplicaSet", "web"))
	var out bytes.Buffer
	start := time.Now()
	if err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 10 * time.Second, GracePeriod: 1500 * time.Millisecond, Out: &out}); err != nil {
		t.Fatal(err)
	}
	t.Logf("drain took %s:\n%s", time.Since(start), out.String())
	got := f.evictions()
	slices.Sort(got)
	if !slices.Equal(got, []string{"default/job-done", "default/web-abc"}) {
		t.Fatalf("evicted %v, want default/job-done and default/web-abc", got)
	}
	for _, g := range f.grace {
		if g == nil || *g != 2 {
			t.Fatalf("grace period %s, want 2 (1.5 s rounded up)", fmtGrace(g))
		}
	}
	if f.deletes != 0 {
		t.Fatalf("%d plain deletes", f.deletes)
	}
	if !unschedulable(t, f, "worker-1") || unschedulable(t, f, "worker-2") {
		t.Fatal("worker-1 must be cordoned, worker-2 not")
	}
	for _, want := range []string{"drain worker-1: cordoned\n", "drain worker-1: evicting default/web-abc\n",
		"drain worker-1: default/web-abc gone\n", "ignoring DaemonSet-managed Pods: kube-system/cni-x1", "drain worker-1: drained\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, out.String())
		}
	}
	left, err := PodsOn(t.Context(), f, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range left {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cni-x1", "static-worker-1"}) {
		t.Fatalf("left on worker-1: %v", names)
	}

	// Again: nothing left to evict, the pod's own grace period, quiet.
	if err := Drain(t.Context(), f, "worker-1", DrainOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.evictions()); n != 2 {
		t.Fatalf("second drain evicted again: %v", f.evictions())
	}
}

func fmtGrace(g *int64) string {
	if g == nil {
		return "unset"
	}
	return strconv.FormatInt(*g, 10)
}

func TestDrainPodsOwnGracePeriod(t *testing.T) {
	f := newDrainFake(t, worker("worker-1"), pod("default", "web-abc", "worker-1", "ReplicaSet", "web"))
	if err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if len(f.grace) != 1 || f.grace[0] != nil {
		t.Fatalf("grace periods %v, want one unset (the pod's own)", f.grace)
	}
}

func TestDrainRefusesBarePods(t *testing.T) {
	f := newDrainFake(t, worker("worker-1"),
		pod("default", "web-abc", "worker-1", "ReplicaSet", "web"),
		pod("default", "debug", "worker-1", "", ""),
		pod("tools", "shell", "worker-1", "", ""))
	var out bytes.Buffer
	err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 5 * time.Second, Out: &out})
	want := "drain worker-1: 2 pods have no controller (Deployment, StatefulSet, Job, ...) to recreate them elsewhere once evicted: default/debug, tools/shell"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	hint := usererr.HintOf(err)
	if !strings.HasPrefix(hint, "delete them if they may be lost ('kubectl -n default delete pod debug; kubectl -n tools delete pod shell')") || !strings.Contains(hint, "worker-1 stays cordoned") {
		t.Fatalf("hint %q", hint)
	}
	if ev := f.evictions(); len(ev) != 0 {
		t.Fatalf("evicted %v before refusing", ev)
	}
	if !unschedulable(t, f, "worker-1") {
		t.Fatal("not cordoned")
	}

	// One: named in the message itself.
	f = newDrainFake(t, worker("worker-1"), pod("default", "debug", "worker-1", "", ""))
	err = Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 5 * time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), "drain worker-1: pod default/debug has no controller") {
		t.Fatalf("one bare pod: %v", err)
	}
}

func TestDrainBlockedByPDB(t *testing.T) {
	defer func(d time.Duration) { evictRetry = d }(evictRetry)
	evictRetry = 100 * time.Millisecond

	web := pod("default", "web-abc", "worker-1", "ReplicaSet", "web")
	web.Labels = map[string]string{"app": "web"}
	three := intstr.FromInt32(3)
	one := intstr.FromInt32(1)
	budget := func(ns, name string, sel map[string]string, min, max *intstr.IntOrString, allowed, healthy int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, MinAvailable: min, MaxUnavailable: max},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, CurrentHealthy: healthy}}
	}
	f := newDrainFake(t, worker("worker-1"), web,
		budget("default", "web", map[string]string{"app": "web"}, &three, nil, 0, 3),
		budget("default", "db", map[string]string{"app": "db"}, nil, &one, 1, 2),   // another selector
		budget("other", "web", map[string]string{"app": "web"}, &three, nil, 0, 3)) // another namespace
	var mu sync.Mutex
	refusals := 0
	f.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		refusals++
		mu.Unlock()
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	})
	var out bytes.Buffer
	start := time.Now()
	err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 2 * time.Second, Out: &out})
	took := time.Since(start)
	t.Logf("drain took %s, %d refusals:\n%s", took, refusals, out.String())
	want := "drain worker-1: pod default/web-abc not evicted within 2s: PodDisruptionBudget default/web allows 0 disruptions (minAvailable 3, 3 healthy)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	t.Logf("ERR: %v\nHINT: %s", err, usererr.HintOf(err))
	if h := usererr.HintOf(err); !strings.Contains(h, "kubectl get pdb -A") || !strings.Contains(h, "--drain-timeout") {
		t.Fatalf("hint %q", h)
	}
	if took < 2*time.Second || took > 5*time.Second {
		t.Fatalf("took %s for a 2 s timeout", took)
	}
	if refusals < 5 {
		t.Fatalf("%d evictions asked in 2 s at 100 ms apart", refusals)
	}
	if !strings.Contains(out.String(), "drain worker-1: eviction of default/web-abc refused for now") {
		t.Fatalf("progress:\n%s", out.String())
	}
	if f.deletes != 0 {
		t.Fatalf("%d plain deletes", f.deletes)
	}
	if _, err := f.CoreV1().Pods("default").Get(t.Context(), "web-abc", metav1.GetOptions{}); err != nil {
		t.Fatalf("the guarded pod: %v", err)
	}
}

// Two budgets select the pod: the eviction API answers 500 at once, and
// the error names both without waiting for the timeout.
func TestDrainTwoBudgets(t *testing.T) {
	web := pod("default", "web-abc", "worker-1", "ReplicaSet", "web")
	web.Labels = map[string]string{"app": "web", "tier": "front"}
	one := intstr.FromInt32(1)
	f := newDrainFake(t, worker("worker-1"), web,
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, MaxUnavailable: &one},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 3}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "all"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}, MaxUnavailable: &one},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 5}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "none"}, // nil selector: no pod
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one}})
	f.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	})
	start := time.Now()
	err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: time.Minute})
	if time.Since(start) > 10*time.Second {
		t.Fatalf("waited %s for an error that does not pass", time.Since(start))
	}
	want := "(default/web-abc: PodDisruptionBudget default/all allows 1 disruption (maxUnavailable 1, 5 healthy), PodDisruptionBudget default/web allows 1 disruption (maxUnavailable 1, 3 healthy))"
	t.Logf("ERR: %v\nHINT: %s", err, usererr.HintOf(err))
	if err == nil || !strings.HasPrefix(err.Error(), "drain worker-1: error when evicting") || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("got %v\nwant the helper's error and %s", err, want)
	}
	if h := usererr.HintOf(err); !strings.Contains(h, "make their selectors disjoint") {
		t.Fatalf("hint %q", h)
	}
}

func TestDescribeBudget(t *testing.T) {
	half := intstr.FromString("50%")
	b := policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &half}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 2}}
	if got := describeBudget(b); got != "PodDisruptionBudget db/pg allows 1 disruption (maxUnavailable 50%, 2 healthy)" {
		t.Fatal(got)
	}
}

func TestDrainWithoutEvictionAPI(t *testing.T) {
	f := newDrainFake(t, worker("worker-1"), pod("default", "web-abc", "worker-1", "ReplicaSet", "web"))
	f.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Kind: "Pod", Namespaced: true}}}}
	err := Drain(t.Context(), f, "worker-1", DrainOptions{Timeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "serves no pods/eviction") {
		t.Fatalf("got %v", err)
	}
	if f.deletes != 0 || len(f.evictions()) != 0 {
		t.Fatalf("%d deletes, evictions %v", f.deletes, f.evictions())
	}
}
