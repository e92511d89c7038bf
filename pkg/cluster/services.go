package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// snapshot is what one host's systemd and hardway's markers say, read with
// one command: a converged run asks each host once per step instead of
// twice per service.
type snapshot struct {
	Units    map[string]remote.UnitState // by component
	Pending  map[string]bool             // restart markers, plus the restarts earlier steps planned
	EtcdData bool                        // the etcd data dir holds a member
	// out is the whole output of the command that read the snapshot: its
	// captured sections (see captured) answer read.
	out string
}

// read is cmd's output: from the snapshot's captured section name when the
// snapshot's command ran it (one round trip for all of a host's reads),
// else from running cmd on sh.
func (sn *snapshot) read(ctx context.Context, sh remote.Host, name, cmd string) ([]byte, error) {
	if sn != nil && sn.out != "" {
		if out, err := capturedResult(sn.out, name, sh.Name(), cmd); !errors.Is(err, errNotCaptured) {
			return out, err
		}
	}
	return sh.Run(ctx, cmd, nil)
}

// unitsScript prints the state of comps' units in one section (@units), read
// with one systemctl process.
func unitsScript(comps []string) string {
	us := make([]string, len(comps))
	for i, c := range comps {
		us[i] = c + ".service"
	}
	return "echo '@units'; " + remote.ShowUnitsCommand(us...) + "\n"
}

// snapshotScript prints the control plane's units, the restart markers and
// whether etcd has data; it only reads.
func snapshotScript() string {
	var script strings.Builder
	script.WriteString(unitsScript(units.Names(units.ControlPlane)))
	fmt.Fprintf(&script, "echo '@restart'; ls -1 %s 2>/dev/null || true\n", restartDir)
	fmt.Fprintf(&script, "echo '@data'; if [ -d %s/member ]; then echo yes; else echo no; fi\n", units.EtcdDataDir)
	return script.String()
}

// parseSnapshot reads the sections of snapshotScript (or of the workers'
// and verify's scripts, which print some of them): @units (systemctl show
// of several units), @restart, @data, and @<component> (one unit's
// properties, as older scripts and the unit tests' fake hosts print them).
func parseSnapshot(out string) *snapshot {
	sn := &snapshot{Units: map[string]remote.UnitState{}, Pending: map[string]bool{}}
	section := ""
	var show strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "@"); ok {
			section = name
			continue
		}
		switch section {
		case "units":
			show.WriteString(l + "\n")
		case "restart":
			if l != "" {
				sn.Pending[l] = true
			}
		case "data":
			sn.EtcdData = sn.EtcdData || l == "yes"
		default:
			st := sn.Units[section]
			st.Set(l)
			sn.Units[section] = st
		}
	}
	for unit, st := range remote.ParseShowUnits(show.String()) {
		sn.Units[strings.TrimSuffix(unit, ".service")] = st
	}
	return sn
}

// snapshots reads every control-plane host's snapshot in parallel. The
// components whose files earlier steps plan to change count as pending: in a
// dry run no marker was written, yet the restart is part of the plan.
func (c *Cluster) snapshots(ctx context.Context, earlier plan.Planned) (map[string]*snapshot, error) {
	var mu sync.Mutex
	out := map[string]*snapshot{}
	script := snapshotScript()
	err := remote.ForEach(ctx, c.Inv.ControlPlane, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		b, err := sh.Run(ctx, script, nil)
		if err != nil {
			return err
		}
		sn := parseSnapshot(string(b))
		for comp := range earlier.Restarts(h.Name) {
			sn.Pending[comp] = true
		}
		mu.Lock()
		out[h.Name] = sn
		mu.Unlock()
		return nil
	})
	return out, err
}

// journalTail is the last lines of a unit's journal, for error messages.
func journalTail(ctx context.Context, sh remote.Host, unit string, n int) string {
	out, _ := remote.Journal(ctx, sh, unit, n)
	return strings.TrimSpace(out)
}

