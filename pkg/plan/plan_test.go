package plan

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

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
