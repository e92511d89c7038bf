package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/skew"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// versionBinaries is where each component's binary is on a host: the
// component table's paths, so the plan asks the binary the unit runs.
func versionBinaries() map[string]string {
	out := map[string]string{}
	for _, name := range []string{skew.Etcd, skew.APIServer, skew.ControllerManager, skew.Scheduler, skew.Containerd, skew.Kubelet, skew.KubeProxy} {
		out[name] = units.MustLookup(name).Exec()
	}
	for _, b := range units.MustLookup(units.Containerd).Binaries {
		if b.Name == skew.Runc {
			out[skew.Runc] = b.Path
		}
	}
	return out
}

// versionScript asks every binary for its version in one round trip; each
// answer is under an "@@<path>" line, "@missing" for no executable there.
// It only reads: no redirection into a file, nothing written.
func versionScript(paths []string) string {
	var b strings.Builder
	b.WriteString("# versions\n")
	for _, p := range paths {
		q := remote.Quote(p)
		fmt.Fprintf(&b, "echo %s; if [ -x %s ]; then %s --version 2>&1 | head -n 5; else echo '@missing'; fi\n", remote.Quote("@@"+p), q, q)
	}
	return b.String()
}

// ObserveVersions reads what every host runs: each component's binary
// --version over SSH, and each worker's Node's kubelet version through the
// API. A host, binary or API that cannot be read is an Observation with
// Err: the plan shows it and is blocked, and the rest is still read.
func (c *Cluster) ObserveVersions(ctx context.Context) []skew.Observation {
	paths := versionBinaries()
	type job struct {
		h    inventory.Host
		role skew.Role
	}
	var jobs []job
	for _, h := range c.Inv.ControlPlane {
		jobs = append(jobs, job{h, skew.ControlPlane})
	}
	for _, h := range c.Inv.Workers {
		jobs = append(jobs, job{h, skew.Worker})
	}
	res := make([][]skew.Observation, len(jobs)+1)
	// The Nodes are read through the API beside the hosts' SSH reads.
	nodes := make(chan []skew.Observation, 1)
	go func() {
		if len(c.Inv.Workers) == 0 {
			nodes <- nil
			return
		}
		nodes <- c.observeNodes(ctx)
	}()
	// Hosts as every step reads them: bounded, in parallel; a host that
	// cannot be read is an Observation with Err, never an error here.
	_ = remote.ForEach(ctx, jobs, hostsAtOnce, func(ctx context.Context, j job) error {
		res[slices.Index(jobs, j)] = c.observeHost(ctx, j.h, skew.Names(j.role), paths)
		return nil
	})
	res[len(jobs)] = <-nodes
	var out []skew.Observation
	for _, r := range res {
		out = append(out, r...)
	}
	return out
}

func (c *Cluster) observeHost(ctx context.Context, h inventory.Host, comps []string, paths map[string]string) []skew.Observation {
	fail := func(err error) []skew.Observation {
		var out []skew.Observation
		for _, comp := range comps {
			out = append(out, skew.Observation{Host: h.Name, Component: comp, Source: skew.FromBinary, Err: err.Error()})
		}
		return out
	}
	rh, err := c.Host(ctx, h.Name)
	if err != nil {
		return fail(err)
	}
	var ps []string
	for _, comp := range comps {
		ps = append(ps, paths[comp])
	}
	b, err := rh.Run(ctx, versionScript(ps), nil)
	if err != nil {
		return fail(fmt.Errorf("read versions: %w", err))
	}
	answers := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "@@"); ok {
			cur = p
			continue
		}
		if cur != "" {
			answers[cur] += line + "\n"
		}
	}
	var out []skew.Observation
	for _, comp := range comps {
		o := skew.Observation{Host: h.Name, Component: comp, Source: skew.FromBinary}
		ans, ok := answers[paths[comp]]
		switch {
		case !ok:
			o.Err = "no answer for " + paths[comp]
		case strings.TrimSpace(ans) == "@missing":
			o.Err = paths[comp] + " is not installed"
		default:
			if o.Version, err = skew.ParseVersionOutput(ans); err != nil {
				o.Err = fmt.Sprintf("%s --version: %v", paths[comp], err)
			} else {
				o.Raw = skew.Tag(o.Version)
			}
		}
		out = append(out, o)
	}
	return out
}

