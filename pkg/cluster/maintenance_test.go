package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/usererr"
)

// fakeMaint is the fake etcd with per-member database sizes, a leader that
// moves, and every maintenance call recorded in order next to the health
// checks between them.
type fakeMaint struct {
	*fakeEtcd
	mu       sync.Mutex
	size     map[string][2]int64 // endpoint -> size, in use
	leader   uint64
	quota    int64
	rev      int64
	log      []string
	notReady map[string]bool // apiserver hosts that fail /readyz
	// afterDefrag runs after each defragmentation (to break things).
	afterDefrag func(ep string)
}

func newFakeMaint(fc *fakeCluster) *fakeMaint {
	m := &fakeMaint{fakeEtcd: fc.etcd, size: map[string][2]int64{}, leader: 0x10, rev: 4242, notReady: map[string]bool{}}
	fc.Cluster.maint = maintHooks{
		etcd: func() (maintAPI, error) { return m, nil },
		apiserverReady: func(_ context.Context, h inventory.Host) error {
			m.note("ready " + h.Name)
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.notReady[h.Name] {
				return fmt.Errorf("/readyz 500: [-]etcd failed")
			}
			return nil
		},
	}
	return m
}

func (m *fakeMaint) note(s string) {
	m.mu.Lock()
	m.log = append(m.log, s)
	m.mu.Unlock()
}

func (m *fakeMaint) Status(ctx context.Context, ep string) (etcd.Status, error) {
	st, err := m.fakeEtcd.Status(ctx, ep)
	if err != nil {
		return st, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.size[ep]; ok {
		st.DBSize, st.DBSizeInUse = s[0], s[1]
	}
	st.Leader, st.DBSizeQuota, st.Revision = m.leader, m.quota, m.rev
	return st, nil
}

func (m *fakeMaint) Defragment(_ context.Context, ep string) error {
	m.note("defrag " + ep)
	m.mu.Lock()
	s := m.size[ep]
	m.size[ep] = [2]int64{s[1], s[1]}
	hook := m.afterDefrag
	m.mu.Unlock()
	if hook != nil {
		hook(ep)
	}
	return nil
}

func (m *fakeMaint) MoveLeader(_ context.Context, ep string, to uint64) error {
	m.note(fmt.Sprintf("move %s %x", ep, to))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mem := range m.members {
		if mem.ID == m.leader && mem.ClientURLs[0] != ep {
			return fmt.Errorf("etcdserver: not leader")
		}
	}
	m.leader = to
	return nil
}

func (m *fakeMaint) Compact(_ context.Context, rev int64) error {
	m.note(fmt.Sprintf("compact %d", rev))
	return nil
}

func (m *fakeMaint) DisarmNoSpace(context.Context) ([]etcd.Alarm, error) {
	m.note("disarm")
	m.fakeEtcd.mu.Lock()
	defer m.fakeEtcd.mu.Unlock()
	var out []etcd.Alarm
	var keep []string
	for _, a := range m.fakeEtcd.alarms {
		var id uint64
		var kind string
		fmt.Sscanf(a, "member %x: %s", &id, &kind)
		if kind == "NOSPACE" {
			out = append(out, etcd.Alarm{MemberID: id, Kind: kind})
		} else {
			keep = append(keep, a)
		}
	}
	m.fakeEtcd.alarms = keep
	return out, nil
}

// changes are the calls that change the cluster, in order.
func (m *fakeMaint) changes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, l := range m.log {
		if !strings.HasPrefix(l, "ready ") {
			out = append(out, l)
		}
	}
	return out
}

const (
	ep1 = "https://10.240.0.11:2379"
	ep2 = "https://10.240.0.12:2379"
	ep3 = "https://10.240.0.13:2379"
)

func maintCluster(t *testing.T) (*fakeCluster, *fakeMaint) {
	inv := threeHosts(t)
	fc := newFakeCluster(t, inv, Options{}, models(inv, runningHost))
	fc.etcd.converged(inv) // c1 = 0x10 leads
	m := newFakeMaint(fc)
	m.size[ep1] = [2]int64{40 << 20, 28 << 20} // 30% free: defragmented, last
	m.size[ep2] = [2]int64{40 << 20, 38 << 20} // 5%: skipped
	m.size[ep3] = [2]int64{40 << 20, 20 << 20} // 50%
	return fc, m
}

