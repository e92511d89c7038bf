package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// StepWorkers is the name of the workers step (--only, --skip, the daemon's
// repairs).
const StepWorkers = "workers"

// CheckWorkerUnits is verify's check of a worker's services (the daemon
// repairs a worker that fails it).
const CheckWorkerUnits = "worker/units"

// WorkersStep is `hardway up`'s step for the hosts in workers: (and the pod
// routes on every host).
func (c *Cluster) WorkersStep() plan.Step {
	return plan.Step{Name: StepWorkers,
		Doc: "on every host in workers: containerd, the image tarballs it lacks (compared by image ID), the Node registered with its pod subnet, " +
			"kubelet, kube-proxy and the pod routes (also on the control-plane hosts); new workers start together, running ones restart one at a time; " +
			"each Node is waited for until Ready, and a timeout says why (runtime down, CNI config missing, certificate refused); " +
			"a worker removed from the inventory is drained, stopped (kubelet, kube-proxy, its pods and pod network), its Node deleted, its routes removed everywhere and its pod subnet freed",
		Plan: c.planWorkers}
}

// unitSnapshot reads the state of comps on one host and the restart markers,
// in one command; the restarts earlier steps planned count as pending. The
// extra script's captured sections (see captured) ride along in the same
// command, for snapshot.read.
func (c *Cluster) unitSnapshot(ctx context.Context, sh remote.Host, comps []string, earlier plan.Planned, extra ...string) (*snapshot, error) {
	var script strings.Builder
	script.WriteString(unitsScript(comps))
	fmt.Fprintf(&script, "echo '@restart'; ls -1 %s 2>/dev/null || true\n", restartDir)
	for _, e := range extra {
		script.WriteString(e)
	}
	out, err := sh.Run(ctx, script.String(), nil)
	if err != nil {
		return nil, err
	}
	sn := parseSnapshot(beforeCaptured(string(out)))
	sn.out = string(out)
	for comp := range earlier.Restarts(sh.Name()) {
		sn.Pending[comp] = true
	}
	return sn, nil
}

// kubeClient is the admin client through the control-plane host apiHost
// picked.
func (c *Cluster) kubeClient() (kubernetes.Interface, error) {
	return c.Kube(c.apiHost())
}

// apiProbeTimeout bounds how long one control-plane host may take to answer
// before the next one is tried: an SSH connect to a powered-off host would
// otherwise take the whole connect timeout.
const apiProbeTimeout = 5 * time.Second

// apiHost is the control-plane host whose apiserver serves the cluster-wide
// API calls (Nodes, RBAC, DNS, the encryption probe): one that answers
// /readyz, picked once per run. With a controller powered off, verify and
// up still reach the API through another one; the per-host checks still
// report the lost one.
//
// All hosts are asked at once and the first ready answer wins: asked one
// after another, a powered-off first host and two slow ones (a loaded
// machine) used up every probe's timeout, and the pick fell back to the
// powered-off host. When none is ready in time, it is the first host that
// took an SSH connection (its apiserver may only be slow), else the first
// listed, and the callers' errors say why; that pick is not kept.
func (c *Cluster) apiHost() inventory.Host {
	// One pick at a time: verify's checks all ask at once.
	c.apiPickMu.Lock()
	defer c.apiPickMu.Unlock()
	c.kubeMu.Lock()
	picked := c.apiPicked
	c.kubeMu.Unlock()
	if picked != nil {
		return *picked
	}
	type answer struct {
		i            int
		ready, dials bool
	}
	cps := c.Inv.ControlPlane
	answers := make(chan answer, len(cps))
	for i, h := range cps {
		go func() {
			ready, dials := c.apiReady(h)
			answers <- answer{i, ready, dials}
		}()
	}
	reached := -1
	for range cps {
		a := <-answers
		if a.ready {
			pick := cps[a.i]
			c.kubeMu.Lock()
			c.apiPicked = &pick
			c.kubeMu.Unlock()
			return pick
		}
		if a.dials && (reached < 0 || a.i < reached) {
			reached = a.i
		}
	}
	if reached >= 0 {
		return cps[reached]
	}
	return cps[0]
}