// observeNodes reads each worker's Node: the kubelet that registered is the
// one that runs, which a binary replaced but not restarted is not.
func (c *Cluster) observeNodes(ctx context.Context) []skew.Observation {
	fail := func(msg string, names ...string) []skew.Observation {
		var out []skew.Observation
		for _, n := range names {
			out = append(out, skew.Observation{Host: n, Component: skew.Kubelet, Source: skew.FromNode, Err: msg})
		}
		return out
	}
	var workers []string
	for _, w := range c.Inv.Workers {
		workers = append(workers, w.Name)
	}
	cs, err := c.Kube(c.apiHost())
	if err != nil {
		return fail("the API: "+err.Error(), workers...)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fail("list Nodes: "+err.Error(), workers...)
	}
	byName := map[string]string{}
	for _, n := range nodes.Items {
		byName[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	var out []skew.Observation
	for _, w := range workers {
		raw, ok := byName[w]
		if !ok {
			out = append(out, fail("no Node "+w+" is registered", w)...)
			continue
		}
		o := skew.Observation{Host: w, Component: skew.Kubelet, Source: skew.FromNode, Raw: raw}
		if o.Version, err = version.NewSemver(strings.TrimPrefix(raw, "v")); err != nil {
			o.Version, o.Err = nil, fmt.Sprintf("the Node's kubelet version %q: %v", raw, err)
		}
		out = append(out, o)
	}
	return out
}

// UpgradeOptions say what 'hardway upgrade plan' plans.
type UpgradeOptions struct {
	// To is the target Kubernetes: "v1.36.3", a minor "1.36", or "" for
	// the minor after the running control plane's.
	To string
	// LatestPatch resolves a minor to its newest patch (the release
	// mirror); nil or failing: the inventory's version when it is of that
	// minor, else X.Y.0, with a note.
	LatestPatch    func(ctx context.Context, minor string) (*version.Version, error)
	AllowDowngrade bool
}

// UpgradePlan is the plan: the observations, the target, every move, the
// violations and the changes per unit.
type UpgradePlan struct {
	Observed []skew.Observation `json:"observed"`
	Target   UpgradeTarget      `json:"target"`
	skew.Result
	Changes []units.Change `json:"changes"`
	Notes   []string       `json:"notes,omitempty"`
}

// UpgradeTarget is the target, as tags.
type UpgradeTarget struct {
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
	Containerd string `json:"containerd,omitempty"`
	Runc       string `json:"runc,omitempty"`
}

// PlanUpgrade reads the running versions and checks the move to the
// target. It only reads: the hosts are asked for versions, the API for
// Nodes, and nothing is written anywhere (the inventory and lock neither).
func (c *Cluster) PlanUpgrade(ctx context.Context, opt UpgradeOptions) (*UpgradePlan, error) {
	p := &UpgradePlan{Observed: c.ObserveVersions(ctx)}
	now := oldest(p.Observed)
	k8s, err := c.upgradeTarget(ctx, opt, now[skew.APIServer], &p.Notes)
	if err != nil {
		return nil, err
	}
	to := withVersions(c.Inv, k8s)
	t := skew.Target{Kubernetes: to.K8s, Etcd: to.Etcd}
	p.Target = UpgradeTarget{Kubernetes: skew.Tag(to.K8s), Etcd: skew.Tag(to.Etcd)}
	if len(c.Inv.Workers) > 0 {
		t.Containerd, _ = version.NewVersion(to.ContainerdVersion)
		t.Runc, _ = version.NewVersion(to.RuncVersion)
		p.Target.Containerd, p.Target.Runc = to.ContainerdVersion, to.RuncVersion
	}
	p.Result = skew.Check(skew.Input{Observed: p.Observed, Target: t, AllowDowngrade: opt.AllowDowngrade})

	// What each unit changes: rendered as the control plane runs now (its
	// oldest versions; the inventory's where none was read) against the
	// target.
	from := c.Inv
	if v := now[skew.APIServer]; v != nil {
		from = withVersions(c.Inv, v)
	}
	if v := now[skew.Etcd]; v != nil && inventory.SupportsEtcd(v) {
		f := *from
		f.EtcdVersion, f.Etcd = skew.Tag(v), v
		from = &f
	}
	if !inventory.SupportsKubernetes(from.K8s) || !inventory.SupportsKubernetes(to.K8s) {
		p.Notes = append(p.Notes, "no unit changes listed: a version is outside what hardway renders")
		return p, nil
	}
	pods, err := c.podSubnets()
	if err != nil {
		return nil, fmt.Errorf("pod subnets: %w", err)
	}
	if p.Changes, err = units.Changes(from, to, pods); err != nil {
		return nil, fmt.Errorf("unit changes: %w", err)
	}
	return p, nil
}

// oldest is each component's oldest version read (what the rules measure
// skew from).
func oldest(obs []skew.Observation) map[string]*version.Version {
	out := map[string]*version.Version{}
	for _, o := range obs {
		if o.Version == nil {
			continue
		}
		if v := out[o.Component]; v == nil || o.Version.LessThan(v) {
			out[o.Component] = o.Version
		}
	}
	return out
}

// upgradeTarget turns --to into an exact Kubernetes version.
func (c *Cluster) upgradeTarget(ctx context.Context, opt UpgradeOptions, running *version.Version, notes *[]string) (*version.Version, error) {
	to := opt.To
	if to == "" {
		base := running
		if base == nil {
			base = c.Inv.K8s
			*notes = append(*notes, "no apiserver version could be read: the next minor is counted from the inventory's "+c.Inv.KubernetesVersion)
		}
		s := base.Segments()
		to = fmt.Sprintf("%d.%d", s[0], s[1]+1)
	}
	t := strings.TrimPrefix(strings.TrimSpace(to), "v")
	parts := strings.Split(t, ".")
	switch len(parts) {
	case 3:
		v, err := version.NewSemver(t)
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--to %q: %w", to, err), usererr.CodeUsage, "write a minor (1.36) or an exact version (v1.36.3)")
		}
		return v, nil
	case 2:
	default:
		return nil, usererr.WithCode(fmt.Errorf("--to %q is not a version", to), usererr.CodeUsage, "write a minor (1.36) or an exact version (v1.36.3)")
	}
	if _, err := version.NewSemver(t + ".0"); err != nil {
		return nil, usererr.WithCode(fmt.Errorf("--to %q: %w", to, err), usererr.CodeUsage, "write a minor (1.36) or an exact version (v1.36.3)")
	}
	if opt.LatestPatch != nil {
		v, err := opt.LatestPatch(ctx, t)
		if err == nil {
			return v, nil
		}
		*notes = append(*notes, fmt.Sprintf("the newest %s patch could not be resolved (%v)", t, err))
	}
	for _, cand := range []string{c.Inv.KubernetesVersion, inventory.DefaultKubernetesVersion} {
		if v, err := version.NewSemver(strings.TrimPrefix(cand, "v")); err == nil && len(strings.Split(strings.TrimPrefix(cand, "v"), ".")) == 3 &&
			fmt.Sprintf("%d.%d", v.Segments()[0], v.Segments()[1]) == t {
			*notes = append(*notes, "target "+skew.Tag(v)+": the inventory's own version of "+t)
			return v, nil
		}
	}
	v := version.Must(version.NewSemver(t + ".0"))
	*notes = append(*notes, "target "+skew.Tag(v)+": the patch is a placeholder; pass --to with an exact version")
	return v, nil
}

// withVersions is inv at Kubernetes k8s: the etcd and worker versions
// follow k8s's defaults where inv left them at its own version's defaults,
// and stay where inv pins others.
func withVersions(inv *inventory.Inventory, k8s *version.Version) *inventory.Inventory {
	out := *inv
	out.KubernetesVersion, out.K8s = skew.Tag(k8s), k8s
	if inv.K8s != nil && inv.EtcdVersion == inventory.DefaultEtcdFor(inv.K8s) {
		if d := inventory.DefaultEtcdFor(k8s); d != "" {
			out.EtcdVersion = d
			out.Etcd, _ = version.NewVersion(d)
		}
	}
	if inv.K8s != nil {
		old, _ := inventory.DefaultWorkerVersions(inv.K8s)
		def, _ := inventory.DefaultWorkerVersions(k8s)
		cur := inv.WorkerVersions()
		for _, f := range []struct {
			field      *string
			cur, o, nw string
		}{
			{&out.ContainerdVersion, cur.Containerd, old.Containerd, def.Containerd},
			{&out.RuncVersion, cur.Runc, old.Runc, def.Runc},
			{&out.CNIPluginsVersion, cur.CNIPlugins, old.CNIPlugins, def.CNIPlugins},
			{&out.CrictlVersion, cur.Crictl, old.Crictl, def.Crictl},
			{&out.TraefikVersion, cur.Traefik, old.Traefik, def.Traefik},
		} {
			if f.cur == f.o {
				*f.field = f.nw
			}
		}
	}
	return &out
}
