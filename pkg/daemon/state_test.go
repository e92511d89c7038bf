package daemon

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/verify"
)

func pass(check, host string) verify.Result {
	return verify.Result{Check: check, Host: host, Status: verify.Pass, Message: "ok"}
}

func fail(check, host, msg, hint string) verify.Result {
	return verify.Result{Check: check, Host: host, Status: verify.Fail, Message: msg, Hint: hint}
}

func TestSummarizeTakesTheWorstPerKey(t *testing.T) {
	es := Summarize([]verify.Result{
		pass("host/units", "c1"),
		fail("host/units", "c1", "etcd is not active", "journalctl -u etcd"),
		pass("host/units", "c1"),
		fail("host/units", "c1", "kube-apiserver is not active", "journalctl -u kube-apiserver"),
		{Check: "versions", Status: verify.Warn, Message: "skew", Hint: "upgrade"},
		pass("versions", ""),
		pass("etcd/health", "c1"),
	})
	want := []Entry{
		{Key: Key{"host/units", "c1"}, Status: verify.Fail, Message: "etcd is not active; kube-apiserver is not active", Hint: "journalctl -u etcd"},
		{Key: Key{"versions", ""}, Status: verify.Warn, Message: "skew", Hint: "upgrade"},
		{Key: Key{"etcd/health", "c1"}, Status: verify.Pass, Message: "ok"},
	}
	if !reflect.DeepEqual(es, want) {
		t.Fatalf("got  %+v\nwant %+v", es, want)
	}
}

// TestTrackerLogsOnlyTransitions feeds runs of fake results and checks the
// lines each run logs.
func TestTrackerLogsOnlyTransitions(t *testing.T) {
	healthy := []verify.Result{pass("etcd/health", "c1"), pass("etcd/health", "c2"), pass("pki", "")}
	c2down := []verify.Result{pass("etcd/health", "c1"), fail("etcd/health", "c2", "deadline exceeded", "see 'journalctl -u etcd' on c2"), pass("pki", "")}
	c2gone := []verify.Result{pass("etcd/health", "c1"), pass("pki", "")} // c2 unreachable: no result at all
	var tr Tracker
	for _, step := range []struct {
		name string
		run  []verify.Result
		want []string
	}{
		{"first run on a healthy cluster logs nothing", healthy, nil},
		{"same again logs nothing", healthy, nil},
		{"a member stops", c2down, []string{"etcd/health c2: pass -> fail: deadline exceeded (hint: see 'journalctl -u etcd' on c2)"}},
		{"still down logs nothing", c2down, nil},
		{"a key missing from a run is not a change", c2gone, nil},
		{"back: logged against the last known status", healthy, []string{"etcd/health c2: fail -> pass: ok"}},
		{"a cluster-wide failure", []verify.Result{pass("etcd/health", "c1"), pass("etcd/health", "c2"), fail("pki", "", "ca: expired", "run 'hardway certs generate'\nthen up")},
			[]string{"pki: pass -> fail: ca: expired (hint: run 'hardway certs generate' then up)"}},
		{"warn is a change too", []verify.Result{pass("etcd/health", "c1"), pass("etcd/health", "c2"), {Check: "pki", Status: verify.Warn, Message: "renew soon", Hint: "hardway up"}},
			[]string{"pki: fail -> warn: renew soon (hint: hardway up)"}},
	} {
		var got []string
		for _, x := range tr.Update(Summarize(step.run)) {
			got = append(got, x.Line())
		}
		if !reflect.DeepEqual(got, step.want) {
			t.Fatalf("%s:\ngot  %q\nwant %q", step.name, got, step.want)
		}
	}

	var fresh Tracker
	got := fresh.Update(Summarize(c2down))
	if len(got) != 1 || got[0].Line() != "etcd/health c2: start -> fail: deadline exceeded (hint: see 'journalctl -u etcd' on c2)" {
		t.Fatalf("a daemon starting on a broken cluster logs the failure: %+v", got)
	}
}