// apiReady asks h's apiserver for /readyz through h's SSH connection, and
// says whether that connection could be made.
func (c *Cluster) apiReady(h inventory.Host) (ready, dials bool) {
	cs, err := c.Kube(h)
	if err != nil {
		return false, false
	}
	rc := cs.Discovery().RESTClient()
	if rc == nil {
		return true, true // a fake client in unit tests: nothing to ask
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiProbeTimeout)
	defer cancel()
	if _, err := c.Host(ctx, h.Name); err != nil {
		return false, false
	}
	return rc.Get().AbsPath("/readyz").Do(ctx).Error() == nil, true
}

func (c *Cluster) planWorkers(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}
	c.planSet(ctx) // the images' IDs
	_, st, _, err := podnet.ForState(c.opt.State, c.Inv)
	if err != nil {
		return nil, err
	}
	subnets := st.Subnets
	// The Nodes as the apiserver has them, read while the hosts are. A dry
	// run before the first up has no apiserver (or no admin kubeconfig)
	// yet: the registration is then planned, and decided when it runs.
	var nodes map[string]*corev1.Node
	var stale []corev1.Node
	nodesRead := make(chan struct{})
	go func() {
		defer close(nodesRead)
		// A control plane that never had workers: no Node to read.
		hadWorkers := len(c.Inv.Workers) > 0 || len(st.Removed(c.Inv)) > 0
		if cs, err := c.kubeClient(); err == nil && hadWorkers {
			var err error
			nodes, stale, err = c.workerNodes(ctx, cs, st.Removed(c.Inv))
			if err != nil {
				nodes, stale = nil, nil
			}
		}
	}()
	hosts := c.Inv.Hosts()
	snaps := make([]*snapshot, len(hosts))
	err = remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		// The pod-routes unit everywhere: a host that must no longer have
		// it (no worker left, or cni none) has it stopped and removed.
		comps := c.hostComponents(h.Name)
		if !slices.Contains(comps, PodRoutes) {
			comps = append(comps, PodRoutes)
		}
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return err
		}
		// A worker's other reads (planWorker) ride along: one round trip.
		var extra []string
		if c.isWorker(h.Name) {
			extra = append(extra, workerReadsScript)
		}
		sn, err := c.unitSnapshot(ctx, sh, comps, earlier, extra...)
		snaps[indexOf(hosts, h.Name)] = sn
		return err
	})
	<-nodesRead
	if err != nil {
		return nil, err
	}
	removed := c.removedWorkers(st, stale)

	// Workers removed from the inventory go first: drained while the
	// others still run their pods' new homes, stopped, their Nodes deleted.
	var actions []plan.Action
	for _, r := range removed {
		actions = append(actions, c.removeActions(r, nodes != nil)...)
	}
	// Each worker's plan asks its host (runtime, images, files): all at
	// once, so that twelve hosts take the time of one.
	type workerPlan struct {
		as        []plan.Action
		restarted bool
	}
	plans := make([]workerPlan, len(c.Inv.Workers))
	err = remote.ForEach(ctx, c.Inv.Workers, hostsAtOnce, func(ctx context.Context, w inventory.Host) error {
		i := indexOf(c.Inv.Workers, w.Name)
		as, restarted, err := c.planWorker(ctx, w, snaps[indexOf(hosts, w.Name)], subnets[w.Name].String(), nodes)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		plans[i] = workerPlan{as, restarted}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var fresh, rolling []plan.Action
	var freshNames []string
	for i, w := range c.Inv.Workers {
		sn := snaps[indexOf(hosts, w.Name)]
		as, restarted := plans[i].as, plans[i].restarted
		switch {
		case isFresh(sn):
			// Nothing runs there yet: no pod can be disturbed, so new
			// workers start together (Parallel: one host's actions in
			// order, the hosts at once) and are waited for together.
			for i := range as {
				as[i].Parallel = true
			}
			fresh = append(fresh, as...)
			freshNames = append(freshNames, w.Name)
		case restarted:
			// A running worker: restart it, and wait for its Node to be
			// Ready again before the next one is touched.
			rolling = append(rolling, as...)
			rolling = append(rolling, c.waitReadyAction(w.Name))
		default:
			rolling = append(rolling, as...)
		}
	}
	actions = append(actions, fresh...)
	if len(freshNames) > 0 {
		actions = append(actions, c.waitReadyAction(freshNames...))
	}
	actions = append(actions, rolling...)
	for _, h := range c.Inv.ControlPlane {
		sn := snaps[indexOf(hosts, h.Name)]
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		if !c.hasRoutes(h.Name) {
			continue
		}
		if a := c.serviceAction(h, sh, sn, PodRoutes, serviceOpts{}); a != nil {
			// A start (the unit is not running: no routes to keep) goes on
			// every controller at once; a restart rolls host by host.
			a.Parallel = a.Kind != plan.Restart
			actions = append(actions, *a)
		}
	}
	// Hosts that must no longer route pods (the last worker left, or
	// network.cni none): the unit goes, and with it its routes.
	for _, h := range hosts {
		if c.hasRoutes(h.Name) {
			continue
		}
		sh, err := c.Host(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		if a := c.removeRoutesUnitAction(h.Name, sh, snaps[indexOf(hosts, h.Name)]); a != nil {
			actions = append(actions, *a)
		}
	}
	// Last: the removed workers' subnets are free once no host routes to
	// them any more (the pod-routes restarts above).
	if a := c.freeAction(removed); a != nil {
		actions = append(actions, *a)
	}
	return actions, nil
}

// removeRoutesUnitAction stops, disables and deletes the pod-routes unit on
// a host that must not have it (stopping it removes exactly its routes and
// the egress rule), or nil when it is not there.
func (c *Cluster) removeRoutesUnitAction(host string, sh remote.Host, sn *snapshot) *plan.Action {
	st := sn.Units[PodRoutes]
	if !st.Active && !st.Enabled && st.State != "failed" {
		return nil
	}
	unit := PodRoutes + ".service"
	path := units.UnitPath(PodRoutes)
	return &plan.Action{Host: host, Kind: plan.Write,
		Desc: fmt.Sprintf("remove %s (no worker to route to: stopping it removes its routes), disable it, delete %s", unit, path),
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, fmt.Sprintf("systemctl disable --now %s && rm -f %s && systemctl daemon-reload && { systemctl reset-failed %s 2>/dev/null || true; }", remote.Quote(unit), remote.Quote(path), remote.Quote(unit)), nil)
			return withJournal(ctx, sh, unit, err)
		}}
}