// withJournal wraps a failed systemctl call with the unit's journal.
func withJournal(ctx context.Context, sh remote.Host, unit string, err error) error {
	if err == nil {
		return nil
	}
	return usererr.New(fmt.Errorf("%s: %w\n%s", sh.Name(), err, journalTail(ctx, sh, unit, 30)),
		fmt.Sprintf("see 'journalctl -u %s' on %s", unit, sh.Name()))
}

// The systemctl operations a service action runs, in this order.
const (
	opReload  = "daemon-reload"
	opEnable  = "enable"
	opStart   = "start"
	opRestart = "restart (files changed)"
)

// serviceOps decides what one unit needs: daemon-reload when its file
// changed, enable, then start when it is not running or restart when its
// files changed (pending; a stopped unit starts with its new files). The
// kind is Restart only when a running process is stopped; "" when nothing is
// to do.
func serviceOps(st remote.UnitState, pending bool) ([]string, plan.Kind) {
	var ops []string
	if st.NeedReload {
		ops = append(ops, opReload)
	}
	if !st.Enabled {
		ops = append(ops, opEnable)
	}
	kind := plan.Start
	switch {
	case !st.Active:
		ops = append(ops, opStart)
	case pending:
		ops = append(ops, opRestart)
		kind = plan.Restart
	}
	if len(ops) == 0 {
		return nil, ""
	}
	return ops, kind
}

// serviceOpts tune a service action.
type serviceOpts struct {
	// noBlock queues a start and returns: the caller waits for all etcd
	// members together (on a new cluster none is ready before a quorum is).
	noBlock bool
	// wait polls for health after a (re)start; nil: no wait.
	wait func(ctx context.Context) error
	// guard is checked right before a restart; its error stops the action
	// before anything is touched.
	guard func(ctx context.Context) error
	// alsoStart are units of the same host started (without waiting) as
	// soon as this one's start returned, before its health wait: a new
	// host's controller-manager and scheduler start once its apiserver
	// serves (a notify unit: its start returns then), not once /readyz
	// passes. They retry until the apiserver answers, as kubeadm's static
	// pods, which start together, do. Their own actions, later in the
	// plan, find them started and wait for their health.
	alsoStart []string
	// note is said in the action's description, after the operations.
	note string
}

// serviceAction returns the action that brings comp on h to enabled and
// running with its current files, or nil when it is there.
func (c *Cluster) serviceAction(h inventory.Host, sh remote.Host, sn *snapshot, comp string, o serviceOpts) *plan.Action {
	unit := comp + ".service"
	ops, kind := serviceOps(sn.Units[comp], sn.Pending[comp])
	if kind == "" {
		return nil
	}
	desc := comp + ": " + strings.Join(ops, ", ")
	if o.note != "" && kind == plan.Restart {
		desc += " (" + o.note + ")"
	}
	if len(o.alsoStart) > 0 {
		desc += " (then " + strings.Join(o.alsoStart, ", ") + ": start, as soon as it serves)"
	}
	return &plan.Action{Host: h.Name, Kind: kind, Desc: desc, Do: func(ctx context.Context) error {
		if kind == plan.Restart && o.guard != nil {
			if err := o.guard(ctx); err != nil {
				return err
			}
		}
		for _, op := range ops {
			var err error
			switch {
			case op == opReload:
				err = remote.DaemonReload(ctx, sh)
			case op == opEnable:
				err = remote.Enable(ctx, sh, unit)
			case op == opStart && o.noBlock:
				_, err = sh.Run(ctx, "systemctl start --no-block "+remote.Quote(unit), nil)
			case op == opStart:
				err = remote.Start(ctx, sh, unit)
			default:
				err = remote.Restart(ctx, sh, unit)
			}
			if err != nil {
				return withJournal(ctx, sh, unit, err)
			}
		}
		if len(o.alsoStart) > 0 {
			also := make([]string, len(o.alsoStart))
			for i, c := range o.alsoStart {
				also[i] = remote.Quote(c + ".service")
			}
			if _, err := sh.Run(ctx, "systemctl start --no-block -- "+strings.Join(also, " "), nil); err != nil {
				return fmt.Errorf("start %s: %w", strings.Join(o.alsoStart, ", "), err)
			}
		}
		if o.wait != nil && !o.noBlock {
			wctx, cancel := context.WithTimeout(ctx, c.opt.ServiceTimeout)
			defer cancel()
			if err := o.wait(wctx); err != nil {
				return usererr.New(fmt.Errorf("%s did not become healthy on %s: %w\n%s", comp, h.Name, err, journalTail(ctx, sh, unit, 30)),
					fmt.Sprintf("see 'journalctl -u %s' on %s", unit, h.Name))
			}
		}
		if o.noBlock {
			return nil // the wait that follows clears the marker
		}
		return clearRestart(ctx, sh, comp)
	}}
}

