package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// WorkerChecks are verify's checks of the hosts in workers: per worker its
// services, the runtime over CRI, its Node and pod subnet, its files; and the
// pod routes on every host.
func (c *Cluster) WorkerChecks() []verify.Check {
	if len(c.Inv.Workers) == 0 {
		return nil
	}
	var checks []verify.Check
	for _, w := range c.Inv.Workers {
		checks = append(checks,
			verify.Check{Name: "worker", Doc: "units active, containerd answers over CRI, Node Ready (or why not), pod subnet as allocated", Run: func(ctx context.Context) []verify.Result { return c.checkWorker(ctx, w) }},
			verify.Check{Name: "host/files", Doc: "binaries match the lock, files match the rendered ones (every byte read)", Run: func(ctx context.Context) []verify.Result { return c.checkHostFiles(ctx, w) }})
	}
	if c.cniBridge() {
		checks = append(checks, verify.Check{Name: "routes", Doc: "a route to every other worker's pod subnet on every host", Run: c.checkRoutes})
	}
	return checks
}

func (c *Cluster) checkWorker(ctx context.Context, w inventory.Host) []verify.Result {
	res := func(check string, r verify.Result) verify.Result { r.Check = check; r.Host = w.Name; return r }
	sh, err := c.Host(ctx, w.Name)
	if err != nil {
		return []verify.Result{res("host/ssh", verify.Failf(w.Name, hintOf(err, "check the address, the SSH key and known_hosts"), "%v", err))}
	}
	out := []verify.Result{res("host/ssh", verify.OKf(w.Name, "connected, host key verified"))}

	// What the host says (its units, the runtime over CRI, the CNI config)
	// is one command; the Node (the API) and the load balancer (tunnels
	// through the worker) are asked at the same time, not after it.
	comps := c.hostComponents(w.Name)
	var (
		wg           sync.WaitGroup
		node         *corev1.Node
		nodeErr      error
		lbRes        []verify.Result
		hostOut      []byte
		hostErr      error
		lb           = c.Inv.NodeLocalLB()
		lbCtx, lbEnd = context.WithCancel(ctx)
	)
	defer lbEnd()
	wg.Add(2)
	go func() {
		defer wg.Done()
		hostOut, hostErr = sh.Run(ctx, unitsScript(comps)+captured("cri", crictlCmd+" info")+captured("cni", "cat "+cniConfList), nil)
		if hostErr != nil || !parseSnapshot(beforeCaptured(string(hostOut))).Units[APIServerLB].Active {
			lbEnd() // its result is not used: the unit's state says it all
		}
	}()
	go func() {
		defer wg.Done()
		cs, err := c.kubeClient()
		if err != nil {
			nodeErr = err
			return
		}
		node, nodeErr = kube.GetNode(ctx, cs, w.Name)
	}()
	if lb {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lbRes = c.checkAPIServerLB(lbCtx, w, true)
		}()
	}
	wg.Wait()
	if hostErr != nil {
		return append(out, res(CheckWorkerUnits, verify.Failf(w.Name, timeoutHint(hostErr), "%v", hostErr)))
	}
	sn := parseSnapshot(beforeCaptured(string(hostOut)))
	for _, comp := range comps {
		st := sn.Units[comp]
		switch {
		case !st.Active:
			out = append(out, res(CheckWorkerUnits, verify.Failf(w.Name, fmt.Sprintf("see 'journalctl -u %s' on %s; 'hardway up' starts it", comp, w.Name), "%s is not active", comp)))
		case !st.Enabled:
			out = append(out, res(CheckWorkerUnits, verify.Failf(w.Name, "'hardway up' enables it, so it comes back after a reboot", "%s is running but not enabled", comp)))
		default:
			out = append(out, res(CheckWorkerUnits, verify.OKf(w.Name, "%s enabled and active since %s", comp, st.ActiveEnter)))
		}
	}

	if lb {
		if sn.Units[APIServerLB].Active {
			out = append(out, lbRes...)
		} else {
			out = append(out, c.checkAPIServerLB(ctx, w, false)...)
		}
	}

	// The runtime, asked the way the kubelet asks it.
	if info, err := capturedResult(string(hostOut), "cri", w.Name, crictlCmd+" info"); err != nil {
		out = append(out, res("worker/cri", verify.Failf(w.Name, fmt.Sprintf("see 'journalctl -u containerd' on %s", w.Name), "containerd does not answer over CRI: %v", err)))
	} else if d, err := kube.DiagnoseCRI(info, w.Name); err != nil {
		out = append(out, res("worker/cri", verify.Failf(w.Name, "", "%v", err)))
	} else if d != nil {
		out = append(out, res("worker/cri", verify.Failf(w.Name, d.Hint, "%s", d)))
	} else {
		out = append(out, res("worker/cri", verify.OKf(w.Name, "containerd answers over CRI: runtime and network ready")))
	}

	if nodeErr != nil {
		return append(out, res("worker/node", verify.Failf(w.Name, "see the apiserver checks", "%v", nodeErr)))
	}
	if ok, _ := kube.NodeReady(orEmpty(node)); ok && node != nil {
		out = append(out, res("worker/node", verify.OKf(w.Name, "Node Ready (kubelet %s)", node.Status.NodeInfo.KubeletVersion)))
	} else {
		d := c.diagnoseWorker(ctx, w.Name, node)
		out = append(out, res("worker/node", verify.Failf(w.Name, d.Hint, "Node not Ready: %s", d)))
	}

	if !c.cniBridge() {
		return out // your CNI chooses the pod subnets
	}
	subnets, err := c.podSubnets()
	if err != nil {
		return append(out, res("worker/podcidr", verify.Failf(w.Name, "", "%v", err)))
	}
	want := subnets[w.Name].String()
	var bad []string
	if node != nil && node.Spec.PodCIDR != want {
		got := node.Spec.PodCIDR
		if got == "" {
			got = "none"
		}
		bad = append(bad, fmt.Sprintf("Node spec.podCIDR is %s", got))
	}
	{
		conf, err := capturedResult(string(hostOut), "cni", w.Name, "cat "+cniConfList)
		switch subs, perr := cniSubnets(conf); {
		case err != nil:
			bad = append(bad, fmt.Sprintf("no CNI config %s", cniConfList))
		case perr != nil:
			bad = append(bad, perr.Error())
		case !slices.Equal(subs, []string{want}):
			bad = append(bad, fmt.Sprintf("%s uses %s", cniConfList, strings.Join(subs, ", ")))
		}
	}
	if len(bad) > 0 {
		hint := "'hardway up' writes the CNI config and registers the Node with the allocated subnet"
		if node != nil && node.Spec.PodCIDR != "" && node.Spec.PodCIDR != want {
			hint = fmt.Sprintf("spec.podCIDR is immutable: 'kubectl delete node %s', then 'hardway up' registers it again with %s", usererr.Quote(w.Name), want)
		}
		out = append(out, res("worker/podcidr", verify.Failf(w.Name, hint, "allocated %s, but %s", want, strings.Join(bad, "; "))))
	} else {
		out = append(out, res("worker/podcidr", verify.OKf(w.Name, "%s in the state, the Node and the CNI config", want)))
	}
	return out
}