// isFresh is a worker where no worker service runs yet.
func isFresh(sn *snapshot) bool {
	for _, comp := range workerComponents() {
		if sn.Units[comp].Active {
			return false
		}
	}
	return true
}

// planWorker plans one worker: containerd, the images it lacks, its Node
// object with hardway's pod subnet, the kubelet, kube-proxy and the pod
// routes. restarted says whether a service is started or restarted.
func (c *Cluster) planWorker(ctx context.Context, w inventory.Host, sn *snapshot, subnet string, nodes map[string]*corev1.Node) ([]plan.Action, bool, error) {
	sh, err := c.Host(ctx, w.Name)
	if err != nil {
		return nil, false, err
	}
	var actions []plan.Action
	restarted := false
	add := func(comp string) error {
		if a := c.serviceAction(w, sh, sn, comp, serviceOpts{}); a != nil {
			// A running worker whose services start or restart is waited
			// for (a kubelet found stopped, too: up then says whether it
			// came back).
			restarted = restarted || a.Kind == plan.Restart || a.Kind == plan.Start
			actions = append(actions, *a)
		}
		return nil
	}
	if err := add(Containerd); err != nil {
		return nil, false, err
	}
	if c.cniBridge() {
		a, err := c.oldLoopbackAction(ctx, sh, sn, w.Name)
		if err != nil {
			return nil, false, err
		}
		if a != nil {
			actions = append(actions, *a)
		}
	}
	if a, err := c.oldRegistriesAction(ctx, sh, sn, w.Name); err != nil {
		return nil, false, err
	} else if a != nil {
		actions = append(actions, *a)
	}
	// Ask containerd for its images only when it keeps running through
	// this run; otherwise every image is imported after it starts.
	runtimeUp := sn.Units[Containerd].Active && !sn.Pending[Containerd] && !sn.Units[Containerd].NeedReload
	imgs, err := c.planImages(ctx, sh, sn, c.manifest(w.Name), runtimeUp)
	if err != nil {
		return nil, false, err
	}
	actions = append(actions, imgs...)

	register := func(ctx context.Context) error {
		cs, err := c.kubeClient()
		if err != nil {
			return err
		}
		return kube.RegisterNode(ctx, cs, w.Name, subnet)
	}
	node := nodes[w.Name]
	switch {
	case !c.cniBridge():
		// network.cni none: the kubelet registers the Node itself and the
		// controller-manager (or your CNI) gives it a subnet.
	case nodes == nil:
		actions = append(actions, plan.Action{Host: w.Name, Kind: plan.Apply, Desc: fmt.Sprintf("register Node %s with spec.podCIDR %s (unless registered: the apiserver does not answer yet)", w.Name, subnet), Do: register})
	case node == nil:
		actions = append(actions, plan.Action{Host: w.Name, Kind: plan.Apply, Desc: fmt.Sprintf("register Node %s with spec.podCIDR %s", w.Name, subnet), Do: register})
	case node.Spec.PodCIDR == "":
		actions = append(actions, plan.Action{Host: w.Name, Kind: plan.Apply, Desc: fmt.Sprintf("set spec.podCIDR %s on Node %s", subnet, w.Name), Do: register})
	case node.Spec.PodCIDR != subnet:
		return nil, false, kube.PodCIDRConflict(w.Name, node.Spec.PodCIDR, subnet)
	}
	for _, comp := range c.hostComponents(w.Name)[1:] {
		if comp == APIServerLB {
			// Before the kubelet starts: the load balancer answers and has
			// a healthy apiserver for its first connection.
			if a := c.serviceAction(w, sh, sn, comp, serviceOpts{wait: func(ctx context.Context) error { return c.lbReady(ctx, w.Name) }}); a != nil {
				restarted = restarted || a.Kind == plan.Restart || a.Kind == plan.Start
				actions = append(actions, *a)
			}
			continue
		}
		if err := add(comp); err != nil {
			return nil, false, err
		}
	}
	return actions, restarted, nil
}

