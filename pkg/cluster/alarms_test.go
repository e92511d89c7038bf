package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/verify"
)

func alarmCheck(t *testing.T, fc *fakeCluster) verify.Result {
	t.Helper()
	for _, r := range fc.checkEtcd(context.Background()) {
		if r.Check == CheckEtcdAlarms {
			return r
		}
	}
	t.Fatal("no etcd/alarms result")
	return verify.Result{}
}

// NOSPACE names the member that raised it, the quota the members report,
// and the one sequence out, in its order, with the etcdctl flags for the
// disarm. CORRUPT is never to be disarmed.
func TestNoSpaceDiagnosis(t *testing.T) {
	fc, m := maintCluster(t)
	fc.Inv.Path = "/home/me/inventory.yaml"
	fc.Cluster.newEtcd = func() (etcdAPI, error) { return m, nil } // statuses with the quota
	if r := alarmCheck(t, fc); r.Status != verify.Pass {
		t.Fatalf("no alarm: %+v", r)
	}

	fc.etcd.alarms = []string{"member 11: NOSPACE"}
	m.quota = 40 << 20
	r := alarmCheck(t, fc)
	if r.Status != verify.Fail || !strings.Contains(r.Message, "NOSPACE raised by c2 (member 11)") ||
		!strings.Contains(r.Message, "40.0 MiB (--quota-backend-bytes") {
		t.Fatalf("%+v", r)
	}
	steps := []string{
		"1) 'hardway etcd compact -i /home/me/inventory.yaml'",
		"2) 'hardway etcd defrag -i /home/me/inventory.yaml --all'",
		"3) 'hardway etcd disarm -i /home/me/inventory.yaml', or on a control-plane host: 'etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/etcd/ca.crt",
		"alarm disarm'",
		"4) check the quota: 'hardway etcd status -i /home/me/inventory.yaml'",
		"if IN USE stays near 40.0 MiB",
		"--quota-backend-bytes",
	}
	at := 0
	for _, s := range steps {
		i := strings.Index(r.Hint[at:], s)
		if i < 0 {
			t.Fatalf("hint lacks %q after position %d:\n%s", s, at, r.Hint)
		}
		at += i + len(s)
	}
	if strings.Contains(r.Hint, "CORRUPT") {
		t.Errorf("%s", r.Hint)
	}

	// The disarm the hint names refuses while the file is at the quota.
	if _, err := fc.DisarmNoSpace(context.Background(), false); err == nil {
		t.Fatal("disarmed with a file at its quota")
	}

	fc.etcd.alarms = []string{"member 12: CORRUPT"}
	r = alarmCheck(t, fc)
	if r.Status != verify.Fail || !strings.Contains(r.Message, "CORRUPT raised by c3") || !strings.Contains(r.Hint, "never disarm CORRUPT") || strings.Contains(r.Hint, "defrag") {
		t.Fatalf("%+v", r)
	}
}

// etcd status shows each member's quota, for step 4 of the NOSPACE sequence.
func TestEtcdStatusQuota(t *testing.T) {
	fc, m := maintCluster(t)
	fc.Cluster.newEtcd = func() (etcdAPI, error) { return m, nil }
	m.quota = 40 << 20
	ms, err := fc.EtcdStatus(context.Background())
	if err != nil || len(ms) != 3 || ms[0].DBSizeQuota != 40<<20 || ms[2].DBSize != 40<<20 {
		t.Fatalf("%+v %v", ms, err)
	}
}
