package cluster

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
)

// The dns step's wait goes on after CoreDNS is available until the cluster
// DNS address answers from every worker (a Deployment is available a moment
// before each kube-proxy routes its Service; a verify run in that moment
// would fail dns/resolve). A worker that never answers is a warning naming it,
// its cause and hint, after the bound, not a failed up.
func TestDNSWaitUntilEveryWorkerResolves(t *testing.T) {
	ctx := context.Background()
	inv := withWorkers(t, 2)
	defer func(d time.Duration) { dnsResolveWait = d }(dnsResolveWait)
	for _, tc := range []struct {
		name     string
		failsFor int // w2's first answers that fail
		bound    time.Duration
		want     string
	}{
		{"w2 answers after a few tries", 3, 20 * time.Second, "[dns] 10.32.0.10 answers from every worker after"},
		{"w2 never answers", 1 << 30, time.Second, "[dns] warning: cluster DNS does not answer from every worker after 1s: w2: kubernetes.default.svc.cluster.local via 10.32.0.10: refused; cause: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dnsResolveWait = tc.bound
			var out bytes.Buffer
			c := New(inv, Options{Out: &out})
			api := fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{ClusterIP: "10.32.0.1"}})
			c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
			var mu sync.Mutex
			calls := map[string]int{}
			// The workers' DNS answers: the Service addresses, except
			// w2's first ones.
			c.queryDNS = func(_ context.Context, host, server, name string) ([]netip.Addr, error) {
				mu.Lock()
				defer mu.Unlock()
				calls[host]++
				if host == "w2" && calls[host] <= tc.failsFor {
					return nil, errors.New("refused")
				}
				if strings.HasPrefix(name, "kubernetes.default.") {
					return []netip.Addr{netip.MustParseAddr("10.32.0.1")}, nil
				}
				return []netip.Addr{netip.MustParseAddr("10.32.0.10")}, nil
			}
			as, err := c.planDNS(ctx, nil)
			if err != nil || len(as) != 2 || as[1].Kind != plan.Wait {
				t.Fatalf("%v %+v", err, as)
			}
			if err := as[0].Do(ctx); err != nil {
				t.Fatal(err)
			}
			d, err := api.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n := *d.Spec.Replicas
			d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas = n, n, n
			if _, err := api.AppsV1().Deployments("kube-system").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			reads := func() int {
				n := 0
				for _, a := range api.Actions() {
					if a.GetResource().Resource == "endpointslices" {
						n++
					}
				}
				return n
			}
			before := reads()
			start := time.Now()
			if err := as[1].Do(ctx); err != nil {
				t.Fatalf("the wait failed the step: %v", err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output %q, want %q", out.String(), tc.want)
			}
			if calls["w2"] < min(tc.failsFor+1, 2) {
				t.Fatalf("w2 asked %d times", calls["w2"])
			}
			// The facts are read once for the wait, and once more only to
			// diagnose a worker still failing at the end, however many
			// queries it took.
			wantReads := 1
			if tc.failsFor > 100 {
				wantReads = 2
			}
			if got := reads() - before; got != wantReads {
				t.Fatalf("%d reads of the EndpointSlices for %d queries of w2, want %d", got, calls["w2"], wantReads)
			}
			if el := time.Since(start); el > tc.bound+5*time.Second {
				t.Fatalf("the wait took %s, bound %s", el, tc.bound)
			}
		})
	}
}
