// Package plan runs hardway's steps: each step first says what it would do
// (Plan only reads), then does it. --dry-run is the plan printed, and
// idempotence is checkable in one line: after `up`, every Plan is empty.
package plan

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// Step is one phase of `hardway up`.
type Step struct {
	Name string // "pki", "etcd": progress prefix, error prefix, --only/--skip
	Doc  string // one line for --help and --dry-run
	// Plan reads the world and returns the actions that would converge it;
	// none means the step is already done. It must not change anything:
	// what it learns from earlier steps comes in earlier (the actions they
	// planned, done or not), never through a variable one Plan sets and
	// another reads.
	Plan func(ctx context.Context, earlier Planned) ([]Action, error)
}

// Kind says what an action changes. Decisions about actions (which ones a
// daemon may take, which restarts wait for health) are made on the kind,
// never on the wording of Desc.
type Kind string

const (
	// Write writes a file or a directory, on a host or here.
	Write Kind = "write"
	// Reissue creates or replaces certificates, keys or kubeconfigs in the
	// state directory.
	Reissue Kind = "reissue"
	// Download fetches release binaries into the cache.
	Download Kind = "download"
	// Start reloads systemd, enables or starts a unit that is not running:
	// no running process is stopped.
	Start Kind = "start"
	// Restart stops and starts a running service.
	Restart Kind = "restart"
	// Membership adds or removes an etcd member, or removes a worker (drain,
	// stop, Node deleted, pod subnet freed).
	Membership Kind = "membership"
	// Apply writes objects through the Kubernetes API.
	Apply Kind = "apply"
	// Wait waits for health and checks; it changes nothing by itself.
	Wait Kind = "wait"
	// Maintenance compacts or defragments etcd or moves its leadership:
	// no object changes, but a member is busy while it runs.
	Maintenance Kind = "maintenance"
	// Stop stops a running service and leaves it stopped (restore stops
	// the control plane before it replaces etcd's data).
	Stop Kind = "stop"
	// Restore replaces an etcd member's data with a snapshot; the old data
	// is moved aside, never deleted.
	Restore Kind = "restore"
	// Prepare changes a host's own setup: kernel modules and sysctls now,
	// packages, firewall rules, the kubelet's resolv.conf link.
	Prepare Kind = "prepare"
	// Remove takes away what hardway put on a host: files, data, routes,
	// the bridge, its system user ('hardway reset').
	Remove Kind = "remove"
)

// Action is one change a step makes.
type Action struct {
	Host string // "" for this machine
	Kind Kind
	Desc string // "write /etc/systemd/system/etcd.service (0644)"
	Diff string // optional: a short diff shown by --dry-run
	// Restarts are the components on Host whose files this action changes:
	// later steps restart them (see Planned.Restarts).
	Restarts []string
	// Parallel lets the runner take this action together with the Parallel
	// actions next to it in the plan: actions of different hosts run at
	// once, those of one host and Lane one after another in plan order.
	// Set it only where the order between hosts does not matter: starting
	// services that are not running (a new cluster has no availability to
	// keep), writing files. Restarts of running services never set it:
	// they roll host by host behind their health gates.
	Parallel bool
	// Lane splits one host's Parallel actions into independent sequences
	// ("" is one lane): writes of different files set their path.
	Lane string
	Do   func(ctx context.Context) error
}

// Concurrency limits of a run of Parallel actions. Every action on a host
// is a session on its one SSH connection, and OpenSSH's sshd allows 10 per
// connection (MaxSessions): 4 leaves room for the tunnels' and the
// keepalives' traffic and for a command an action runs from inside.
const (
	perHostLimit = 4
	totalLimit   = 32
)

// Planned is what the steps before the current one planned in this run, in
// order: taken already in a real run, only printed in a dry run.
type Planned []Action

// Restarts is the set of components on host that earlier actions change
// the files of.
func (p Planned) Restarts(host string) map[string]bool {
	out := map[string]bool{}
	for _, a := range p {
		if a.Host != host {
			continue
		}
		for _, c := range a.Restarts {
			out[c] = true
		}
	}
	return out
}

// Runner runs steps in order and prints one line per action.
type Runner struct {
	Out    io.Writer
	DryRun bool
	Only   []string // run only these steps (empty: all)
	Skip   []string // never run these steps
	Now    func() time.Time
	// Ahead starts every selected step's Plan at once instead of each after
	// the one before: a step's Plan sees the world and the earlier steps'
	// plans, and while no earlier step plans an action, neither has changed,
	// so a plan made ahead is the plan it would make in its turn. The runner
	// uses them in order until a step plans an action; then it cancels the
	// rest, waits for them, and plans every later step in its turn as
	// without Ahead. A converged cluster's run then waits for its slowest
	// step's reads instead of for the sum of all of them. What a plan made
	// ahead prints (see Out) is held back and printed in its turn, or
	// dropped with the plan.
	Ahead bool
}

type outKey struct{}

// Out is where a Plan prints progress lines: def, or the buffer the runner
// holds them in while the plan runs ahead of its turn (Runner.Ahead).
func Out(ctx context.Context, def io.Writer) io.Writer {
	if w, ok := ctx.Value(outKey{}).(io.Writer); ok {
		return w
	}
	return def
}

// ahead is one step's plan made ahead of its turn.
type ahead struct {
	done    chan struct{}
	out     bytes.Buffer
	actions []Action
	err     error
	took    time.Duration
}