// cniSubnets are the host-local subnets of a CNI conflist (or single config).
func cniSubnets(conf []byte) ([]string, error) {
	type ipam struct {
		Subnet string `json:"subnet"`
		Ranges [][]struct {
			Subnet string `json:"subnet"`
		} `json:"ranges"`
	}
	type plugin struct {
		Type string `json:"type"`
		IPAM *ipam  `json:"ipam"`
	}
	var v struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", cniConfList, err)
	}
	var out []string
	for _, p := range append(v.Plugins, v.plugin) {
		if p.IPAM == nil {
			continue
		}
		if p.IPAM.Subnet != "" {
			out = append(out, p.IPAM.Subnet)
		}
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				out = append(out, r.Subnet)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no ipam subnet", cniConfList)
	}
	return out, nil
}

// route is one line of 'ip -4 route show': destination, gateway and the
// protocol that added it ("70": hardway's pod routes).
type route struct{ Dst, Via, Proto string }

func parseRoutes(out string) []route {
	var rs []route
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		r := route{Dst: f[0]}
		if i := slices.Index(f, "via"); i >= 0 && i+1 < len(f) {
			r.Via = f[i+1]
		}
		if i := slices.Index(f, "proto"); i >= 0 && i+1 < len(f) {
			r.Proto = f[i+1]
		}
		rs = append(rs, r)
	}
	return rs
}

