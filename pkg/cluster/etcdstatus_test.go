package cluster

import (
	"context"
	"strings"
	"testing"
)

// etcd status: one row per member with its numbers, the leader most members
// name, alarms on the member that raised them, and a stopped member named.
func TestEtcdStatus(t *testing.T) {
	inv := threeHosts(t)
	fc := newFakeCluster(t, inv, Options{}, models(inv, runningHost))
	fc.etcd.converged(inv)
	fc.etcd.alarms = []string{"member 11: NOSPACE"}
	fc.etcd.health["https://10.240.0.13:2379"] = false
	ms, err := fc.EtcdStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("%+v", ms)
	}
	c1, c2, c3 := ms[0], ms[1], ms[2]
	if !c1.Reachable || !c1.Leader || c1.MemberID != "10" || c1.Version != "3.6.16" || c1.DBSizeInUse != 1<<20 || c1.RaftIndex != 1234 || len(c1.Alarms) != 0 {
		t.Errorf("c1 %+v", c1)
	}
	if c2.Leader || len(c2.Alarms) != 1 || c2.Alarms[0] != "NOSPACE" {
		t.Errorf("c2 %+v", c2)
	}
	if c3.Reachable || !strings.Contains(c3.Error, "connection refused") || c3.Endpoint != "https://10.240.0.13:2379" {
		t.Errorf("c3 %+v", c3)
	}
}
