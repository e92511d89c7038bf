package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// `hardway rotate ca --which etcd`: the documented CA rotation with trust
// bundles (pkg/pki/carotation.go has the record and the state side), as
// three phases of up's own steps. Each phase changes the state directory
// first, then pushes only the rotation's files (the trust bundle, the CA,
// the CA's leaves) and lets up's etcd and control-plane steps restart what
// reads them: an etcd member only while every other member is healthy,
// waiting for its health; then the apiservers one at a time, each waiting
// for /readyz. Pushes leave restart markers on the hosts, so a run killed
// between a push and its restarts is finished by the next run.
//
// In a phase every member and every apiserver trusts whatever the others
// present: in trust-both the leaves are old and the bundle holds old and
// new; in reissue the bundle still holds both while the leaves turn new; in
// drop-old every leaf is new, so the old CA can go.

// CARotateOptions tune a CA rotation.
type CARotateOptions struct {
	Which  string // a row of pki.CATargets: "etcd"
	DryRun bool
	Now    func() time.Time
}

// CARotationResult is what a run did, for -o json. It never holds a key.
type CARotationResult struct {
	Which        string `json:"which"`
	CA           string `json:"ca"`    // the CA made anew: "etcd-ca"
	OldCA        string `json:"oldCA"` // "ca" for a cluster made before the etcd CA
	Old          string `json:"old"`   // CN and serial
	New          string `json:"new"`
	ResumedAfter int    `json:"resumedAfterPhase"`
	// Reissued are the leaves this run reissued from the new CA.
	Reissued []string `json:"reissued,omitempty"`
	// Retired is where the old CA's files are kept ("" when the old CA
	// stays in use: the cluster CA of a cluster made before the etcd CA).
	Retired  string            `json:"retired,omitempty"`
	Complete bool              `json:"complete"`
	DryRun   bool              `json:"dryRun"`
	Steps    []plan.StepResult `json:"steps"`
}

// CARotation is one run of `hardway rotate ca`.
type CARotation struct {
	c       *Cluster
	o       CARotateOptions
	target  pki.CATarget
	preview *pki.CARotation // the rotation this run starts, when none is recorded
	res     CARotationResult
	// ready probes an apiserver's /readyz (unit tests fake it).
	ready func(ctx context.Context, h inventory.Host) error
}

// CARotation prepares a CA rotation run; Preflight must come first.
func (c *Cluster) CARotation(o CARotateOptions) *CARotation {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &CARotation{c: c, o: o, res: CARotationResult{Which: o.Which, DryRun: o.DryRun},
		ready: func(ctx context.Context, h inventory.Host) error { return c.probe(ctx, h, units.APIServer) }}
}

// Result is the run's result, with the steps of every phase.
func (r *CARotation) Result(steps []plan.StepResult) CARotationResult {
	out := r.res
	out.Steps = steps
	return out
}

// current is the recorded rotation, or the one this run would start.
func (r *CARotation) current() (rot *pki.CARotation, recorded bool, err error) {
	rot, err = pki.LoadCARotation(r.c.opt.State, r.target.Which)
	if err != nil || rot != nil {
		return rot, rot != nil, err
	}
	if r.preview == nil {
		return nil, false, fmt.Errorf("no CA rotation of %s: Preflight first", r.target.Which)
	}
	return r.preview, false, nil
}