// Done is one action planned or taken.
type Done struct {
	Host string `json:"host,omitempty"` // "" for this machine
	Kind Kind   `json:"kind"`
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
	selected := func(s Step) bool {
		return (len(r.Only) == 0 || slices.Contains(r.Only, s.Name)) && !slices.Contains(r.Skip, s.Name)
	}
	// Plans made ahead (nil when none are): every selected step's but the
	// first, which is planned in its turn at once anyway.
	var plans []*ahead
	aheadCtx, stopAhead := context.WithCancel(ctx)
	var aheadWG sync.WaitGroup
	dropAhead := func() {
		stopAhead()
		aheadWG.Wait()
		plans = nil
	}
	defer dropAhead()
	if r.Ahead {
		plans = make([]*ahead, len(steps))
		first := true
		for i, s := range steps {
			if !selected(s) {
				continue
			}
			if first {
				first = false
				continue
			}
			a := &ahead{done: make(chan struct{})}
			plans[i] = a
			aheadWG.Add(1)
			go func() {
				defer aheadWG.Done()
				defer close(a.done)
				t := now()
				a.actions, a.err = s.Plan(context.WithValue(aheadCtx, outKey{}, &a.out), nil)
				a.took = now().Sub(t)
			}()
		}
	}
	res := &Result{DryRun: r.DryRun}
	var earlier Planned
	for i, s := range steps {
		sr := StepResult{Name: s.Name}
		if !selected(s) {
			sr.Skipped = true
			res.Steps = append(res.Steps, sr)
			continue
		}
		start := now()
		var actions []Action
		var err error
		if a := aheadOf(plans, i); a != nil && len(earlier) == 0 {
			// Nothing was planned before this step, so nothing changed since
			// its plan was made: that plan is this step's.
			<-a.done
			r.Out.Write(a.out.Bytes())
			actions, err = a.actions, a.err
			start = now().Add(-a.took)
		} else {
			// The first step, or one after a step that planned actions
			// (plans made ahead were dropped then).
			actions, err = s.Plan(ctx, earlier[:len(earlier):len(earlier)])
		}
		if err != nil {
			return res, fmt.Errorf("[%s] %w", s.Name, err)
		}
		if len(actions) > 0 {
			// The world is about to change (or, in a dry run, later plans
			// must see these actions): later plans are made in their turn.
			dropAhead()
		}
		for _, a := range actions {
			if a.Kind == "" {
				// A programming error: every decision on actions is made
				// on their kind.
				return res, fmt.Errorf("[%s] action %q has no kind", s.Name, a.Desc)
			}
		}
		earlier = append(earlier, actions...)
		if len(actions) == 0 {
			fmt.Fprintf(r.Out, "[%s] up to date\n", s.Name)
		}
		for _, a := range actions {
			sr.Actions = append(sr.Actions, Done{Host: a.Host, Kind: a.Kind, Desc: a.Desc})
		}
		if r.DryRun {
			for _, a := range actions {
				fmt.Fprintf(r.Out, "[%s] would %s\n", s.Name, line(a))
				if a.Diff != "" {
					for _, d := range strings.Split(strings.TrimRight(a.Diff, "\n"), "\n") {
						fmt.Fprintf(r.Out, "[%s]     %s\n", s.Name, d)
					}
				}
			}
		} else {
			for i := 0; i < len(actions); {
				j := i + 1
				if actions[i].Parallel {
					for j < len(actions) && actions[j].Parallel {
						j++
					}
				}
				if err := r.do(ctx, s.Name, actions[i:j]); err != nil {
					return res, err
				}
				i = j
			}
		}
		sr.Duration = now().Sub(start)
		res.Steps = append(res.Steps, sr)
	}
	return res, nil
}

func aheadOf(plans []*ahead, i int) *ahead {
	if plans == nil {
		return nil
	}
	return plans[i]
}

func line(a Action) string {
	if a.Host != "" {
		return a.Host + ": " + a.Desc
	}
	return a.Desc
}

// do takes actions: one at a time, or a run of Parallel ones together (see
// Action.Parallel). Each line is printed as its action begins. After a
// failure no further action of the run begins; the ones under way finish,
// and the error of the first failed action in plan order is returned.
func (r *Runner) do(ctx context.Context, step string, actions []Action) error {
	var mu sync.Mutex // guards r.Out
	run := func(ctx context.Context, a Action) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("[%s] %w", step, err)
		}
		mu.Lock()
		fmt.Fprintf(r.Out, "[%s] %s\n", step, line(a))
		mu.Unlock()
		if err := a.Do(ctx); err != nil {
			where := step
			if a.Host != "" {
				where += "] [" + a.Host
			}
			return fmt.Errorf("[%s] %s: %w", where, a.Desc, err)
		}
		return nil
	}
	if len(actions) == 1 {
		return run(ctx, actions[0])
	}
	// One goroutine per lane runs its actions in order; a semaphore per
	// host and one overall bound how many run at once.
	type lane struct {
		host string
		idx  []int
	}
	var lanes []*lane
	byKey := map[[2]string]*lane{}
	for i, a := range actions {
		k := [2]string{a.Host, a.Lane}
		l := byKey[k]
		if l == nil {
			l = &lane{host: a.Host}
			byKey[k] = l
			lanes = append(lanes, l)
		}
		l.idx = append(l.idx, i)
	}
	hostSem := map[string]chan struct{}{}
	for _, l := range lanes {
		if hostSem[l.host] == nil {
			hostSem[l.host] = make(chan struct{}, perHostLimit)
		}
	}
	total := make(chan struct{}, totalLimit)
	errs := make([]error, len(actions))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range l.idx {
				// The host first: a lane waiting for its host holds no
				// overall slot that other hosts could use.
				hostSem[l.host] <- struct{}{}
				total <- struct{}{}
				if !failed.Load() {
					errs[i] = run(ctx, actions[i])
				}
				<-total
				<-hostSem[l.host]
				if errs[i] != nil {
					failed.Store(true)
				}
				if failed.Load() {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
