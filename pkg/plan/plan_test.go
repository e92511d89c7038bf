package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// world is a toy system: a step converges "have" to "want".
type world struct{ have, want map[string]string }

func (w *world) step(name string) Step {
	return Step{Name: name, Plan: func(context.Context, Planned) ([]Action, error) {
		var as []Action
		for k, v := range w.want {
			if w.have[k] != v {
				k, v := k, v
				as = append(as, Action{Host: "h1", Kind: Write, Desc: "set " + k, Diff: "-" + w.have[k] + "\n+" + v,
					Do: func(context.Context) error { w.have[k] = v; return nil }})
			}
		}
		return as, nil
	}}
}

func TestRunConvergesThenNoChanges(t *testing.T) {
	w := &world{have: map[string]string{}, want: map[string]string{"a": "1"}}
	var out bytes.Buffer
	r := &Runner{Out: &out}
	res, err := r.Run(context.Background(), []Step{w.step("s")})
	if err != nil || res.Changes() != 1 || w.have["a"] != "1" {
		t.Fatalf("first run: %v changes=%d have=%v", err, res.Changes(), w.have)
	}
	if !strings.Contains(out.String(), "[s] h1: set a") {
		t.Fatalf("output %q", out.String())
	}
	out.Reset()
	res, err = r.Run(context.Background(), []Step{w.step("s")})
	if err != nil || res.Changes() != 0 || !strings.Contains(out.String(), "[s] up to date") {
		t.Fatalf("second run: %v changes=%d out=%q", err, res.Changes(), out.String())
	}
}

func TestDryRunTouchesNothing(t *testing.T) {
	w := &world{have: map[string]string{"a": "0"}, want: map[string]string{"a": "1"}}
	var out bytes.Buffer
	res, err := (&Runner{Out: &out, DryRun: true}).Run(context.Background(), []Step{w.step("s")})
	if err != nil || res.Changes() != 1 || w.have["a"] != "0" {
		t.Fatalf("dry run changed the world: %v %v", err, w.have)
	}
	if !strings.Contains(out.String(), "[s] would h1: set a") || !strings.Contains(out.String(), "+1") {
		t.Fatalf("dry-run output %q", out.String())
	}
}

func TestOnlySkipAndUnknownNames(t *testing.T) {
	a := &world{have: map[string]string{}, want: map[string]string{"x": "1"}}
	b := &world{have: map[string]string{}, want: map[string]string{"y": "1"}}
	var out bytes.Buffer
	if _, err := (&Runner{Out: &out, Skip: []string{"a"}}).Run(context.Background(), []Step{a.step("a"), b.step("b")}); err != nil {
		t.Fatal(err)
	}
	if len(a.have) != 0 || b.have["y"] != "1" {
		t.Fatalf("skip: a=%v b=%v", a.have, b.have)
	}
	_, err := (&Runner{Out: &out, Only: []string{"nope"}}).Run(context.Background(), []Step{a.step("a")})
	if usererr.CodeOf(err) != usererr.CodeUsage || !strings.Contains(usererr.HintOf(err), "steps are: a") {
		t.Fatalf("unknown step: %v", err)
	}
}

func TestErrorNamesStepAndHostAndStops(t *testing.T) {
	boom := errors.New("boom")
	ran := false
	steps := []Step{
		{Name: "one", Plan: func(context.Context, Planned) ([]Action, error) {
			return []Action{{Host: "c1", Kind: Start, Desc: "start etcd", Do: func(context.Context) error { return boom }}}, nil
		}},
		{Name: "two", Plan: func(context.Context, Planned) ([]Action, error) { ran = true; return nil, nil }},
	}
	_, err := (&Runner{Out: &bytes.Buffer{}}).Run(context.Background(), steps)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "[one] [c1] start etcd: boom") || ran {
		t.Fatalf("err=%v ran=%v", err, ran)
	}
}