// Preflight reads the state directory and the hosts and says whether the
// rotation can start or go on: the hosts run what this hardway renders for
// etcd and the apiservers (their units name the trust bundle), every etcd
// member is healthy and every apiserver ready. It only reads.
func (r *CARotation) Preflight(ctx context.Context) error {
	t, err := pki.LookupCATarget(r.o.Which)
	if err != nil {
		return err
	}
	r.target = t
	// The workers step's Ready gate also waits for each restarted
	// kubelet's next heartbeat: the next worker restarts only once this
	// one reaches the apiserver with the credentials and trust of the phase.
	r.c.freshHeartbeat = t.Which == pki.WhichKubernetes
	st := r.c.opt.State
	rot, err := pki.LoadCARotation(st, t.Which)
	if err != nil {
		return err
	}
	if rot == nil {
		if err := pki.GuardCARotation(st); err != nil {
			return err // another CA's rotation is under way
		}
		if rot, err = pki.StartCARotation(r.c.Inv, st, t.Which, r.o.Now()); err != nil {
			return err
		}
		r.preview = rot
		r.c.logf("[rotate] %s", rot.Describe())
	} else {
		r.c.logf("[rotate] resuming the CA rotation %s after phase %d of %d (started %s)", rot.Describe(), rot.Done, pki.PhaseDropOld, rot.Started.Format(time.RFC3339))
	}
	r.res.CA, r.res.OldCA, r.res.ResumedAfter = t.CA, rot.OldCA, rot.Done
	r.res.Old, r.res.New = certDesc(rot.OldCert), certDesc(rot.NewCert)
	if rot.OldCA == t.CA {
		r.res.Retired = pki.RetiredDir(st)
	}
	if err := r.c.ensureRendered(ctx); err != nil {
		return err
	}
	if err := r.checkUnits(ctx); err != nil {
		return err
	}
	var bad []string
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	// Every member: the empty host is none of them.
	if err := r.c.othersHealthy(hctx, inventory.Host{}); err != nil {
		bad = append(bad, err.Error())
	}
	cancel()
	if t.Which == pki.WhichKubernetes {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := r.workersReady(wctx); err != nil {
			bad = append(bad, err.Error())
		}
		cancel()
	}
	for _, h := range r.c.Inv.ControlPlane {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := r.ready(pctx, h); err != nil {
			bad = append(bad, fmt.Sprintf("kube-apiserver on %s is not ready: %v", h.Name, err))
		}
		cancel()
		if len(bad) > 0 {
			break
		}
	}
	if len(bad) > 0 {
		return usererr.New(fmt.Errorf("the cluster is not healthy; nothing was changed: %s", strings.Join(bad, "; ")),
			"every member and apiserver restarts once per phase, behind health gates that need the others healthy: 'hardway verify' names the problem, 'hardway up' repairs it; then rerun")
	}
	return nil
}

func certDesc(pemText string) string {
	c, err := pki.ParseCertificate([]byte(pemText))
	if err != nil {
		return "unreadable"
	}
	return fmt.Sprintf("CN %s, serial %s, until %s", c.Subject.CommonName, c.SerialNumber.Text(16), c.NotAfter.Format(time.DateOnly))
}

// checkUnits refuses hosts whose etcd, apiserver or controller-manager
// unit differs from what this hardway renders: a unit from an older hardway
// may point the apiserver's --etcd-cafile (or --requestheader-client-ca-file,
// --client-ca-file) at a CA file instead of the bundle, and would lose its
// trust in the reissue phase.
func (r *CARotation) checkUnits(ctx context.Context) error {
	var stale []string
	for _, h := range r.c.Inv.ControlPlane {
		m := r.c.manifest(h.Name)
		var files []remote.File
		for _, comp := range []string{units.Etcd, units.APIServer, units.ControllerManager} {
			f, ok := m.File(units.UnitPath(comp))
			if !ok {
				continue
			}
			files = append(files, remote.File{Path: f.Path, Mode: f.Mode, Owner: "root", Group: "root", Data: f.Content})
		}
		sh, err := r.c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		res, _, err := remote.Inspect(ctx, sh, files, "", nil)
		if err != nil {
			return err
		}
		for i, x := range res {
			if x.Changed() && x.Content {
				stale = append(stale, fmt.Sprintf("%s: %s (%s)", h.Name, files[i].Path, x.Why))
			}
		}
	}
	if len(stale) > 0 {
		return usererr.New(fmt.Errorf("the hosts do not run the units this hardway renders; nothing was changed:\n  %s", strings.Join(stale, "\n  ")),
			"run 'hardway up' first (it points etcd, the apiservers and the controller-managers at the trust bundles, restarting them host by host), then rerun")
	}
	return nil
}

// Phase is one phase's steps: the runner plans each step after the one
// before ran, and a phase's etcd and control-plane steps restart what its
// own push changed.
type Phase struct {
	N     int
	Name  string
	Steps []plan.Step
}