// --- control plane -----------------------------------------------------

// stopped reports whether comp's unit is not running on the host, so that
// its action starts it.
func stopped(sn *snapshot, comp string) bool {
	ops, _ := serviceOps(sn.Units[comp], sn.Pending[comp])
	return slices.Contains(ops, opStart)
}

func (c *Cluster) planControlPlane(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
	snaps, err := c.snapshots(ctx, earlier)
	if err != nil {
		return nil, err
	}
	var starts, restarts []plan.Action
	for _, comp := range []string{units.APIServer, units.ControllerManager, units.Scheduler} {
		for _, h := range c.Inv.ControlPlane {
			sh, err := c.Host(ctx, h.Name)
			if err != nil {
				return nil, err
			}
			sn := snaps[h.Name]
			o := serviceOpts{wait: func(ctx context.Context) error { return c.componentHealthy(ctx, h, comp) }}
			if comp != units.APIServer && stopped(sn, comp) {
				// A start also waits for a leader, so that the up ends
				// with one (verify checks the Lease).
				o.wait = func(ctx context.Context) error {
					if err := c.componentHealthy(ctx, h, comp); err != nil {
						return err
					}
					return c.leaderElected(ctx, h, comp)
				}
			}
			if comp == units.APIServer && !stopped(sn, comp) && c.Inv.NodeLocalLB() {
				// A running apiserver leaves the workers' load balancers
				// before its restart and comes back once ready (lbPool).
				healthy := o.wait
				o.guard = func(ctx context.Context) error { return c.lbPool(ctx, h.Name) }
				o.wait = func(ctx context.Context) error {
					if err := healthy(ctx); err != nil {
						return err
					}
					return c.lbPool(ctx)
				}
				o.note = "out of the workers' load balancers while it restarts"
			}
			if comp == units.APIServer && stopped(sn, comp) {
				for _, other := range []string{units.ControllerManager, units.Scheduler} {
					// A unit whose file changed since systemd loaded it
					// starts early only behind the apiserver's own
					// daemon-reload; else systemd would run the old file,
					// and its own action, finding it running, would not
					// restart it.
					if stopped(sn, other) && (!sn.Units[other].NeedReload || sn.Units[comp].NeedReload) {
						o.alsoStart = append(o.alsoStart, other)
					}
				}
			}
			a := c.serviceAction(h, sh, sn, comp, o)
			switch {
			case a == nil:
			case a.Kind == plan.Restart:
				// A running component: one host at a time, each waiting
				// for its health before the next goes down.
				restarts = append(restarts, *a)
			default:
				// Not running: nothing is served there to keep, so every
				// host starts at once (a new cluster waits once, not three
				// times). One host's components go in order: the
				// apiserver first; the controller-manager and scheduler
				// as soon as it serves (alsoStart), each waited for after
				// the apiserver is ready.
				a.Parallel = true
				starts = append(starts, *a)
			}
		}
	}
	return append(starts, restarts...), nil
}