// The reads of a worker's plan (planWorker), run with its unit snapshot:
// the old loopback config, hardway's files in containerd's hosts directory
// (registries.go), and containerd's images when it runs (asked only then:
// a stopped containerd has nothing to list, and its plan imports every
// image).
var (
	readLoopbackCmd   = "cat " + oldLoopbackConf + " 2>/dev/null || true"
	readImagesCmd     = crictlCmd + " images -o json"
	workerReadsScript = captured("loopback", readLoopbackCmd) + captured("registries", readRegistryFilesCmd) +
		"if systemctl is-active --quiet " + Containerd + ".service; then\n" + captured("images", readImagesCmd) + "fi\n"
)

// oldLoopbackConf is the loopback CNI config earlier hardway versions wrote
// (the tutorial's). containerd falls back to it when the bridge config is
// missing and reports the network ready, with pods that have only lo; the
// CRI sets lo up with the loopback plugin itself, so hardway removes it.
const oldLoopbackConf = "/etc/cni/net.d/99-loopback.conf"

// oldLoopbackAction plans the removal of oldLoopbackConf when it is the one
// hardway wrote (a loopback network named lo); any other file there is
// left alone. Reading it is the plan; rm is the action.
func (c *Cluster) oldLoopbackAction(ctx context.Context, sh remote.Host, sn *snapshot, host string) (*plan.Action, error) {
	out, err := sn.read(ctx, sh, "loopback", readLoopbackCmd)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", oldLoopbackConf, err)
	}
	var conf struct{ Name, Type string }
	if json.Unmarshal(out, &conf) != nil || conf.Name != "lo" || conf.Type != "loopback" {
		return nil, nil
	}
	return &plan.Action{Host: host, Kind: plan.Write,
		Desc: "remove " + oldLoopbackConf + " (written by an earlier hardway: containerd would fall back to it and hide a missing bridge config)",
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, "rm -f "+oldLoopbackConf, nil)
			return err
		}}, nil
}

