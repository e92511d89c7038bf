package etcd

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/etcdtest"
	"github.com/hardway/hardway/pkg/usererr"
)

func TestDiff(t *testing.T) {
	live := []Member{
		{ID: 1, Name: "c1", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{ID: 2, Name: "c2", PeerURLs: []string{"https://10.0.0.9:2380"}}, // replaced host: new address
		{ID: 3, Name: "old", PeerURLs: []string{"https://10.0.0.3:2380"}},
	}
	want := []Wanted{{"c1", "https://10.0.0.1:2380"}, {"c2", "https://10.0.0.2:2380"}, {"c3", "https://10.0.0.3:2380"}}
	stale, missing := Diff(live, want)
	if len(stale) != 2 || stale[0].ID != 2 || stale[1].ID != 3 {
		t.Fatalf("stale %+v", stale)
	}
	if len(missing) != 2 || missing[0].Name != "c2" || missing[1].Name != "c3" {
		t.Fatalf("missing %+v", missing)
	}
	err := StaleError(stale, "etcdctl")
	if !strings.Contains(usererr.HintOf(err), "etcdctl member remove 3") || !strings.Contains(err.Error(), "old (id 3") {
		t.Fatalf("stale error: %v / %s", err, usererr.HintOf(err))
	}
}

// A real three-member etcd with TLS on loopback, reached through a custom
// dialer (as hardway reaches it through SSH).
func TestRealCluster(t *testing.T) {
	c := etcdtest.Start(t, 3)
	var dials atomic.Int32
	cli, err := New(Config{Endpoints: c.Clients, TLS: c.ClientTLS,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	etcdtest.WaitHealthy(t, 30*time.Second, func(ctx context.Context) error { return cli.Health(ctx, c.Clients[0]) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ms, err := cli.Members(ctx)
	if err != nil || len(ms) != 3 || ms[0].Name != "m1" {
		t.Fatalf("members %+v %v\n%s", ms, err, c.Log(0))
	}
	if dials.Load() == 0 {
		t.Fatal("the custom dialer was not used")
	}
	var leaders = map[uint64]bool{}
	for _, ep := range c.Clients {
		if err := cli.Health(ctx, ep); err != nil {
			t.Fatal(err)
		}
		st, err := cli.Status(ctx, ep)
		if err != nil || st.Version != strings.TrimPrefix(etcdtest.Version, "v") {
			t.Fatalf("status %+v %v", st, err)
		}
		// etcd status's columns: a started member has a raft log, a term and
		// a database of which some pages are in use.
		if st.RaftIndex == 0 || st.RaftTerm == 0 || st.DBSizeInUse <= 0 || st.DBSizeInUse > st.DBSize || st.IsLearner {
			t.Errorf("status %+v", st)
		}
		leaders[st.Leader] = true
	}
	if len(leaders) != 1 || leaders[0] {
		t.Fatalf("members disagree on the leader: %v", leaders)
	}
	if al, err := cli.Alarms(ctx); err != nil || len(al) != 0 {
		t.Fatalf("alarms %v %v", al, err)
	}
	if err := cli.Put(ctx, "/registry/x", "k8s:enc:secretbox:v1:key1:..."); err != nil {
		t.Fatal(err)
	}
	if v, err := cli.Get(ctx, "/registry/x"); err != nil || !strings.HasPrefix(string(v), "k8s:enc:secretbox:v1:") {
		t.Fatalf("get %q %v", v, err)
	}
	if v, err := cli.Get(ctx, "/nope"); err != nil || v != nil {
		t.Fatalf("get missing %q %v", v, err)
	}

	// A member added but never started is stale against the inventory, and
	// removing it by ID heals the member list.
	// etcd refuses reconfiguration until every peer has been connected for
	// a few seconds after start ("unhealthy cluster"): retry until then.
	var id uint64
	etcdtest.WaitHealthy(t, 30*time.Second, func(ctx context.Context) (err error) {
		id, err = cli.AddMember(ctx, "https://127.0.0.1:1")
		return err
	})
	ms, _ = cli.Members(ctx)
	var want []Wanted
	for i, n := range c.Names {
		want = append(want, Wanted{n, c.Peers[i]})
	}
	stale, missing := Diff(ms, want)
	if len(stale) != 1 || stale[0].ID != id || len(missing) != 0 {
		t.Fatalf("stale %+v missing %+v", stale, missing)
	}
	if err := cli.RemoveMember(ctx, id); err != nil {
		t.Fatal(err)
	}
	ms, _ = cli.Members(ctx)
	if stale, _ := Diff(ms, want); len(stale) != 0 {
		t.Fatalf("still stale after remove: %+v", stale)
	}

	// One member down: the others stay healthy (quorum), the dead one fails.
	c.Stop(2)
	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if err := cli.Health(short, c.Clients[2]); err == nil {
		t.Fatal("a stopped member reported healthy")
	}
	if err := cli.Health(ctx, c.Clients[0]); err != nil {
		t.Fatalf("quorum lost with one member down: %v", err)
	}
}