// Phases are the rotation's three phases, in order.
func (r *CARotation) Phases() []Phase {
	if r.target.Which == pki.WhichKubernetes {
		return r.kubernetesPhases()
	}
	bundle := r.target.Bundle
	return []Phase{
		{pki.PhaseTrustBoth, pki.CAPhases[pki.PhaseTrustBoth], []plan.Step{
			{Name: "new-ca", Doc: "make the new CA; the trust bundle becomes old + new", Plan: r.planNewCA},
			r.pushStep(pki.PhaseTrustBoth, "push the bundle ("+bundle+") and the new CA to the control-plane hosts"),
			r.gated(pki.PhaseTrustBoth, StepEtcd, r.c.planEtcd),
			r.gated(pki.PhaseTrustBoth, StepControlPlane, r.c.planControlPlane),
			r.recordStep(pki.PhaseTrustBoth),
		}},
		{pki.PhaseReissue, pki.CAPhases[pki.PhaseReissue], []plan.Step{
			{Name: "reissue", Doc: "reissue " + strings.Join(r.target.Leaves(), ", ") + " from the new CA", Plan: r.planReissue},
			r.pushStep(pki.PhaseReissue, "push the reissued certificates"),
			r.gated(pki.PhaseReissue, StepEtcd, r.c.planEtcd),
			r.gated(pki.PhaseReissue, StepControlPlane, r.c.planControlPlane),
			r.recordStep(pki.PhaseReissue),
		}},
		{pki.PhaseDropOld, pki.CAPhases[pki.PhaseDropOld], []plan.Step{
			{Name: "drop-old", Doc: "the trust bundle becomes the new CA alone", Plan: r.planDropOld},
			r.pushStep(pki.PhaseDropOld, "push the bundle"),
			r.gated(pki.PhaseDropOld, StepEtcd, r.c.planEtcd),
			r.gated(pki.PhaseDropOld, StepControlPlane, r.c.planControlPlane),
			r.recordStep(pki.PhaseDropOld),
		}},
	}
}

func (r *CARotation) stepName(phase int, step string) string { return pki.CAPhases[phase] + "/" + step }

// gated is up's step for phase, planned only while the phase is not done.
func (r *CARotation) gated(phase int, name string, p func(context.Context, plan.Planned) ([]plan.Action, error)) plan.Step {
	doc := "restart the etcd members whose files changed, one at a time, each after the others are healthy"
	if name == StepControlPlane {
		doc = "restart the apiservers whose files changed, one at a time, each waiting for /readyz"
	}
	return plan.Step{Name: r.stepName(phase, name), Doc: doc, Plan: func(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
		rot, _, err := r.current()
		if err != nil || rot.Done >= phase {
			return nil, err
		}
		return p(ctx, earlier)
	}}
}

// files are what phase writes on the hosts: the bundle and the CA, or
// the CA's leaves.
func (r *CARotation) files(phase int) func(*units.Source) bool {
	leaves := map[string]bool{}
	for _, e := range pki.Entries(r.c.Inv) {
		if slices.Contains(r.target.Leaves(), e.Row) {
			leaves[e.Name] = true
		}
	}
	kube := r.target.Which == pki.WhichKubernetes
	return func(s *units.Source) bool {
		// The cluster CA's: every kubeconfig embeds the bundle, and the
		// certificates of the users it names, in every phase.
		if kube && s != nil && s.Kind == units.SourceKubeconfig {
			return true
		}
		if s == nil || (s.Kind != units.SourceCert && s.Kind != units.SourceKey) {
			return false
		}
		if phase == pki.PhaseReissue {
			return leaves[s.Name]
		}
		return s.Name == r.target.Bundle || s.Name == r.target.CA
	}
}

func (r *CARotation) pushStep(phase int, doc string) plan.Step {
	return plan.Step{Name: r.stepName(phase, StepPush), Doc: doc + " (files already equal are not sent)",
		Plan: func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
			rot, recorded, err := r.current()
			if err != nil || rot.Done >= phase {
				return nil, err
			}
			// In a dry run nothing was written to the state directory:
			// show every file of the phase as pushed.
			return r.c.planPushSelected(ctx, &pushSelect{keep: bySource(r.files(phase)), force: !recorded || r.o.DryRun, why: "CA rotation, phase " + pki.CAPhases[phase]})
		}}
}

func (r *CARotation) recordStep(phase int) plan.Step {
	st := r.c.opt.State
	return plan.Step{Name: r.stepName(phase, "record"), Doc: "record the phase done in " + st.CARotation(r.target.Which),
		Plan: func(context.Context, plan.Planned) ([]plan.Action, error) {
			rot, _, err := r.current()
			if err != nil {
				return nil, err
			}
			var actions []plan.Action
			if rot.Done < phase {
				actions = append(actions, plan.Action{Kind: plan.Write, Desc: fmt.Sprintf("record phase %d %s done in %s", phase, pki.CAPhases[phase], st.CARotation(r.target.Which)),
					Do: func(context.Context) error {
						back, err := pki.LoadCARotation(st, r.target.Which)
						if err != nil {
							return err
						}
						if back == nil {
							return fmt.Errorf("%s disappeared during the rotation", st.CARotation(r.target.Which))
						}
						back.Done = max(back.Done, phase)
						return pki.SaveCARotation(st, back, r.o.Now())
					}})
			}
			if phase == pki.PhaseDropOld {
				actions = append(actions, plan.Action{Kind: plan.Write, Desc: "rotation complete: remove " + st.CARotation(r.target.Which),
					Do: func(context.Context) error {
						if err := pki.FinishCARotation(st, r.target.Which); err != nil {
							return err
						}
						r.res.Complete = true
						return nil
					}})
			}
			return actions, nil
		}}
}

