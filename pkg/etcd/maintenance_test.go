package etcd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hardway/hardway/internal/etcdtest"
)

// The maintenance calls against a real three-member etcd: a compaction
// turns deleted keys into free pages, a defragmentation gives them back on
// the one member it is sent to, leadership moves to the member named, and a
// NOSPACE alarm stops writes until it is disarmed.
func TestMaintenance(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli, err := New(Config{Endpoints: c.Clients, TLS: c.ClientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	etcdtest.WaitHealthy(t, 30*time.Second, func(ctx context.Context) error { return cli.Health(ctx, c.Clients[0]) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// About 8 MiB written and deleted: after compaction their pages are free.
	val := strings.Repeat("x", 256<<10)
	for i := range 32 {
		if err := cli.Put(ctx, fmt.Sprintf("/frag/%d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.c.Delete(ctx, "/frag/", prefixOpt()); err != nil {
		t.Fatal(err)
	}
	st, err := cli.Status(ctx, c.Clients[0])
	if err != nil || st.Revision < 33 {
		t.Fatalf("status %+v %v", st, err)
	}
	if st.DBSizeQuota != 2<<30 {
		t.Errorf("quota %d, want etcd's default 2 GiB", st.DBSizeQuota)
	}
	if err := cli.Compact(ctx, st.Revision); err != nil {
		t.Fatal(err)
	}
	// Every member compacts on its own, and bbolt frees the pages in a
	// later commit (a write after the compaction): wait for member 1's
	// free pages.
	var before Status
	etcdtest.WaitHealthy(t, 10*time.Second, func(ctx context.Context) (err error) {
		if err := cli.Put(ctx, "/tick", "x"); err != nil {
			return err
		}
		before, err = cli.Status(ctx, c.Clients[1])
		if free := before.DBSize - before.DBSizeInUse; err == nil && free < 4<<20 {
			return fmt.Errorf("only %d bytes free after compaction: %+v", free, before)
		}
		return err
	})
	// Member 2 is compared with itself: the members' files differ in size
	// (each grows and compacts on its own), and only a defragmentation
	// shrinks one.
	otherBefore, err := cli.Status(ctx, c.Clients[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Defragment(ctx, c.Clients[1]); err != nil {
		t.Fatal(err)
	}
	after, _ := cli.Status(ctx, c.Clients[1])
	other, _ := cli.Status(ctx, c.Clients[2])
	if after.DBSize >= before.DBSize-4<<20 || other.DBSize < otherBefore.DBSize {
		t.Fatalf("defragmenting member 1: %d -> %d bytes; member 2 (not defragmented) %d -> %d", before.DBSize, after.DBSize, otherBefore.DBSize, other.DBSize)
	}

	// Leadership moves to the member named, and only the leader may move it.
	var leaderEP string
	var target uint64
	for _, ep := range c.Clients {
		s, err := cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		if s.MemberID == s.Leader {
			leaderEP = ep
		} else {
			target = s.MemberID
		}
	}
	for _, ep := range c.Clients {
		if ep != leaderEP {
			if err := cli.MoveLeader(ctx, ep, target); err == nil {
				t.Fatalf("a follower (%s) moved leadership", ep)
			}
			break
		}
	}
	if err := cli.MoveLeader(ctx, leaderEP, target); err != nil {
		t.Fatal(err)
	}
	etcdtest.WaitHealthy(t, 10*time.Second, func(ctx context.Context) error {
		s, err := cli.Status(ctx, leaderEP)
		if err != nil || s.Leader != target {
			return fmt.Errorf("leader %x, want %x (%v)", s.Leader, target, err)
		}
		return nil
	})

	// NOSPACE: reads go on, writes stop, disarm brings them back.
	if err := cli.RaiseNoSpace(ctx, target); err != nil {
		t.Fatal(err)
	}
	if al, _ := cli.Alarms(ctx); len(al) != 1 || !strings.HasSuffix(al[0], "NOSPACE") {
		t.Fatalf("alarms %v", al)
	}
	if err := cli.Put(ctx, "/after", "x"); err == nil || !strings.Contains(err.Error(), "space exceeded") {
		t.Fatalf("a write under NOSPACE: %v", err)
	}
	if _, err := cli.Get(ctx, "/frag/1"); err != nil {
		t.Fatalf("a read under NOSPACE: %v", err)
	}
	got, err := cli.DisarmNoSpace(ctx)
	if err != nil || len(got) != 1 || got[0].Kind != "NOSPACE" || got[0].MemberID != target {
		t.Fatalf("disarm %+v %v", got, err)
	}
	if al, _ := cli.Alarms(ctx); len(al) != 0 {
		t.Fatalf("alarms after disarm %v", al)
	}
	if err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("a write after disarm: %v", err)
	}
}

func prefixOpt() clientv3.OpOption { return clientv3.WithPrefix() }