// The plan only reads: followers over the threshold first, then the
// leadership move and the old leader; a member under the threshold skipped.
func TestDefragPlan(t *testing.T) {
	fc, m := maintCluster(t)
	p, err := fc.PlanDefrag(context.Background(), DefragOptions{Threshold: DefaultDefragThreshold, MinFree: DefaultDefragMinFree})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.changes(); len(got) != 0 {
		t.Fatalf("the plan changed something: %v", got)
	}
	var descs []string
	for _, a := range p.Actions {
		if a.Kind != plan.Maintenance {
			t.Errorf("%s: kind %s", a.Desc, a.Kind)
		}
		descs = append(descs, a.Host+": "+a.Desc)
	}
	want := []string{
		"c3: defragment etcd member c3 (20.0 MiB of 40.0 MiB free, 50%)",
		"c1: move etcd leadership from c1 to a healthy follower",
		"c1: defragment etcd member c1 (12.0 MiB of 40.0 MiB free, 30%)",
	}
	if !slices.Equal(descs, want) {
		t.Fatalf("actions\n%s\nwant\n%s", strings.Join(descs, "\n"), strings.Join(want, "\n"))
	}
	c2 := p.Members[1]
	if c2.Defrag || c2.Reason != "5% free: under the threshold 10%" || c2.Free != 2<<20 || !p.Members[0].Leader {
		t.Errorf("members %+v", p.Members)
	}

	// The minimum size applies too, and --all takes every member.
	p, _ = fc.PlanDefrag(context.Background(), DefragOptions{Threshold: 0.1, MinFree: 16 << 20})
	if len(p.Actions) != 1 || p.Members[0].Reason != "12.0 MiB free: under the minimum 16.0 MiB" {
		t.Errorf("min free: %+v", p.Members)
	}
	p, _ = fc.PlanDefrag(context.Background(), DefragOptions{All: true})
	if len(p.Actions) != 4 {
		t.Errorf("--all: %d actions", len(p.Actions))
	}

	// Dry run: the plan printed, nothing changed.
	var out bytes.Buffer
	if _, err := (&plan.Runner{Out: &out, DryRun: true}).Run(context.Background(), []plan.Step{p.Step()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "[defrag] would c1: move etcd leadership from c1") || len(m.changes()) != 0 {
		t.Fatalf("dry run:\n%s\n%v", out.String(), m.changes())
	}
}

// The run: one member at a time, the whole cluster proved healthy (every
// member, the quorum, every apiserver) before and after each, leadership
// moved to a follower before the old leader is defragmented.
func TestDefragRun(t *testing.T) {
	fc, m := maintCluster(t)
	p, err := fc.PlanDefrag(context.Background(), DefragOptions{Threshold: 0.1, MinFree: 1 << 20, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.log = nil
	m.mu.Unlock()
	if _, err := (&plan.Runner{Out: &bytes.Buffer{}}).Run(context.Background(), []plan.Step{p.Step()}); err != nil {
		t.Fatal(err)
	}
	want := []string{"defrag " + ep3, "move " + ep1 + " 11", "defrag " + ep1}
	if got := m.changes(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	// Between two changes every apiserver was asked.
	m.mu.Lock()
	log := strings.Join(m.log, "\n")
	m.mu.Unlock()
	for _, seg := range strings.Split(log, "defrag ")[1:] {
		if !strings.Contains(seg, "ready c1\nready c2\nready c3") {
			t.Errorf("no readiness check of every apiserver after a defragmentation:\n%s", log)
		}
	}
	if m.size[ep1][0] != 28<<20 || m.size[ep2][0] != 40<<20 || m.size[ep3][0] != 20<<20 {
		t.Errorf("sizes %v", m.size)
	}
}

// A member down: the plan refuses (quorum). An apiserver that does not come
// back after a member's defragmentation stops the run before the next one.
func TestDefragStops(t *testing.T) {
	fc, m := maintCluster(t)
	fc.etcd.health[ep2] = false
	_, err := fc.PlanDefrag(context.Background(), DefragOptions{Threshold: 0.1})
	if err == nil || !strings.Contains(err.Error(), "etcd member c2 is not healthy") || !strings.Contains(usererr.HintOf(err), "bring etcd on c2 back") {
		t.Fatalf("%v", err)
	}
	fc.etcd.health[ep2] = true

	m.afterDefrag = func(string) { m.notReady["c2"] = true }
	p, err := fc.PlanDefrag(context.Background(), DefragOptions{Threshold: 0.1, Wait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&plan.Runner{Out: &bytes.Buffer{}}).Run(context.Background(), []plan.Step{p.Step()})
	if err == nil || !strings.Contains(err.Error(), "after defragmenting c3: kube-apiserver on c2 is not ready") {
		t.Fatalf("%v", err)
	}
	if got := m.changes(); !slices.Equal(got, []string{"defrag " + ep3}) {
		t.Fatalf("went on after a failed check: %v", got)
	}

	// An apiserver not ready at plan time: nothing is planned.
	if _, err := fc.PlanDefrag(context.Background(), DefragOptions{Threshold: 0.1}); err == nil || !strings.Contains(err.Error(), "kube-apiserver on c2 is not ready") {
		t.Fatalf("%v", err)
	}
}

// compact goes to the newest revision; disarm refuses while a file is at its
// quota and disarms only NOSPACE.
func TestCompactAndDisarm(t *testing.T) {
	fc, m := maintCluster(t)
	rev, err := fc.CompactEtcd(context.Background(), true)
	if err != nil || rev != 4242 || len(m.changes()) != 0 {
		t.Fatalf("dry run: %d %v %v", rev, err, m.changes())
	}
	if rev, err := fc.CompactEtcd(context.Background(), false); err != nil || rev != 4242 || !slices.Equal(m.changes(), []string{"compact 4242"}) {
		t.Fatalf("%d %v %v", rev, err, m.changes())
	}

	fc.etcd.alarms = []string{"member 11: NOSPACE", "member 12: CORRUPT"}
	m.quota = 40 << 20
	if _, err := fc.DisarmNoSpace(context.Background(), false); err == nil || !strings.Contains(err.Error(), "at its quota 40.0 MiB") {
		t.Fatalf("%v", err)
	}
	m.quota = 2 << 30
	got, err := fc.DisarmNoSpace(context.Background(), false)
	if err != nil || !slices.Equal(got, []string{"c2"}) || !slices.Equal(fc.etcd.alarms, []string{"member 12: CORRUPT"}) {
		t.Fatalf("%v %v %v", got, err, fc.etcd.alarms)
	}
}