// stateAction writes the phase's state (new CA, retired copy, bundle) when
// the state directory lacks it.
//
// The cluster CA's kubeconfigs embed its bundle: they are rewritten with it
// (also by a run that resumes after the bundle was written and the
// kubeconfigs were not).
func (r *CARotation) stateAction(rot *pki.CARotation, phase int) ([]plan.Action, error) {
	st := r.c.opt.State
	changes := rot.StateChanges(st, phase)
	kube := r.target.Which == pki.WhichKubernetes
	if kube {
		stale, err := pki.StaleKubeconfigs(r.c.Inv, st)
		if err != nil {
			return nil, err
		}
		if len(changes) > 0 || len(stale) > 0 {
			changes = append(changes, "rewrite every kubeconfig in "+st.KubeconfigDir()+" with the bundle")
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	return []plan.Action{{Kind: plan.Write, Desc: strings.Join(changes, "; "),
		Do: func(context.Context) error {
			if err := rot.ApplyState(st, phase); err != nil || !kube {
				return err
			}
			return pki.WriteKubeconfigs(r.c.Inv, st)
		}}}, nil
}

func (r *CARotation) planNewCA(context.Context, plan.Planned) ([]plan.Action, error) {
	rot, recorded, err := r.current()
	if err != nil || rot.Done >= pki.PhaseTrustBoth {
		return nil, err
	}
	st := r.c.opt.State
	var actions []plan.Action
	if !recorded {
		alg := r.c.Inv.PKI.Algorithm
		actions = append(actions, plan.Action{Kind: plan.Reissue,
			Desc: fmt.Sprintf("make a new %s (%s, %s) and record the rotation in %s (0600: it holds the new key until the CA files are written)",
				r.target.CA, certDesc(rot.NewCert), alg, st.CARotation(r.target.Which)),
			Do: func(context.Context) error { return pki.SaveCARotation(st, r.preview, r.o.Now()) }})
	}
	sa, err := r.stateAction(rot, pki.PhaseTrustBoth)
	return append(actions, sa...), err
}

func (r *CARotation) planReissue(context.Context, plan.Planned) ([]plan.Action, error) {
	rot, recorded, err := r.current()
	if err != nil || rot.Done >= pki.PhaseReissue {
		return nil, err
	}
	var leaves []pki.Entry
	if recorded {
		if leaves, err = rot.UnsignedLeaves(r.c.Inv, r.c.opt.State); err != nil {
			return nil, err
		}
	} else {
		for _, e := range pki.Entries(r.c.Inv) {
			if slices.Contains(r.target.Leaves(), e.Row) {
				leaves = append(leaves, e)
			}
		}
	}
	if len(leaves) == 0 {
		if r.target.Which == pki.WhichKubernetes && recorded {
			// Killed between the leaves and their kubeconfigs.
			return r.stateAction(rot, pki.PhaseReissue)
		}
		return nil, nil
	}
	var names []string
	for _, e := range leaves {
		names = append(names, e.Name)
	}
	return []plan.Action{{Kind: plan.Reissue,
		Desc: fmt.Sprintf("reissue %d certificate(s) in %s from the new %s: %s", len(leaves), r.c.opt.State, r.target.CA, strings.Join(names, ", ")),
		Do: func(ctx context.Context) error {
			rs, err := pki.Renew(ctx, r.c.Inv, r.c.opt.State, leaves, r.o.Now())
			for _, x := range rs {
				r.res.Reissued = append(r.res.Reissued, x.Name)
				r.c.logf("[%s] %s: serial %s -> %s", pki.CAPhases[pki.PhaseReissue], x.Name, dash(x.OldSerial), x.Serial)
			}
			return err
		}}}, nil
}

func (r *CARotation) planDropOld(context.Context, plan.Planned) ([]plan.Action, error) {
	rot, _, err := r.current()
	if err != nil || rot.Done >= pki.PhaseDropOld {
		return nil, err
	}
	return r.stateAction(rot, pki.PhaseDropOld)
}
