package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
)

// With the first controller's apiserver not ready, the cluster-wide API
// calls go through the next one that is (verify's Node checks failed with
// the first controller powered off), and the pick is made once per run.
func TestAPIHostSkipsAnUnreadyController(t *testing.T) {
	inv := threeHosts(t)
	var asked [3]atomic.Int32
	servers := map[string]*httptest.Server{}
	for i, name := range []string{"c1", "c2", "c3"} {
		ready := name != "c1"
		servers[name] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			asked[i].Add(1)
			if r.URL.Path != "/readyz" || !ready {
				http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
				return
			}
			w.Write([]byte("ok"))
		}))
		defer servers[name].Close()
	}
	c := New(inv, Options{Connect: func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		return remotetest.New(t, cfg.Name), nil
	}})
	c.newKube = func(h inventory.Host) (kubernetes.Interface, error) {
		return kubernetes.NewForConfig(&rest.Config{Host: servers[h.Name].URL})
	}
	first := c.apiHost()
	if first.Name == "c1" {
		t.Fatalf("apiHost = c1, which is not ready")
	}
	for range 3 {
		if got := c.apiHost(); got.Name != first.Name {
			t.Fatalf("apiHost = %s, then %s: the pick is made once per run", first.Name, got.Name)
		}
	}
	// All are asked at once; none again after the pick.
	if a, b, c3 := asked[0].Load(), asked[1].Load(), asked[2].Load(); a > 1 || b > 1 || c3 > 1 || b+c3 == 0 {
		t.Errorf("readyz asked c1 %d, c2 %d, c3 %d times; want each at most once", a, b, c3)
	}
}

// With no apiserver ready, the pick is the first host that took an SSH
// connection, not the first listed: with the first controller powered off
// and the others slow on a loaded machine, verify's cluster-wide checks
// all went to the powered-off host. Such a pick is not kept.
func TestAPIHostFallsBackToAReachableController(t *testing.T) {
	inv := threeHosts(t)
	unready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
	}))
	defer unready.Close()
	var ready atomic.Bool
	readyz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer readyz.Close()
	c := New(inv, Options{Connect: func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		if cfg.Name == "c1" {
			return nil, errors.New("dial tcp 10.240.0.11:22: connect: no route to host")
		}
		return remotetest.New(t, cfg.Name), nil
	}})
	c.newKube = func(h inventory.Host) (kubernetes.Interface, error) {
		u := unready.URL
		if h.Name == "c3" {
			u = readyz.URL
		}
		return kubernetes.NewForConfig(&rest.Config{Host: u})
	}
	if got := c.apiHost(); got.Name != "c2" {
		t.Fatalf("apiHost = %s with none ready and c1 unreachable, want c2", got.Name)
	}
	ready.Store(true)
	if got := c.apiHost(); got.Name != "c3" {
		t.Fatalf("apiHost = %s once c3 is ready, want c3 (the fallback is not kept)", got.Name)
	}
}

// A host that could not be dialled is not dialled again for redialAfter:
// verify with a powered-off host waited out the connect timeout once per
// check round. A dial its caller cancelled, or one that failed fast, is not
// remembered.
func TestHostRemembersAFailedDial(t *testing.T) {
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
`))
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	var slow atomic.Bool
	c := New(inv, Options{Connect: func(ctx context.Context, cfg remote.Config) (remote.Host, error) {
		dials.Add(1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if slow.Load() {
			time.Sleep(slowDial)
		}
		return nil, errors.New("dial tcp 10.240.0.11:22: i/o timeout")
	}})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Host(cancelled, "c1"); err == nil {
		t.Fatal("dial succeeded")
	}
	// A fast failure (refused) is tried again each time.
	c.Host(context.Background(), "c1")
	c.Host(context.Background(), "c1")
	slow.Store(true)
	for range 3 {
		if _, err := c.Host(context.Background(), "c1"); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
			t.Fatalf("Host: %v", err)
		}
	}
	if n := dials.Load(); n != 4 {
		t.Errorf("%d dials, want 4 (the cancelled one, two fast failures, then one slow one remembered)", n)
	}
}