// missingRoutes lists the pod subnets of other workers that host has no
// route to via that worker's address.
func (c *Cluster) missingRoutes(host string, rs []route, subnets map[string]netip.Prefix) []string {
	var missing []string
	for _, w := range c.Inv.Workers {
		if w.Name == host {
			continue
		}
		want := route{Dst: subnets[w.Name].String(), Via: w.IP()}
		if !slices.ContainsFunc(rs, func(r route) bool { return r.Dst == want.Dst && r.Via == want.Via }) {
			missing = append(missing, fmt.Sprintf("%s via %s (%s)", want.Dst, want.Via, w.Name))
		}
	}
	return missing
}

// staleRoutes lists hardway's pod routes on host (proto 70) that no worker
// of the inventory wants: left from a removed worker, or a moved one.
func (c *Cluster) staleRoutes(host string, rs []route, subnets map[string]netip.Prefix) []string {
	var stale []string
	for _, r := range rs {
		if r.Proto != units.PodRouteProto {
			continue
		}
		wanted := slices.ContainsFunc(c.Inv.Workers, func(w inventory.Host) bool {
			return w.Name != host && subnets[w.Name].String() == r.Dst && w.IP() == r.Via
		})
		if !wanted {
			stale = append(stale, fmt.Sprintf("%s via %s", r.Dst, r.Via))
		}
	}
	return stale
}

func (c *Cluster) checkRoutes(ctx context.Context) []verify.Result {
	subnets, err := c.podSubnets()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	hosts := c.Inv.Hosts()
	out := make([]verify.Result, len(hosts))
	_ = remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		i := indexOf(hosts, h.Name)
		r := func(x verify.Result) { x.Check, x.Host = "routes", h.Name; out[i] = x }
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			r(verify.Failf(h.Name, "see host/ssh", "%v", err))
			return nil
		}
		o, err := sh.Run(ctx, "ip -4 route show", nil)
		if err != nil {
			r(verify.Failf(h.Name, timeoutHint(err), "ip route: %v", err))
			return nil
		}
		if miss := c.missingRoutes(h.Name, parseRoutes(string(o)), subnets); len(miss) > 0 {
			r(verify.Failf(h.Name, fmt.Sprintf("'hardway up' starts %s.service, which adds them (and again at boot); see 'journalctl -u %s' on %s", PodRoutes, PodRoutes, h.Name),
				"no route to %s", strings.Join(miss, ", ")))
			return nil
		}
		if stale := c.staleRoutes(h.Name, parseRoutes(string(o)), subnets); len(stale) > 0 {
			r(verify.Failf(h.Name, fmt.Sprintf("'hardway up' restarts %s.service, which flushes hardway's routes and adds only the current ones (by hand: ip route del ROUTE on %s)", PodRoutes, h.Name),
				"route to no worker of the inventory (a removed worker's?): %s", strings.Join(stale, ", ")))
			return nil
		}
		r(verify.OKf(h.Name, "routes to the pod subnets of %d other worker(s)", len(c.Inv.Workers)-btoi(c.isWorker(h.Name))))
		return nil
	})
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkNodes is the cluster-wide view: NotReady nodes with the reason (the
// missing CNI config first among them), pods kept Pending by the not-ready
// taint, and Calico IPPools whose CIDR is not the inventory's podCIDR.
func (c *Cluster) checkNodes(ctx context.Context) []verify.Result {
	cs, err := c.kubeClient()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []verify.Result{verify.Failf("", "", "list nodes: %v", err)}
	}
	if len(nodes.Items) == 0 {
		if len(c.Inv.Workers) > 0 {
			return []verify.Result{verify.Failf("", "'hardway up' registers the workers and starts their kubelets", "no nodes registered, but the inventory has %d worker(s)", len(c.Inv.Workers))}
		}
		return []verify.Result{verify.OKf("", "no nodes registered yet (a control plane without workers)")}
	}
	var out []verify.Result
	for _, p := range kube.NodeProblems(nodes.Items) {
		out = append(out, verify.Result{Check: "nodes", Host: p.Node, Status: verify.Fail, Message: p.Reason, Hint: p.Hint})
	}
	var removed []string
	if st, err := podnet.LoadState(c.opt.State.PodSubnets()); err == nil {
		removed = st.Removed(c.Inv)
		for _, name := range removed {
			if !slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == name }) {
				out = append(out, verify.Result{Check: "nodes/stale", Host: name, Status: verify.Warn,
					Message: fmt.Sprintf("worker %s left the inventory, and 'hardway up' has not finished removing it (its pod subnet %s stays reserved in %s)", name, st.Subnets[name], c.opt.State.PodSubnets()),
					Hint:    "run 'hardway up': it stops the host's kubelet if it answers and frees the subnet"})
			}
		}
	}
	for _, n := range kube.StaleNodes(nodes.Items, c.hostNames()) {
		if c.hardwayNode(n, removed) {
			what := "a removed worker"
			if n.Spec.PodCIDR != "" {
				what += ", pod subnet " + n.Spec.PodCIDR
			}
			out = append(out, verify.Result{Check: "nodes/stale", Host: n.Name, Status: verify.Fail,
				Message: fmt.Sprintf("Node %s is not in the inventory (%s)", n.Name, what),
				Hint:    "'hardway up' drains it, stops its kubelet and deletes it; by hand: " + kube.RemoveCommand(n.Name)})
		} else {
			out = append(out, verify.Result{Check: "nodes/stale", Host: n.Name, Status: verify.Warn,
				Message: fmt.Sprintf("Node %s is not in the inventory (joined by other means?)", n.Name),
				Hint:    "add it to workers: or remove it: " + kube.RemoveCommand(n.Name)})
		}
	}
	if names, resource, found, err := kube.CalicoNodeNames(ctx, cs); err != nil {
		out = append(out, verify.Result{Check: "nodes/calico", Status: verify.Warn, Message: err.Error()})
	} else if found {
		have := map[string]bool{}
		for _, n := range nodes.Items {
			have[n.Name] = true
		}
		for _, name := range names {
			if !have[name] {
				out = append(out, verify.Result{Check: "nodes/calico", Host: name, Status: verify.Fail,
					Message: fmt.Sprintf("Calico node %s has no Node: a new node with its address fails with \"already using the IPv4 address\"", name),
					Hint:    fmt.Sprintf("kubectl delete %s %s (or calicoctl delete node %s); its IPAM blocks are released with it", resource, usererr.Quote(name), usererr.Quote(name))})
			}
		}
	}
	if pods, err := kube.PendingPods(ctx, cs); err != nil {
		out = append(out, verify.Failf("", "", "%v", err))
	} else if p := kube.PendingBehindTaint(pods, nodes.Items); p != nil {
		out = append(out, verify.Result{Check: "nodes/pending", Status: verify.Fail, Message: p.Reason, Hint: p.Hint})
	}
	out = append(out, c.checkIPPools(ctx, cs)...)
	for i := range out {
		if out[i].Check == "" {
			out[i].Check = "nodes"
		}
	}
	if len(out) == 0 {
		out = append(out, verify.OKf("", "%d nodes Ready", len(nodes.Items)))
	}
	return out
}