// workerNodes reads the Node of every worker (absent: not registered), and
// the Nodes of workers removed from the inventory: listed in removed (the
// state's record), or not a host of the inventory with a pod subnet from
// network.podCIDR (only hardway sets those with the bridge CNI), so a node
// joined by other means is never touched.
func (c *Cluster) workerNodes(ctx context.Context, cs kubernetes.Interface, removed []string) (map[string]*corev1.Node, []corev1.Node, error) {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list Nodes: %w", err)
	}
	out := map[string]*corev1.Node{}
	for i := range l.Items {
		if c.isWorker(l.Items[i].Name) {
			out[l.Items[i].Name] = &l.Items[i]
		}
	}
	var stale []corev1.Node
	for _, n := range kube.StaleNodes(l.Items, c.hostNames()) {
		if c.hardwayNode(n, removed) {
			stale = append(stale, n)
		}
	}
	return out, stale, nil
}

// hardwayNode says whether a Node not in the inventory is a worker hardway
// set up: recorded in the state, or with a hardway pod subnet.
func (c *Cluster) hardwayNode(n corev1.Node, removed []string) bool {
	return slices.Contains(removed, n.Name) || c.cniBridge() && kube.HardwayWorker(n, c.Inv.Network.PodNet())
}

func (c *Cluster) hostNames() []string {
	var out []string
	for _, h := range c.Inv.Hosts() {
		out = append(out, h.Name)
	}
	return out
}

// nodeTimeout bounds the wait for Nodes to become Ready.
func (c *Cluster) nodeTimeout() time.Duration { return max(c.opt.ServiceTimeout, 2*time.Minute) }

// waitReadyAction waits until every named Node is Ready.
// With network.cni none a Node is not Ready before your CNI runs: up then
// waits only until the kubelets registered them.
func (c *Cluster) waitReadyAction(names ...string) plan.Action {
	what := "Ready"
	if !c.cniBridge() {
		what = "registered (Ready once your CNI runs)"
	}
	desc := "wait for Node " + names[0] + " to be " + what
	if len(names) > 1 {
		desc = "wait for Nodes " + strings.Join(names, ", ") + " to be " + what
	}
	host := ""
	if len(names) == 1 {
		host = names[0]
	}
	return plan.Action{Host: host, Kind: plan.Wait, Desc: desc, Do: func(ctx context.Context) error { return c.waitNodesReady(ctx, names) }}
}

