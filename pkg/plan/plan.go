// Package plan runs hardway's steps: each step first says what it would do
// (Plan only reads), then does it. --dry-run is the plan printed, and
// idempotence is checkable in one line: after `up`, every Plan is empty.
package plan

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// Step is one phase of `hardway up`.
type Step struct {
	Name string // "pki", "etcd": progress prefix, error prefix, --only/--skip
	Doc  string // one line for --help and --dry-run
	// Plan reads the world and returns the actions that would converge it;
	// none means the step is already done. It must not change anything.
	Plan func(ctx context.Context) ([]Action, error)
}

// Action is one change a step makes.
type Action struct {
	Host string // "" for this machine
	Desc string // "write /etc/systemd/system/etcd.service (0644)"
	Diff string // optional: a short diff shown by --dry-run
	Do   func(ctx context.Context) error
}

// Runner runs steps in order and prints one line per action.
type Runner struct {
	Out    io.Writer
	DryRun bool
	Only   []string // run only these steps (empty: all)
	Skip   []string // never run these steps
	Now    func() time.Time
}

// Done is one action planned or taken.
type Done struct {
	Host string `json:"host,omitempty"` // "" for this machine
	Desc string `json:"desc"`
}

// StepResult is what one step did.
type StepResult struct {
	Name     string        `json:"name"`
	Actions  []Done        `json:"actions"`
	Skipped  bool          `json:"skipped,omitempty"`
	Duration time.Duration `json:"duration"`
}

// Result is what a run did.
type Result struct {
	Steps  []StepResult `json:"steps"`
	DryRun bool         `json:"dryRun"`
}

// Changes counts the actions planned (dry run) or taken.
func (r *Result) Changes() int {
	n := 0
	for _, s := range r.Steps {
		n += len(s.Actions)
	}
	return n
}

// CheckNames returns a usage error when --only/--skip name an unknown step.
func (r *Runner) CheckNames(steps []Step) error {
	var known []string
	for _, s := range steps {
		known = append(known, s.Name)
	}
	for _, n := range append(append([]string{}, r.Only...), r.Skip...) {
		if !slices.Contains(known, n) {
			return usererr.WithCode(fmt.Errorf("unknown step %q", n), usererr.CodeUsage,
				"steps are: "+strings.Join(known, ", "))
		}
	}
	return nil
}

// Run plans and (unless DryRun) applies every selected step in order. It
// stops at the first error, which is prefixed with the step and host.
func (r *Runner) Run(ctx context.Context, steps []Step) (*Result, error) {
	if err := r.CheckNames(steps); err != nil {
		return nil, err
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	res := &Result{DryRun: r.DryRun}
	for _, s := range steps {
		sr := StepResult{Name: s.Name}
		if (len(r.Only) > 0 && !slices.Contains(r.Only, s.Name)) || slices.Contains(r.Skip, s.Name) {
			sr.Skipped = true
			res.Steps = append(res.Steps, sr)
			continue
		}
		start := now()
		actions, err := s.Plan(ctx)
		if err != nil {
			return res, fmt.Errorf("[%s] %w", s.Name, err)
		}
		if len(actions) == 0 {
			fmt.Fprintf(r.Out, "[%s] up to date\n", s.Name)
		}
		for _, a := range actions {
			line := a.Desc
			if a.Host != "" {
				line = a.Host + ": " + a.Desc
			}
			sr.Actions = append(sr.Actions, Done{Host: a.Host, Desc: a.Desc})
			if r.DryRun {
				fmt.Fprintf(r.Out, "[%s] would %s\n", s.Name, line)
				if a.Diff != "" {
					for _, d := range strings.Split(strings.TrimRight(a.Diff, "\n"), "\n") {
						fmt.Fprintf(r.Out, "[%s]     %s\n", s.Name, d)
					}
				}
				continue
			}
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("[%s] %w", s.Name, err)
			}
			fmt.Fprintf(r.Out, "[%s] %s\n", s.Name, line)
			if err := a.Do(ctx); err != nil {
				where := s.Name
				if a.Host != "" {
					where += "] [" + a.Host
				}
				return res, fmt.Errorf("[%s] %s: %w", where, a.Desc, err)
			}
		}
		sr.Duration = now().Sub(start)
		res.Steps = append(res.Steps, sr)
	}
	return res, nil
}
