package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// Node churn: a worker removed from the inventory is drained, stopped,
// its Node deleted, its routes taken off every other host (the pod-routes
// units rendered without it) and its pod subnet freed, in that order.

// drainTimeout bounds the drain of a removed worker.
const drainTimeout = 2 * time.Minute

// removedConnectTimeout bounds the SSH connection to a removed worker: it
// may well be gone for good, and up goes on without it.
const removedConnectTimeout = 20 * time.Second

// removedWorker is one worker to remove: in the state (pod-subnets.yaml)
// but not in the inventory, or a Node with a hardway pod subnet that no
// host of the inventory has.
type removedWorker struct {
	name    string
	host    *inventory.Host // how to reach it; nil: no address known
	from    string          // where host came from, for the plan
	subnet  netip.Prefix    // its subnet in the state; invalid: none recorded
	node    *corev1.Node    // its Node; nil: none, or nodes unknown
	inState bool            // listed in pod-subnets.yaml: freed at the end
}

// removedWorkers lists the workers to remove, by name. nodesKnown says
// whether the Nodes could be read (a dry run before the apiserver answers
// cannot): without them, every removal plans its drain and deletion.
func (c *Cluster) removedWorkers(st *podnet.State, stale []corev1.Node) []removedWorker {
	byName := map[string]*removedWorker{}
	var names []string
	get := func(name string) *removedWorker {
		if r, ok := byName[name]; ok {
			return r
		}
		r := &removedWorker{name: name}
		byName[name] = r
		names = append(names, name)
		return r
	}
	if st != nil {
		for _, n := range st.Removed(c.Inv) {
			r := get(n)
			r.subnet, r.inState = st.Subnets[n], true
			if h, ok := st.Hosts[n]; ok {
				ih := h.InventoryHost(n)
				r.host, r.from = &ih, "as recorded in "+c.opt.State.PodSubnets()
			}
		}
	}
	for i := range stale {
		r := get(stale[i].Name)
		r.node = &stale[i]
		if r.host == nil {
			// Not recorded (a state from before hardway kept hosts): the
			// Node's own address, with the inventory's ssh settings.
			for _, a := range stale[i].Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					r.host, r.from = &inventory.Host{Name: r.name, Address: a.Address}, "the Node's InternalIP"
					break
				}
			}
		}
	}
	slices.Sort(names)
	out := make([]removedWorker, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out
}

// removeActions are the actions that take r out of the cluster before the
// other workers are touched: drain, stop its services, delete its Node.
// The subnet is freed by freeAction, after the routes to it are gone.
func (c *Cluster) removeActions(r removedWorker, nodesKnown bool) []plan.Action {
	name := r.name
	var out []plan.Action
	hasNode := r.node != nil || !nodesKnown
	if hasNode {
		desc := fmt.Sprintf("cordon and drain Node %s (not in the inventory", name)
		if r.node != nil && r.node.Spec.PodCIDR != "" {
			desc += "; pod subnet " + r.node.Spec.PodCIDR
		}
		desc += fmt.Sprintf("): evict its pods (PodDisruptionBudgets respected, at most %s; DaemonSet and static pods stay)", drainTimeout)
		if !nodesKnown {
			desc += " (if registered: the apiserver does not answer yet)"
		}
		out = append(out, plan.Action{Kind: plan.Membership, Desc: desc, Do: func(ctx context.Context) error {
			cs, err := c.kubeClient()
			if err != nil {
				return err
			}
			if err := kube.DrainForRemoval(ctx, cs, name, drainTimeout); err != nil {
				return usererr.New(err, "fix what keeps the pods (a PodDisruptionBudget, say) and run 'hardway up' again, or remove the node by hand: "+kube.RemoveCommand(name))
			}
			return nil
		}})
	}
	if r.host != nil {
		h := *r.host
		out = append(out, plan.Action{Host: name, Kind: plan.Membership,
			Desc: fmt.Sprintf("stop and disable kubelet and kube-proxy on %s (%s, %s) so that it cannot register its Node again; "+
				"remove its pods, its pod network (%s, the IPAM state, its routes and egress rule), its credentials; stop containerd "+
				"(a host that does not answer is skipped with a warning)", name, h.Address, r.from, cniBridgeName),
			Do: func(ctx context.Context) error { return c.decommission(ctx, h) }})
	}
	if hasNode {
		out = append(out, plan.Action{Kind: plan.Membership, Desc: fmt.Sprintf("delete Node %s", name), Do: func(ctx context.Context) error {
			cs, err := c.kubeClient()
			if err != nil {
				return err
			}
			return kube.DeleteNode(ctx, cs, name)
		}})
	}
	return out
}

