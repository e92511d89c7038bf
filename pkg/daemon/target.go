package daemon

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/verify"
)

// RepairSteps are the steps of `hardway up` a repair runs: what re-pushes
// files and (re)starts units, on control-plane hosts and workers. Never
// preflight, pki or rbac: a daemon does not reissue certificates or touch
// the API behind the user's back (the workers step's Node registrations and
// removals are API writes and membership changes: repairKinds drops them).
var RepairSteps = []string{cluster.StepFetch, cluster.StepRender, cluster.StepPush, cluster.StepEtcd, cluster.StepControlPlane, cluster.StepWorkers}

// repairKinds are the only kinds of action a repair takes: files, starts,
// restarts and the waits between them. Never a membership change (adding or
// replacing a member is for `hardway up`, with a person watching), a
// reissue, a download or an API write.
var repairKinds = map[plan.Kind]bool{plan.Write: true, plan.Start: true, plan.Restart: true, plan.Wait: true}

// ClusterTarget is the Target of a real inventory.
type ClusterTarget struct {
	inv   *inventory.Inventory
	state state.Dir
	c     *cluster.Cluster
	out   *sink
	trace *traceSink
}

// traceSink sends the cluster's remote commands to the log of the repair
// in progress, nowhere otherwise (the checks are not logged per command).
type traceSink struct {
	mu  sync.Mutex
	log *runlog.Log
}

func (s *traceSink) Command(t remote.Trace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Command(t)
	}
}

func (s *traceSink) set(l *runlog.Log) {
	s.mu.Lock()
	s.log = l
	s.mu.Unlock()
}

// sink is the cluster's progress writer: the log of the repair in
// progress, nothing otherwise.
type sink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

func (s *sink) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// NewClusterTarget wraps cluster.New and renders and resolves the release
// set up front (cluster.Prepare): an inventory that cannot is refused. The
// release options are made offline: a daemon compares against the cache,
// it never downloads.
func NewClusterTarget(ctx context.Context, inv *inventory.Inventory, opt cluster.Options) (*ClusterTarget, error) {
	out, trace := &sink{}, &traceSink{}
	opt.Out, opt.Trace = out, trace.Command
	opt.Release.Offline = true
	c := cluster.New(inv, opt)
	if err := c.Prepare(ctx); err != nil {
		return nil, err
	}
	return &ClusterTarget{inv: inv, state: opt.State, c: c, out: out, trace: trace}, nil
}

func (t *ClusterTarget) Checks() []verify.Check { return t.c.Checks() }

func (t *ClusterTarget) Certificates(now time.Time) []Certificate {
	var out []Certificate
	seen := map[string]bool{}
	for _, r := range pki.Check(t.inv, t.state, now) {
		if r.NotAfter.IsZero() || seen[r.Kind+"/"+r.Name] {
			continue
		}
		seen[r.Kind+"/"+r.Name] = true
		out = append(out, Certificate{Name: r.Name, Kind: r.Kind, NotAfter: r.NotAfter})
	}
	return out
}

func (t *ClusterTarget) EtcdStatus(ctx context.Context) ([]EtcdMember, error) {
	ms, err := t.c.EtcdStatus(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]EtcdMember, len(ms))
	for i, m := range ms {
		out[i] = EtcdMember{Name: m.Name, Reachable: m.Reachable, Leader: m.Leader, DBSize: m.DBSize}
	}
	return out, nil
}

// EndRun closes the SSH connections; the cluster keeps the rendered
// manifests and the resolved release set, so the next run only re-dials.
func (t *ClusterTarget) EndRun() { t.c.Close() }

func (t *ClusterTarget) Close() { t.c.Close() }

// Repair runs the repair steps of `hardway up` with every action limited to
// host (and the cluster-wide waits that follow them).
// Each repair writes its own run log (logs/repair-<host>-....log in the
// state directory); a failed repair's error carries its path.
func (t *ClusterTarget) Repair(ctx context.Context, host string, out io.Writer) (int, error) {
	// A repair pushes from the state directory: never while pki or up
	// writes it. Waiting briefly is enough; the next run tries again.
	lock, err := t.state.Lock(ctx, "hardway daemon --repair (repairing "+host+")", 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer lock.Unlock()
	lg, err := runlog.Open(t.state.LogDir(), "repair-"+host, time.Now())
	if err != nil {
		return 0, err
	}
	out = io.MultiWriter(out, lg)
	t.out.set(out)
	t.trace.set(lg)
	defer func() {
		t.out.set(nil)
		t.trace.set(nil)
	}()
	r := &plan.Runner{Out: out, Only: RepairSteps}
	res, err := r.Run(ctx, ForHost(t.c.Steps(), host))
	n := 0
	if res != nil {
		n = res.Changes()
	}
	lg.End(err)
	return n, runlog.WithPath(err, lg)
}

// ForHost wraps steps so that they plan only host's actions and the
// cluster-wide waits that follow them, of the kinds a repair may take.
func ForHost(steps []plan.Step, host string) []plan.Step {
	out := make([]plan.Step, len(steps))
	for i, s := range steps {
		p := s.Plan
		s.Plan = func(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
			as, err := p(ctx, earlier)
			if err != nil {
				return nil, err
			}
			var keep []plan.Action
			for _, a := range as {
				if (a.Host == host || a.Host == "") && repairKinds[a.Kind] {
					keep = append(keep, a)
				}
			}
			return keep, nil
		}
		out[i] = s
	}
	return out
}
