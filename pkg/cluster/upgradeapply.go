package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// The kinds of upgrade phase, in the order an upgrade runs them.
const (
	PhaseEtcd        = "etcd"        // one etcd member: followers first, the leader last
	PhaseAPIServer   = "apiserver"   // one kube-apiserver
	PhaseControllers = "controllers" // every controller-manager and scheduler, host by host
	PhaseWorker      = "worker"      // one worker: cordon, drain, runtime, kubelet, kube-proxy, Ready, uncordon
	PhaseFinish      = "finish"      // a whole 'up': files no component reads, the add-ons
)

// UpgradePhase is one step of 'hardway upgrade apply': a run of up
// narrowed to some hosts and components (Scope), and for a worker the
// drain around it.
type UpgradePhase struct {
	Name       string   `yaml:"name" json:"name"` // "etcd controller-2": unique, the record's key
	Kind       string   `yaml:"kind" json:"kind"`
	Hosts      []string `yaml:"hosts" json:"hosts"`
	Components []string `yaml:"components,omitempty" json:"components,omitempty"`
	Desc       string   `yaml:"desc" json:"desc"`
}

// UpgradeRecord is an upgrade's progress in the state directory (like an
// encryption-key rotation's): its target, its phases in order and which
// are done. A run that is killed or fails leaves it; the next 'hardway
// upgrade apply' goes on from the first phase not done, up refuses to run
// past it, and verify reports it.
type UpgradeRecord struct {
	From    string         `yaml:"from"` // Kubernetes before the upgrade: the oldest apiserver read
	To      string         `yaml:"to"`
	Started time.Time      `yaml:"started"`
	Backup  string         `yaml:"backup,omitempty"` // the backup taken first ("" with --no-backup)
	Phases  []UpgradePhase `yaml:"phases"`
	Done    []string       `yaml:"done"`
	// Cordoned are the Nodes this upgrade cordoned and has not uncordoned
	// yet; a Node the user had cordoned before stays cordoned.
	Cordoned []string `yaml:"cordoned,omitempty"`
}

// NewUpgradeRecord is the record of an upgrade to p's target, from the
// oldest apiserver p read (the inventory's version when none was), with
// its phases.
func (c *Cluster) NewUpgradeRecord(ctx context.Context, p *UpgradePlan) *UpgradeRecord {
	from := c.Inv.KubernetesVersion
	if v := oldest(p.Observed)[skew.APIServer]; v != nil {
		from = skew.Tag(v)
	}
	return &UpgradeRecord{From: from, To: p.Target.Kubernetes, Started: time.Now().UTC(), Phases: c.UpgradePhases(ctx, p)}
}

// Left are the phases not done yet, in order.
func (r *UpgradeRecord) Left() []UpgradePhase {
	var out []UpgradePhase
	for _, p := range r.Phases {
		if !slices.Contains(r.Done, p.Name) {
			out = append(out, p)
		}
	}
	return out
}

// Summary says in one line where the upgrade stands, for verify and the
// refusals.
func (r *UpgradeRecord) Summary() string {
	left := r.Left()
	var names []string
	for _, p := range left {
		names = append(names, p.Name)
	}
	return fmt.Sprintf("an upgrade from %s to %s is half-way: %d of %d phases done; left: %s",
		r.From, r.To, len(r.Phases)-len(left), len(r.Phases), strings.Join(names, ", "))
}

// LoadUpgrade reads the upgrade record; nil when no upgrade is under way.
func LoadUpgrade(st state.Dir) (*UpgradeRecord, error) {
	b, err := os.ReadFile(st.Upgrade())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the upgrade record: %w", err)
	}
	var r UpgradeRecord
	if err := yaml.Unmarshal(b, &r); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", st.Upgrade(), err),
			"the upgrade record is damaged: 'hardway upgrade plan' shows what runs; remove the file and run 'hardway upgrade apply --to' the target again")
	}
	return &r, nil
}

// SaveUpgrade writes the record atomically.
func SaveUpgrade(st state.Dir, r *UpgradeRecord) error {
	b, err := yaml.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(string(st), 0o700); err != nil {
		return err
	}
	return fsutil.WriteFile(st.Upgrade(), b, 0o600)
}