func TestRepairHosts(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   []verify.Result
		want []string
	}{
		{"healthy", []verify.Result{pass("host/files", "c1"), pass("host/units", "c2")}, nil},
		{"drift and a stopped unit, in check order, once per host", []verify.Result{
			fail("host/files", "c3", "drifted", ""), fail("host/units", "c1", "etcd is not active", ""), fail("host/binaries", "c3", "differ", ""),
		}, []string{"c3", "c1"}},
		{"a worker's stopped service", []verify.Result{
			fail("worker/units", "worker-2", "kubelet is not active", ""), pass("worker/units", "worker-1"),
		}, []string{"worker-2"}},
		{"what up cannot fix is left alone", []verify.Result{
			fail("host/ssh", "c1", "refused", ""), fail("etcd/health", "c2", "down", ""), fail("pki", "", "expired", ""),
		}, nil},
	} {
		if got := RepairHosts(Summarize(tc.rs)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
		}
	}
}

// ForHost decides on kinds, not words: a membership change worded like a
// start is still dropped, and a restart worded oddly is still kept.
func TestForHostKeepsOneHostsActions(t *testing.T) {
	steps := []plan.Step{
		{Name: "push", Plan: func(context.Context, plan.Planned) ([]plan.Action, error) {
			return []plan.Action{{Host: "c1", Kind: plan.Write, Desc: "write a"}, {Host: "c2", Kind: plan.Write, Desc: "write b"}, {Host: "c2", Kind: plan.Write, Desc: "write c"}}, nil
		}},
		{Name: "pki", Plan: func(context.Context, plan.Planned) ([]plan.Action, error) {
			return []plan.Action{{Kind: plan.Reissue, Desc: "generate 1 file(s)"}}, nil
		}},
		{Name: "etcd", Plan: func(context.Context, plan.Planned) ([]plan.Action, error) {
			return []plan.Action{{Host: "c2", Kind: plan.Membership, Desc: "etcd: start as a new member"},
				{Kind: plan.Membership, Desc: "remove stale etcd member x"},
				{Host: "c2", Kind: plan.Start, Desc: "etcd: start"}, {Host: "c2", Kind: plan.Restart, Desc: "etcd: bounce"},
				{Kind: plan.Wait, Desc: "wait for etcd quorum and check members"}}, nil
		}},
		{Name: "control-plane", Plan: func(context.Context, plan.Planned) ([]plan.Action, error) { return nil, errors.New("boom") }},
	}
	var got []string
	for _, s := range ForHost(steps, "c2") {
		as, err := s.Plan(context.Background(), nil)
		if err != nil {
			got = append(got, s.Name+": error "+err.Error())
		}
		for _, a := range as {
			got = append(got, s.Name+": "+a.Host+" "+a.Desc)
		}
	}
	want := []string{"push: c2 write b", "push: c2 write c", "etcd: c2 etcd: start", "etcd: c2 etcd: bounce", "etcd:  wait for etcd quorum and check members", "control-plane: error boom"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A drifted or stopped worker is repaired: the workers step (its units and
// the wait for its Node) runs in a repair like push, etcd and control-plane;
// what it does through the API or to membership (registering a Node,
// removing a worker) never does.
func TestRepairRunsTheWorkersStep(t *testing.T) {
	var ran []string
	var steps []plan.Step
	for _, s := range cluster.StepDocs() {
		name := s.Name
		record := func(what string) func(context.Context) error {
			return func(context.Context) error { ran = append(ran, name+": "+what); return nil }
		}
		s.Plan = func(context.Context, plan.Planned) ([]plan.Action, error) {
			return []plan.Action{
				{Host: "worker-1", Kind: plan.Start, Desc: "kubelet: start", Do: record("start")},
				{Host: "worker-1", Kind: plan.Apply, Desc: "register Node worker-1", Do: record("apply")},
				{Kind: plan.Membership, Desc: "delete Node worker-3", Do: record("membership")},
				{Host: "worker-2", Kind: plan.Start, Desc: "kubelet: start", Do: record("other host")},
			}, nil
		}
		steps = append(steps, s)
	}
	r := &plan.Runner{Out: io.Discard, Only: RepairSteps}
	if _, err := r.Run(context.Background(), ForHost(steps, "worker-1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"fetch: start", "render: start", "push: start", "etcd: start", "control-plane: start", "workers: start"}
	if strings.Join(ran, ", ") != strings.Join(want, ", ") {
		t.Fatalf("a repair of worker-1 ran %v, want %v", ran, want)
	}
}