// Later steps see what earlier ones planned, in a dry run too: that is how
// a restart implied by a changed file shows without anything written.
func TestEarlierPlansReachLaterSteps(t *testing.T) {
	var seen map[string]bool
	steps := []Step{
		{Name: "push", Plan: func(context.Context, Planned) ([]Action, error) {
			return []Action{{Host: "c1", Kind: Write, Desc: "write unit", Restarts: []string{"etcd"}, Do: func(context.Context) error { return nil }},
				{Host: "c2", Kind: Write, Desc: "write other", Restarts: []string{"kube-scheduler"}, Do: func(context.Context) error { return nil }}}, nil
		}},
		{Name: "etcd", Plan: func(_ context.Context, earlier Planned) ([]Action, error) {
			seen = earlier.Restarts("c1")
			return nil, nil
		}},
	}
	for _, dry := range []bool{true, false} {
		seen = nil
		if _, err := (&Runner{Out: &bytes.Buffer{}, DryRun: dry}).Run(context.Background(), steps); err != nil {
			t.Fatal(err)
		}
		if len(seen) != 1 || !seen["etcd"] {
			t.Fatalf("dry=%v: restarts seen by the etcd step: %v", dry, seen)
		}
	}
}

// An action without a kind is refused before anything runs: decisions on
// actions are made on their kind.
func TestActionWithoutKindIsRefused(t *testing.T) {
	ran := false
	steps := []Step{{Name: "s", Plan: func(context.Context, Planned) ([]Action, error) {
		return []Action{{Desc: "restart everything", Do: func(context.Context) error { ran = true; return nil }}}, nil
	}}}
	_, err := (&Runner{Out: &bytes.Buffer{}}).Run(context.Background(), steps)
	if err == nil || !strings.Contains(err.Error(), "no kind") || ran {
		t.Fatalf("err=%v ran=%v", err, ran)
	}
}