// FinishUpgrade removes the record: the upgrade is complete.
func FinishUpgrade(st state.Dir) error {
	if err := os.Remove(st.Upgrade()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// UpgradeInventory is inv moved to Kubernetes k8s: the etcd and worker
// versions follow k8s's defaults where inv left them at its own version's
// defaults, and stay where inv pins others (what 'upgrade plan' targets).
func UpgradeInventory(inv *inventory.Inventory, k8s string) (*inventory.Inventory, error) {
	v, err := skewVersion(k8s)
	if err != nil {
		return nil, err
	}
	return withVersions(inv, v), nil
}

// InventoryEdits are the inventory file's top-level values that move from
// inv to to: the file then says what the cluster runs, so a later up does
// not undo the upgrade.
func InventoryEdits(inv, to *inventory.Inventory) (set map[string]string, add []string) {
	set = map[string]string{"kubernetesVersion": to.KubernetesVersion}
	for _, f := range []struct{ key, from, to string }{
		{"etcdVersion", inv.EtcdVersion, to.EtcdVersion},
		{"containerdVersion", inv.ContainerdVersion, to.ContainerdVersion},
		{"runcVersion", inv.RuncVersion, to.RuncVersion},
		{"cniPluginsVersion", inv.CNIPluginsVersion, to.CNIPluginsVersion},
		{"crictlVersion", inv.CrictlVersion, to.CrictlVersion},
		{"traefikVersion", inv.TraefikVersion, to.TraefikVersion},
	} {
		if f.from != f.to {
			set[f.key] = f.to
		}
	}
	// Only the Kubernetes version is added where the file lacks it: a
	// missing etcd or worker version follows the defaults of the
	// Kubernetes version the file names, which is the target's.
	return set, []string{"kubernetesVersion"}
}

// UpgradePhases orders the moves of a plan into phases: etcd member by
// member (followers first, the leader last), each apiserver, the
// controller-managers and schedulers, each worker, and a last whole up.
// A downgrade runs them the other way round: no component is ever newer
// than the apiservers it talks to.
func (c *Cluster) UpgradePhases(ctx context.Context, p *UpgradePlan) []UpgradePhase {
	moving := map[string]map[string]skew.Move{} // host -> component -> move
	downgrade := false
	for _, m := range p.Moves {
		if m.Change == skew.Same {
			continue
		}
		downgrade = downgrade || m.Change == skew.Downgrade
		if moving[m.Host] == nil {
			moving[m.Host] = map[string]skew.Move{}
		}
		moving[m.Host][m.Component] = m
	}
	desc := func(host string, comps ...string) string {
		var parts []string
		for _, comp := range comps {
			if m, ok := moving[host][comp]; ok {
				parts = append(parts, fmt.Sprintf("%s %s → %s", comp, m.Now, m.Target))
			}
		}
		return strings.Join(parts, ", ")
	}
	// One group per kind, in upgrade order.
	var etcdPhases, apiPhases, ctlPhases, workerPhases []UpgradePhase

	// etcd: the leader last, so that the cluster changes leader once.
	var members []inventory.Host
	for _, h := range c.Inv.ControlPlane {
		if _, ok := moving[h.Name][skew.Etcd]; ok {
			members = append(members, h)
		}
	}
	leader := ""
	if len(members) > 1 {
		if cli, err := c.etcd(); err == nil {
			if l, err := c.etcdLeader(ctx, cli); err == nil {
				leader = l.Name
			}
		}
	}
	slices.SortStableFunc(members, func(a, b inventory.Host) int {
		return boolInt(a.Name == leader) - boolInt(b.Name == leader)
	})
	for _, h := range members {
		role := "follower"
		if h.Name == leader {
			role = "leader"
		} else if leader == "" {
			role = "member"
		}
		etcdPhases = append(etcdPhases, UpgradePhase{Name: "etcd " + h.Name, Kind: PhaseEtcd, Hosts: []string{h.Name}, Components: []string{units.Etcd},
			Desc: fmt.Sprintf("%s on %s (%s)", desc(h.Name, skew.Etcd), h.Name, role)})
	}
	for _, h := range c.Inv.ControlPlane {
		if _, ok := moving[h.Name][skew.APIServer]; ok {
			apiPhases = append(apiPhases, UpgradePhase{Name: "kube-apiserver " + h.Name, Kind: PhaseAPIServer, Hosts: []string{h.Name}, Components: []string{units.APIServer},
				Desc: desc(h.Name, skew.APIServer) + " on " + h.Name})
		}
	}
	var ctl []string
	for _, h := range c.Inv.ControlPlane {
		_, cm := moving[h.Name][skew.ControllerManager]
		_, sc := moving[h.Name][skew.Scheduler]
		if cm || sc {
			ctl = append(ctl, h.Name)
		}
	}
	if len(ctl) > 0 {
		ctlPhases = append(ctlPhases, UpgradePhase{Name: "controllers", Kind: PhaseControllers, Hosts: ctl, Components: []string{units.ControllerManager, units.Scheduler},
			Desc: desc(ctl[0], skew.ControllerManager, skew.Scheduler) + " on " + strings.Join(ctl, ", ") + ", host by host"})
	}
	for _, w := range c.Inv.Workers {
		if len(moving[w.Name]) == 0 {
			continue
		}
		workerPhases = append(workerPhases, UpgradePhase{Name: "worker " + w.Name, Kind: PhaseWorker, Hosts: []string{w.Name},
			Desc: fmt.Sprintf("%s: cordon, drain, %s, wait for Ready, uncordon", w.Name, desc(w.Name, skew.Containerd, skew.Runc, skew.Kubelet, skew.KubeProxy))})
	}
	groups := [][]UpgradePhase{etcdPhases, apiPhases, ctlPhases, workerPhases}
	if downgrade {
		// The groups the other way round; within etcd's the leader stays
		// last.
		slices.Reverse(groups)
	}
	out := slices.Concat(groups...)
	out = append(out, UpgradePhase{Name: "finish", Kind: PhaseFinish, Hosts: c.hostNames(),
		Desc: "a whole up: the files no component reads (kubectl, etcdctl), the RBAC and the add-ons"})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ApplyOptions tune 'hardway upgrade apply's phases.
type ApplyOptions struct {
	DrainTimeout time.Duration
}

// PhaseTimes is how long the control plane's and the workers' phases took
// in this run.
type PhaseTimes struct {
	ControlPlane, Workers, Finish time.Duration
}

// ApplyUpgrade runs the record's phases not done yet, in order, saving the
// record in the state directory after each. c is the cluster at the
// target (its inventory names the new versions). A failed phase stops the upgrade there: the hosts of
// later phases are untouched, and the error says how to go on.
func (c *Cluster) ApplyUpgrade(ctx context.Context, rec *UpgradeRecord, o ApplyOptions) (PhaseTimes, error) {
	var times PhaseTimes
	save := func() error { return SaveUpgrade(c.opt.State, rec) }
	n := len(rec.Phases)
	for i, ph := range rec.Phases {
		if slices.Contains(rec.Done, ph.Name) {
			continue
		}
		c.logf("\n== upgrade phase %d/%d: %s", i+1, n, ph.Desc)
		start := time.Now()
		if err := c.runPhase(ctx, rec, ph, o, save); err != nil {
			return times, usererr.New(fmt.Errorf("the upgrade to %s stopped in phase %q: %w", rec.To, ph.Name, err),
				fmt.Sprintf("the hosts of the phases after it are as they were. Fix what the error names, then 'hardway upgrade apply' goes on from this phase; to go back instead: %s", goBack(rec)))
		}
		took := time.Since(start)
		switch ph.Kind {
		case PhaseWorker:
			times.Workers += took
		case PhaseFinish:
			times.Finish += took
		default:
			times.ControlPlane += took
		}
		rec.Done = append(rec.Done, ph.Name)
		if err := save(); err != nil {
			return times, fmt.Errorf("record phase %q done: %w", ph.Name, err)
		}
		c.logf("== phase %q done in %s", ph.Name, took.Round(100*time.Millisecond))
	}
	return times, nil
}

// goBack is how to undo the upgrade.
func goBack(rec *UpgradeRecord) string {
	if rec.Backup != "" {
		return "'hardway restore --from " + usererr.Quote(rec.Backup) + "' onto fresh hosts (the backup taken before the upgrade)"
	}
	return "'hardway upgrade apply --to " + rec.From + " --allow-downgrade' after removing the upgrade record (no backup was taken: --no-backup)"
}

func (c *Cluster) runPhase(ctx context.Context, rec *UpgradeRecord, ph UpgradePhase, o ApplyOptions, save func() error) error {
	scope := &Scope{Hosts: ph.Hosts, Components: ph.Components}
	// The add-ons follow the last phase only: CoreDNS is not to move
	// before the kubelets it runs on.
	skip := []string{StepDNS}
	if ph.Kind == PhaseFinish {
		scope, skip = nil, nil
	}
	if ph.Kind == PhaseWorker {
		if err := c.drainForUpgrade(ctx, rec, ph.Hosts[0], o, save); err != nil {
			return err
		}
	}
	if err := c.runScoped(ctx, scope, skip); err != nil {
		return err
	}
	if ph.Kind == PhaseWorker {
		return c.rejoinAfterUpgrade(ctx, rec, ph.Hosts[0], save)
	}
	return nil
}

// runScoped runs up's steps with push narrowed to scope.
func (c *Cluster) runScoped(ctx context.Context, scope *Scope, skip []string) error {
	sub := c.withScope(scope)
	defer sub.Close()
	r := &plan.Runner{Out: c.opt.Out, Skip: skip, Ahead: true}
	_, err := r.Run(ctx, sub.Steps())
	return err
}

// withScope is a cluster of the same inventory and options whose push
// is narrowed to scope; it dials its own connections (closed by Close),
// and shares the test hooks.
func (c *Cluster) withScope(scope *Scope) *Cluster {
	opt := c.opt
	opt.Scope, opt.Upgrading = scope, true
	sub := New(c.Inv, opt)
	sub.newEtcd, sub.newKube, sub.healthProbe, sub.queryDNS, sub.maint = c.newEtcd, c.newKube, c.healthProbe, c.queryDNS, c.maint
	sub.freshHeartbeat = c.freshHeartbeat
	return sub
}

// drainForUpgrade cordons and drains the worker, recording the cordon
// first: a run killed after it uncordons the Node when it finishes.
func (c *Cluster) drainForUpgrade(ctx context.Context, rec *UpgradeRecord, node string, o ApplyOptions, save func() error) error {
	cs, err := c.kubeClient()
	if err != nil {
		return err
	}
	n, err := kube.GetNode(ctx, cs, node)
	if err != nil {
		return err
	}
	if n == nil {
		return usererr.New(fmt.Errorf("no Node %s is registered", node), "'hardway verify' says why the worker's kubelet has not registered")
	}
	if !n.Spec.Unschedulable && !slices.Contains(rec.Cordoned, node) {
		rec.Cordoned = append(rec.Cordoned, node)
		if err := save(); err != nil {
			return err
		}
	} else if n.Spec.Unschedulable && !slices.Contains(rec.Cordoned, node) {
		c.logf("[upgrade] %s was cordoned before the upgrade: it stays cordoned after", node)
	}
	c.logf("[upgrade] %s: cordon and drain (evictions: PodDisruptionBudgets are respected; DaemonSet pods stay)", node)
	start := time.Now()
	if err := kube.Drain(ctx, cs, node, kube.DrainOptions{Timeout: o.DrainTimeout, Out: c.opt.Out}); err != nil {
		return err
	}
	c.logf("[upgrade] %s: drained in %s", node, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// rejoinAfterUpgrade waits until the Node's kubelet reports the target
// version and the Node is Ready (waitNodesReady: on a timeout it says why),
// then uncordons it if this upgrade cordoned it. The version comes first:
// the old kubelet's Ready stays for 40 s after it stopped.
func (c *Cluster) rejoinAfterUpgrade(ctx context.Context, rec *UpgradeRecord, node string, save func() error) error {
	cs, err := c.kubeClient()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, c.nodeTimeout())
	defer cancel()
	start := time.Now()
	err = poll.Until(wctx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error {
		n, err := kube.GetNode(ctx, cs, node)
		switch {
		case err != nil:
			return err
		case n == nil:
			return fmt.Errorf("not registered")
		case n.Status.NodeInfo.KubeletVersion != rec.To:
			return fmt.Errorf("its kubelet reports %s, not %s yet", n.Status.NodeInfo.KubeletVersion, rec.To)
		}
		return nil
	})
	if err != nil {
		return usererr.New(fmt.Errorf("%s after its upgrade: %w", node, err),
			fmt.Sprintf("see 'journalctl -u kubelet' on %s; it stays cordoned until the upgrade goes on", node))
	}
	if err := c.waitNodesReady(ctx, []string{node}); err != nil {
		return err
	}
	c.logf("[upgrade] %s: Ready with kubelet %s (%s)", node, rec.To, time.Since(start).Round(100*time.Millisecond))
	if !slices.Contains(rec.Cordoned, node) {
		return nil
	}
	if err := kube.Uncordon(ctx, cs, node); err != nil {
		return err
	}
	rec.Cordoned = slices.DeleteFunc(rec.Cordoned, func(s string) bool { return s == node })
	c.logf("[upgrade] %s: uncordoned", node)
	return save()
}

// skewVersion parses a release tag ("v1.36.3").
func skewVersion(tag string) (*version.Version, error) {
	v, err := version.NewSemver(strings.TrimPrefix(tag, "v"))
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", tag, err)
	}
	return v, nil
}