// freeAction drops the removed workers from pod-subnets.yaml: their subnets
// are free for new workers. It runs last, once the Nodes are gone and the
// other hosts' routes to them were removed.
func (c *Cluster) freeAction(rs []removedWorker) *plan.Action {
	var names, what []string
	for _, r := range rs {
		if !r.inState {
			continue
		}
		names = append(names, r.name)
		if r.subnet.IsValid() {
			what = append(what, fmt.Sprintf("%s (%s)", r.name, r.subnet))
		} else {
			what = append(what, r.name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	path := c.opt.State.PodSubnets()
	return &plan.Action{Kind: plan.Membership, Desc: fmt.Sprintf("free the pod subnets of removed workers in %s: %s", path, strings.Join(what, ", ")),
		Do: func(context.Context) error {
			// Read again: the render step may have written it in this run.
			st, err := podnet.LoadState(path)
			if err != nil {
				return err
			}
			return podnet.SaveState(path, st.Without(names...))
		}}
}

// cniBridgeName is the bridge of hardway's CNI config (units' conflist),
// and cniNetDir the host-local IPAM state of its network.
const (
	cniBridgeName = units.CNIBridge
	cniNetDir     = units.CNINetworkDir
)

// decommissionScript stops what hardway started on a removed worker: first
// kubelet and kube-proxy (disabled, so a reboot does not bring them back),
// proven stopped; then the pods left (DaemonSet and static ones), kube-proxy's
// rules, every other worker service, the routes unit (it removes its routes
// and the egress rule), the runtime, the bridge and the IPAM state — a host added back later starts
// clean instead of failing on its old bridge address — and the node's
// credentials, which the cluster still trusts.
func decommissionScript() string {
	var b strings.Builder
	b.WriteString("set -u\n")
	for _, u := range []string{Kubelet, KubeProxy} {
		fmt.Fprintf(&b, "systemctl disable --now %s.service >/dev/null 2>&1 || systemctl stop %s.service >/dev/null 2>&1 || true\n", u, u)
	}
	fmt.Fprintf(&b, "if systemctl is-active -q %s.service; then echo 'kubelet is still active' >&2; exit 1; fi\n", Kubelet)
	fmt.Fprintf(&b, "if systemctl is-active -q %s.service; then %s rmp --all --force >/dev/null 2>&1 || true; fi\n", Containerd, crictlCmd)
	fmt.Fprintf(&b, "if [ -x %s ]; then %s --cleanup >/dev/null 2>&1 || true; fi\n", units.BinPath(KubeProxy), units.BinPath(KubeProxy))
	// Every other service a worker runs (from the component table, so one
	// added later goes too), then the routes and the runtime.
	var rest []string
	for _, u := range units.Names(units.Worker) {
		if u != Kubelet && u != KubeProxy && u != Containerd {
			rest = append(rest, u)
		}
	}
	for _, u := range append(rest, PodRoutes, Containerd) {
		fmt.Fprintf(&b, "systemctl disable --now %s.service >/dev/null 2>&1 || true\n", u)
	}
	fmt.Fprintf(&b, "ip link delete %s >/dev/null 2>&1 || true\n", cniBridgeName)
	fmt.Fprintf(&b, "rm -rf %s\n", cniNetDir)
	fmt.Fprintf(&b, "rm -f %s %s %s\n", units.KubeletKey, units.KubeletKubeconfig, units.KubeProxyKubeconfig)
	return b.String()
}

// decommission runs decommissionScript on h, a host no longer in the
// inventory. A host that does not answer is no error: up goes on and says
// what that host will do if it comes back.
func (c *Cluster) decommission(ctx context.Context, h inventory.Host) error {
	cctx, cancel := context.WithTimeout(ctx, removedConnectTimeout)
	sh, err := c.opt.Connect(cctx, c.remoteConfig(h))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, remote.ErrHostKeyMismatch) {
			// A changed host key is not "gone": never talk to it.
			return err
		}
		c.logf("[workers] warning: %s (%s) does not answer (%v): its kubelet and kube-proxy were not stopped. "+
			"If it comes back, its kubelet registers Node %s again: stop them there (systemctl disable --now kubelet kube-proxy), then run 'hardway up' (verify names the Node)",
			h.Name, h.Address, err, h.Name)
		return nil
	}
	defer func() {
		if cl, ok := sh.(remote.Closer); ok {
			cl.Close()
		}
	}()
	if _, err := sh.Run(ctx, decommissionScript(), nil); err != nil {
		return usererr.New(fmt.Errorf("%s: stop the removed worker: %w", h.Name, err),
			fmt.Sprintf("on %s: systemctl disable --now kubelet kube-proxy; then run 'hardway up' again", h.Name))
	}
	c.logf("[workers] %s: kubelet and kube-proxy stopped and disabled, pods and pod network removed, containerd stopped", h.Name)
	return nil
}