// TestParallelRuns: a run of Parallel actions takes different hosts at once,
// keeps one host's lane in order, never passes the per-host limit, and
// stops beginning actions after a failure; a non-Parallel action waits for
// the run before it.
func TestParallelRuns(t *testing.T) {
	var mu sync.Mutex
	var order []string
	running := map[string]int{}
	maxRunning := map[string]int{}
	both := make(chan struct{})
	var bothOnce sync.Once
	arrived := map[string]bool{}
	act := func(host, lane, desc string, parallel bool, fn func() error) Action {
		return Action{Host: host, Lane: lane, Kind: Start, Desc: desc, Parallel: parallel, Do: func(ctx context.Context) error {
			mu.Lock()
			running[host]++
			maxRunning[host] = max(maxRunning[host], running[host])
			mu.Unlock()
			err := fn()
			mu.Lock()
			running[host]--
			order = append(order, desc)
			mu.Unlock()
			return err
		}}
	}
	// h1/a and h2/a must be under way together: each waits for the other.
	meet := func(me string) func() error {
		return func() error {
			mu.Lock()
			arrived[me] = true
			if arrived["h1"] && arrived["h2"] {
				bothOnce.Do(func() { close(both) })
			}
			mu.Unlock()
			select {
			case <-both:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New(me + ": the other host never ran at the same time")
			}
		}
	}
	nop := func() error { return nil }
	actions := []Action{
		act("h1", "", "h1 a", true, meet("h1")),
		act("h1", "", "h1 b", true, nop),
		act("h2", "", "h2 a", true, meet("h2")),
		act("h2", "", "h2 b", true, nop),
	}
	for i := range 10 {
		actions = append(actions, act("h3", fmt.Sprint(i), fmt.Sprintf("h3 file %d", i), true, func() error { time.Sleep(5 * time.Millisecond); return nil }))
	}
	actions = append(actions, act("h1", "", "after", false, nop))
	var out bytes.Buffer
	_, err := (&Runner{Out: &out}).Run(context.Background(), []Step{{Name: "s", Plan: func(context.Context, Planned) ([]Action, error) { return actions, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, d := range order {
		pos[d] = i
	}
	if pos["h1 a"] > pos["h1 b"] || pos["h2 a"] > pos["h2 b"] {
		t.Errorf("one host's lane out of order: %v", order)
	}
	if order[len(order)-1] != "after" {
		t.Errorf("the action after the parallel run did not wait for it: %v", order)
	}
	if maxRunning["h3"] > perHostLimit || maxRunning["h3"] < 2 {
		t.Errorf("h3 ran %d actions at once; want 2..%d", maxRunning["h3"], perHostLimit)
	}
	if strings.Count(out.String(), "[s] h3: h3 file") != 10 {
		t.Errorf("output %q", out.String())
	}

	// A failure: the lane's next action never begins, nor does the step's
	// next action; the error names the host.
	var ran []string
	fail := []Action{
		{Host: "h1", Kind: Write, Desc: "bad", Parallel: true, Do: func(context.Context) error { return errors.New("boom") }},
		{Host: "h1", Kind: Write, Desc: "after bad", Parallel: true, Do: func(context.Context) error { ran = append(ran, "after bad"); return nil }},
		{Host: "h2", Kind: Write, Desc: "other", Parallel: true, Do: func(context.Context) error { return nil }},
		{Host: "h1", Kind: Write, Desc: "next", Do: func(context.Context) error { ran = append(ran, "next"); return nil }},
	}
	_, err = (&Runner{Out: &out}).Run(context.Background(), []Step{{Name: "s", Plan: func(context.Context, Planned) ([]Action, error) { return fail, nil }}})
	if err == nil || !strings.Contains(err.Error(), "[s] [h1] bad: boom") || len(ran) > 0 {
		t.Fatalf("err %v, ran %v", err, ran)
	}
}

// With Ahead, a converged run makes every plan at once (each plan here
// waits until all of them started, which only a concurrent run gets past),
// and prints what they printed in step order. Once a step plans an action,
// the plans made ahead of the later steps are cancelled and dropped (what
// they printed too), and those steps are planned in their turn, seeing the
// earlier actions.
func TestAheadPlansAtOnceUntilAStepActs(t *testing.T) {
	const n = 4
	run := func(t *testing.T, acting int) (string, [][]int, []int) {
		var mu sync.Mutex
		calls := make([]int, n)           // Plan calls per step
		seen := make([][]int, n)          // len(earlier) per call
		started := make(chan struct{}, n) // one per call
		all := make(chan struct{})
		go func() {
			for range n {
				<-started
			}
			close(all)
		}()
		var out bytes.Buffer
		var steps []Step
		for i := range n {
			steps = append(steps, Step{Name: fmt.Sprintf("s%d", i), Plan: func(ctx context.Context, earlier Planned) ([]Action, error) {
				mu.Lock()
				calls[i]++
				first := calls[i] == 1
				seen[i] = append(seen[i], len(earlier))
				mu.Unlock()
				if first {
					started <- struct{}{}
					select {
					case <-all:
					case <-ctx.Done(): // dropped while waiting
						fmt.Fprintf(Out(ctx, &out), "s%d dropped\n", i)
						return nil, ctx.Err()
					case <-time.After(5 * time.Second):
						return nil, errors.New("plans did not run at once")
					}
				}
				fmt.Fprintf(Out(ctx, &out), "s%d planned\n", i)
				if i == acting {
					return []Action{{Host: "h", Kind: Write, Desc: "act", Do: func(context.Context) error { return nil }}}, nil
				}
				return nil, nil
			}})
		}
		if _, err := (&Runner{Out: &out, Ahead: true}).Run(t.Context(), steps); err != nil {
			t.Fatal(err)
		}
		return out.String(), seen, calls
	}

	out, seen, calls := run(t, -1)
	if want := "s0 planned\n[s0] up to date\ns1 planned\n[s1] up to date\ns2 planned\n[s2] up to date\ns3 planned\n[s3] up to date\n"; out != want {
		t.Errorf("converged output:\n%s", out)
	}
	for i := range n {
		if calls[i] != 1 || seen[i][0] != 0 {
			t.Errorf("converged: step %d planned %d times, earlier %v", i, calls[i], seen[i])
		}
	}

	out, seen, calls = run(t, 1)
	if strings.Contains(out, "dropped") || strings.Count(out, "s2 planned") != 1 || strings.Count(out, "s3 planned") != 1 {
		t.Errorf("a plan made ahead and dropped printed, or a step planned twice in the output:\n%s", out)
	}
	if calls[2] != 2 || calls[3] != 2 || seen[2][1] != 1 || seen[3][1] != 1 {
		t.Errorf("after s1 acted: calls %v, earlier %v; want s2 and s3 planned again, seeing s1's action", calls, seen)
	}
}