// checkIPPools compares Calico's IPPools, where its CRDs are installed, with
// the inventory's networks.
func (c *Cluster) checkIPPools(ctx context.Context, cs kubernetes.Interface) []verify.Result {
	body, found, err := kube.CalicoIPPools(ctx, cs)
	if err != nil {
		return []verify.Result{{Check: "nodes/ippools", Status: verify.Warn, Message: err.Error()}}
	}
	if !found {
		return nil
	}
	hosts := map[string]netip.Addr{}
	for _, h := range c.Inv.Hosts() {
		if a, err := netip.ParseAddr(h.IP()); err == nil {
			hosts[h.Name] = a
		}
	}
	pod, _ := netip.ParsePrefix(c.Inv.Network.PodCIDR)
	svc, _ := netip.ParsePrefix(c.Inv.Network.ServiceCIDR)
	ps, err := kube.IPPoolProblems(body, pod.Masked(), svc.Masked(), hosts)
	if err != nil {
		return []verify.Result{{Check: "nodes/ippools", Status: verify.Warn, Message: err.Error()}}
	}
	var out []verify.Result
	for _, p := range ps {
		out = append(out, verify.Result{Check: "nodes/ippools", Status: verify.Fail, Message: p.Reason, Hint: p.Hint})
	}
	if len(out) == 0 {
		out = append(out, verify.Result{Check: "nodes/ippools", Status: verify.Pass, Message: "Calico IPPools inside network.podCIDR " + c.Inv.Network.PodCIDR})
	}
	return out
}