// waitNodesReady polls the Nodes until all are Ready; on timeout it asks
// each host that is not why, and says so with a hint.
func (c *Cluster) waitNodesReady(ctx context.Context, names []string) error {
	cs, err := c.kubeClient()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, c.nodeTimeout())
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	last := map[string]*corev1.Node{}
	firstRenew := map[string]string{} // freshHeartbeat: the Lease's renewTime first seen
	err = poll.Until(wctx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error {
		var notReady []string
		for _, n := range names {
			node, err := kube.GetNode(ctx, cs, n)
			if err != nil {
				return err
			}
			mu.Lock()
			last[n] = node
			mu.Unlock()
			if node == nil {
				notReady = append(notReady, n+" (not registered)")
			} else if ok, _ := kube.NodeReady(node); !ok && c.cniBridge() {
				notReady = append(notReady, n)
			} else if c.freshHeartbeat {
				renewed, err := kube.LeaseRenewTime(ctx, cs, n)
				if err != nil {
					return err
				}
				mu.Lock()
				first, seen := firstRenew[n]
				if !seen {
					firstRenew[n] = renewed
				}
				mu.Unlock()
				if !seen || renewed == first {
					notReady = append(notReady, n+" (no heartbeat since the restart yet)")
				}
			}
		}
		if len(notReady) > 0 {
			return fmt.Errorf("not Ready: %s", strings.Join(notReady, ", "))
		}
		return nil
	})
	if err == nil && !c.cniBridge() {
		c.logf("[workers] registered: %s (%s); NotReady until your CNI runs: 'hardway verify' says what it lacks", strings.Join(names, ", "), time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	if err == nil {
		c.logf("[workers] Ready: %s (%s)", strings.Join(names, ", "), time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	// Say why, per node, with what the host shows.
	var lines, hints []string
	for _, n := range names {
		node := last[n]
		if node != nil {
			if ok, _ := kube.NodeReady(node); ok {
				continue
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		d := c.diagnoseWorker(dctx, n, node)
		cancel()
		lines = append(lines, n+": "+d.String())
		if !slices.Contains(hints, d.Hint) {
			hints = append(hints, d.Hint)
		}
	}
	return usererr.New(fmt.Errorf("nodes not Ready after %s:\n  %s", c.nodeTimeout(), strings.Join(lines, "\n  ")), strings.Join(hints, "\n"))
}

// diagnoseWorker says why a worker's Node is not Ready, from the host's side
// first (is the runtime up, does it have a CNI config, is the kubelet
// running, was its certificate refused) and then from the Node's condition.
func (c *Cluster) diagnoseWorker(ctx context.Context, name string, node *corev1.Node) *kube.Diagnosis {
	sh, err := c.Host(ctx, name)
	if err != nil {
		return &kube.Diagnosis{Cause: "unreachable", Detail: err.Error(), Hint: hintOf(err, "check SSH to "+name)}
	}
	sn, err := c.unitSnapshot(ctx, sh, []string{Containerd, Kubelet}, nil)
	if err != nil {
		return &kube.Diagnosis{Cause: "unreachable", Detail: err.Error(), Hint: "check SSH to " + name}
	}
	if !sn.Units[Containerd].Active {
		return kube.Diagnose(kube.CauseRuntimeDown, "containerd is not active: "+lastLine(journalTail(ctx, sh, Containerd+".service", 5)), name)
	}
	out, err := sh.Run(ctx, crictlCmd+" info", nil)
	if err != nil {
		return kube.Diagnose(kube.CauseRuntimeDown, "containerd does not answer over CRI: "+err.Error(), name)
	}
	if d, err := kube.DiagnoseCRI(out, name); err != nil {
		return kube.Diagnose(kube.CauseRuntimeDown, err.Error(), name)
	} else if d != nil {
		return d
	}
	if !sn.Units[Kubelet].Active {
		return kube.Diagnose(kube.CauseKubeletDown, "kubelet is not active: "+lastLine(journalTail(ctx, sh, Kubelet+".service", 5)), name)
	}
	if d := kube.DiagnoseKubeletLog(kubeletLogSinceStart(ctx, sh), name); d != nil {
		return d
	}
	if node == nil {
		return kube.Diagnose(kube.CauseUnregistered, "", name)
	}
	_, why := kube.NodeReady(node)
	return kube.DiagnoseCondition(why, name)
}

// kubeletLogSinceStart is the kubelet's journal since it last started, so
// that a certificate error fixed since is not reported again.
func kubeletLogSinceStart(ctx context.Context, sh remote.Host) string {
	out, _ := sh.Run(ctx, "journalctl -u kubelet.service -n 400 --no-pager -o cat", nil)
	lines := strings.Split(string(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "Started kubelet") {
			return strings.Join(lines[i+1:], "\n")
		}
	}
	return string(out)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// orEmpty lets NodeReady take a Node that may not exist.
func orEmpty(n *corev1.Node) *corev1.Node {
	if n == nil {
		return &corev1.Node{}
	}
	return n
}

// pushHosts are the hosts with a rendered manifest, in inventory order.
func (c *Cluster) pushHosts() []inventory.Host {
	var out []inventory.Host
	for _, h := range c.Inv.Hosts() {
		if c.manifest(h.Name) != nil {
			out = append(out, h)
		}
	}
	return out
}
