package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/addons"
	"github.com/hardway/hardway/pkg/dnsq"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/verify"
)

// StepDNS is the step of `hardway up` that applies CoreDNS.
const StepDNS = "dns"

// dnsQueryTimeout bounds one DNS query from a worker.
const dnsQueryTimeout = 5 * time.Second

// DNSStep applies CoreDNS when the inventory has workers.
func (c *Cluster) DNSStep() plan.Step {
	return plan.Step{Name: StepDNS,
		Doc: "with workers: CoreDNS (ServiceAccount, RBAC, the Corefile, a Deployment of 2 spread over the workers, the kube-dns Service " +
			"on the kubelets' cluster DNS address) from templates/coredns.yaml.tmpl, server-side applied when it differs, then waited for until it answers from every worker",
		Plan: c.planDNS}
}

func (c *Cluster) planDNS(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
	if len(c.Inv.Workers) == 0 {
		return nil, nil
	}
	cfg := addons.CoreDNSFor(c.Inv)
	_, objs, err := addons.CoreDNS(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := c.kubeClient()
	var diffs []string
	if err == nil {
		diffs, err = addons.Diff(ctx, cs, objs)
	}
	if err != nil {
		// A dry run before the first up has no apiserver to ask yet: the
		// apply is planned and decided when it runs.
		if len(earlier) == 0 {
			return nil, err
		}
		diffs = []string{"not read: the API is not up yet (" + firstLineOf(err.Error()) + ")"}
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	desc := fmt.Sprintf("apply CoreDNS (%s, Service %s on %s, %d replicas", cfg.Image, addons.DNSService, cfg.ClusterIP, cfg.Replicas)
	if len(cfg.Upstream) > 0 {
		desc += ", forward to " + strings.Join(cfg.Upstream, " ") + ")"
	} else {
		desc += ", no upstream)"
	}
	actions := []plan.Action{{Kind: plan.Apply, Desc: desc, Diff: strings.Join(diffs, "\n"), Do: func(ctx context.Context) error {
		cs, err := c.kubeClient()
		if err != nil {
			return err
		}
		return addons.Apply(ctx, cs, objs)
	}}}
	if c.Inv.Network.CNI == inventory.CNINone {
		// Its pods wait for the CNI the user installs: nothing to wait for here.
		c.logf("[dns] network.cni is none: CoreDNS starts once your CNI runs ('hardway verify' shows it)")
		return actions, nil
	}
	timeout := max(c.opt.ServiceTimeout, 3*time.Minute)
	actions = append(actions, plan.Action{Kind: plan.Wait, Desc: fmt.Sprintf("wait for CoreDNS to be available (%d replicas, at most %s), then for %s to answer from every worker (at most %s)", cfg.Replicas, timeout, cfg.ClusterIP, dnsResolveWait),
		Do: func(ctx context.Context) error {
			cs, err := c.kubeClient()
			if err != nil {
				return err
			}
			start := time.Now()
			if err := addons.WaitCoreDNS(ctx, cs, timeout); err != nil {
				return err
			}
			c.logf("[dns] CoreDNS available after %s", time.Since(start).Round(100*time.Millisecond))
			c.waitResolvable(ctx, cs, dnsResolveWait)
			return nil
		}})
	return actions, nil
}

// dnsResolveWait bounds how long the dns step waits, after CoreDNS is
// available, for the cluster DNS address to answer from every worker (a
// variable: tests shorten it).
var dnsResolveWait = 30 * time.Second

// waitResolvable waits, at most bound, until every worker resolves through
// the cluster DNS address, as verify's dns/resolve checks it. A Deployment
// is available when its pods are ready; the EndpointSlice and then each
// worker's kube-proxy follow within a second or so, and a verify run in
// that second would fail. What still fails after bound is printed with its
// cause and hint, and the step goes on: verify reports it, and a DNS
// path broken for reasons up does not mend must not fail the whole run.
//
// The attempts only query: the names and addresses asked do not change
// while it waits, so the facts are read once, and the cause (which asks
// the API and each CoreDNS pod) is diagnosed once, for the workers still
// failing at the end.
func (c *Cluster) waitResolvable(ctx context.Context, cs kubernetes.Interface, bound time.Duration) {
	start := time.Now()
	f, err := c.readDNSFacts(ctx, cs)
	if err != nil {
		c.logf("[dns] warning: %v; 'hardway verify' checks cluster DNS again", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	errs := make([]error, len(c.Inv.Workers))
	forEachWorker(wctx, c.Inv.Workers, func(ctx context.Context, i int, w inventory.Host) {
		errs[i] = poll.Until(ctx, poll.Options{Interval: 200 * time.Millisecond, Max: time.Second, Attempt: dnsQueryTimeout}, func(ctx context.Context) error {
			_, err := c.resolveNames(ctx, w.Name, f)
			return err
		})
	})
	var failed []string
	fresh := false
	for i, w := range c.Inv.Workers {
		if errs[i] == nil {
			continue
		}
		dctx, dcancel := context.WithTimeout(ctx, 3*dnsQueryTimeout)
		if !fresh { // the endpoints may have changed while it waited
			if ff, err := c.readDNSFacts(dctx, cs); err == nil {
				f = ff
			}
			fresh = true
		}
		r := c.resolveFrom(dctx, cs, w.Name, f)
		dcancel()
		if r.Status == verify.Pass { // it answered just now
			continue
		}
		msg := w.Name + ": " + r.Message
		if r.Hint != "" {
			msg += " (hint: " + r.Hint + ")"
		}
		failed = append(failed, msg)
	}
	if len(failed) > 0 {
		c.logf("[dns] warning: cluster DNS does not answer from every worker after %s: %s; 'hardway verify' checks it again",
			bound, strings.Join(failed, "; "))
		return
	}
	c.logf("[dns] %s answers from every worker after %s", c.Inv.ClusterDNS(), time.Since(start).Round(100*time.Millisecond))
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// DNSChecks are verify's CoreDNS checks (none without workers).
func (c *Cluster) DNSChecks() []verify.Check {
	if len(c.Inv.Workers) == 0 {
		return nil
	}
	return []verify.Check{{Name: "dns",
		Doc: "CoreDNS: the Deployment available, the kube-dns Service on the kubelets' cluster DNS address with ready endpoints; from every worker " +
			"kubernetes.default.svc.<domain> and a Service name resolved through that address (a failure names the Service, the endpoints or the pod network)",
		Run: c.checkDNS}}
}

// dnsFacts is what the API says about the cluster DNS.
type dnsFacts struct {
	svc       *corev1.Service // nil: missing
	ready     []dnsEndpoint   // ready CoreDNS endpoints
	notReady  []dnsEndpoint
	apiIP     string // the kubernetes Service's address
	clusterIP string // where the kubelets send pods' queries
}

type dnsEndpoint struct{ ip, node, pod string }

func (e dnsEndpoint) String() string {
	s := e.ip
	if e.pod != "" {
		s = e.pod + " " + s
	}
	if e.node != "" {
		s += " on " + e.node
	}
	return s
}

func (c *Cluster) readDNSFacts(ctx context.Context, cs kubernetes.Interface) (*dnsFacts, error) {
	f := &dnsFacts{clusterIP: c.Inv.ClusterDNS()}
	svc, err := cs.CoreV1().Services(addons.DNSNamespace).Get(ctx, addons.DNSService, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("read Service %s/%s: %w", addons.DNSNamespace, addons.DNSService, err)
	default:
		f.svc = svc
	}
	k, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read Service default/kubernetes: %w", err)
	}
	f.apiIP = k.Spec.ClusterIP
	eps, err := cs.DiscoveryV1().EndpointSlices(addons.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + addons.DNSService})
	if err != nil {
		return nil, fmt.Errorf("read the EndpointSlices of %s: %w", addons.DNSService, err)
	}
	seen := map[string]bool{}
	for _, s := range eps.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if seen[a] {
					continue
				}
				seen[a] = true
				e := dnsEndpoint{ip: a}
				if ep.NodeName != nil {
					e.node = *ep.NodeName
				}
				if ep.TargetRef != nil {
					e.pod = ep.TargetRef.Name
				}
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					f.ready = append(f.ready, e)
				} else {
					f.notReady = append(f.notReady, e)
				}
			}
		}
	}
	return f, nil
}

// serviceProblem says what is wrong with the kube-dns Service ("" if nothing).
func (f *dnsFacts) serviceProblem() (string, string) {
	switch {
	case f.svc == nil:
		return fmt.Sprintf("the DNS Service: %s/%s is missing", addons.DNSNamespace, addons.DNSService),
			"'hardway up' creates it on " + f.clusterIP + ", the address the kubelets give pods"
	case f.svc.Spec.ClusterIP != f.clusterIP:
		return fmt.Sprintf("the DNS Service: %s/%s has clusterIP %s, but the kubelets send pods to %s", addons.DNSNamespace, addons.DNSService, f.svc.Spec.ClusterIP, f.clusterIP),
			"'hardway up' recreates it on " + f.clusterIP + " (a Service's address cannot change in place)"
	}
	return "", ""
}

func (c *Cluster) checkDNS(ctx context.Context) []verify.Result {
	cs, err := c.kubeClient()
	if err != nil {
		return []verify.Result{verify.Failf("", "", "%v", err)}
	}
	var out []verify.Result
	add := func(check string, r verify.Result) { r.Check = check; out = append(out, r) }

	d, err := cs.AppsV1().Deployments(addons.DNSNamespace).Get(ctx, addons.DNSDeployment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		add("dns/deployment", verify.Failf("", "'hardway up' applies it (step dns)", "Deployment %s/%s is missing", addons.DNSNamespace, addons.DNSDeployment))
	case err != nil:
		add("dns/deployment", verify.Failf("", "the apiserver must be ready", "%v", err))
	default:
		add("dns/deployment", c.deploymentResult(ctx, cs, d))
	}

	f, err := c.readDNSFacts(ctx, cs)
	if err != nil {
		add("dns/service", verify.Failf("", "the apiserver must be ready", "%v", err))
		return out
	}
	if p, hint := f.serviceProblem(); p != "" {
		add("dns/service", verify.Failf("", hint, "%s", p))
	} else {
		add("dns/service", verify.OKf("", "%s/%s on %s, the kubelets' cluster DNS address", addons.DNSNamespace, addons.DNSService, f.clusterIP))
	}
	switch {
	case len(f.ready) == 0:
		msg, hint := f.endpointsProblem(ctx, cs)
		add("dns/endpoints", verify.Failf("", hint, "%s", msg))
	case len(f.notReady) > 0:
		add("dns/endpoints", verify.Warnf("", "see 'kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide'", "ready: %s; not ready: %s", joinEndpoints(f.ready), joinEndpoints(f.notReady)))
	default:
		add("dns/endpoints", verify.OKf("", "ready: %s", joinEndpoints(f.ready)))
	}

	// From every worker, over its SSH connection: the query takes the path a
	// pod's does (kube-proxy's rules for the Service address, the pod routes
	// to the CoreDNS pods) without creating a pod, so verify stays fast and
	// leaves nothing behind. `hardway smoke` resolves from a real pod.
	res := make([]verify.Result, len(c.Inv.Workers))
	forEachWorker(ctx, c.Inv.Workers, func(ctx context.Context, i int, w inventory.Host) {
		r := c.resolveFrom(ctx, cs, w.Name, f)
		r.Check, r.Host = "dns/resolve", w.Name
		res[i] = r
	})
	return append(out, res...)
}

func forEachWorker(ctx context.Context, ws []inventory.Host, fn func(context.Context, int, inventory.Host)) {
	done := make(chan struct{}, len(ws))
	for i, w := range ws {
		go func() { fn(ctx, i, w); done <- struct{}{} }()
	}
	for range ws {
		<-done
	}
}

func joinEndpoints(es []dnsEndpoint) string {
	var s []string
	for _, e := range es {
		s = append(s, e.String())
	}
	return strings.Join(s, ", ")
}

// deploymentResult: all replicas available passes; some is a warning naming
// the others (DNS still answers); none fails with each pod's reason.
func (c *Cluster) deploymentResult(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) verify.Result {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if addons.DeploymentReady(d) && want > 0 {
		return verify.OKf("", "Deployment %s/%s: %d/%d replicas available", addons.DNSNamespace, addons.DNSDeployment, d.Status.AvailableReplicas, want)
	}
	probs, hint := addons.PodProblems(ctx, cs, addons.DNSNamespace, addons.DNSLabel+"="+addons.DNSLabelValue)
	msg := fmt.Sprintf("Deployment %s/%s: %d/%d replicas available", addons.DNSNamespace, addons.DNSDeployment, d.Status.AvailableReplicas, want)
	if want == 0 {
		msg += " (scaled to 0)"
		hint = "'hardway up' sets it back to " + fmt.Sprint(addons.DNSReplicas) + " replicas"
	}
	if len(probs) > 0 {
		msg += ": " + strings.Join(probs, "; ")
	}
	if hint == "" {
		hint = "see 'kubectl -n kube-system describe pods -l k8s-app=kube-dns'"
	}
	if d.Status.AvailableReplicas > 0 {
		return verify.Warnf("", hint, "%s", msg)
	}
	return verify.Failf("", hint, "%s", msg)
}

// endpointsProblem explains why kube-dns has no ready endpoint.
func (f *dnsFacts) endpointsProblem(ctx context.Context, cs kubernetes.Interface) (string, string) {
	msg := fmt.Sprintf("the endpoints: %s/%s has no ready CoreDNS endpoint", addons.DNSNamespace, addons.DNSService)
	if len(f.notReady) > 0 {
		msg += " (not ready: " + joinEndpoints(f.notReady) + ")"
	}
	probs, hint := addons.PodProblems(ctx, cs, addons.DNSNamespace, addons.DNSLabel+"="+addons.DNSLabelValue)
	if len(probs) > 0 {
		msg += ": " + strings.Join(probs, "; ")
	} else if len(f.notReady) == 0 {
		msg += ": no CoreDNS pod runs"
		hint = "'hardway up' applies the CoreDNS Deployment with " + fmt.Sprint(addons.DNSReplicas) + " replicas; see 'kubectl -n kube-system get deploy coredns'"
	}
	if hint == "" {
		hint = "see 'kubectl -n kube-system describe pods -l k8s-app=kube-dns'"
	}
	return msg, hint
}

// query asks server (ip:53) from host for name's A records.
func (c *Cluster) query(ctx context.Context, host, server, name string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, dnsQueryTimeout)
	defer cancel()
	conn, err := c.dialFrom(ctx, host, net.JoinHostPort(server, "53"))
	if err != nil {
		return nil, fmt.Errorf("connect to %s:53: %w", server, err)
	}
	defer conn.Close()
	return dnsq.A(ctx, conn, name)
}

// resolveFrom resolves kubernetes.default.svc.<domain> and the kube-dns
// Service's own name through the cluster DNS address from host; when that
// fails, DNSCause says why.
func (c *Cluster) resolveFrom(ctx context.Context, cs kubernetes.Interface, host string, f *dnsFacts) verify.Result {
	start := time.Now()
	got, err := c.resolveNames(ctx, host, f)
	if err != nil {
		cause, hint := c.dnsCause(ctx, cs, host, f, err)
		return verify.Failf(host, hint, "%v; cause: %s", err, cause)
	}
	return verify.OKf(host, "%s via %s (%s)", strings.Join(got, ", "), f.clusterIP, time.Since(start).Round(time.Millisecond))
}

// resolveNames asks the probe names through the cluster DNS address from
// host: "name -> address" for each, or the first that fails, and why.
func (c *Cluster) resolveNames(ctx context.Context, host string, f *dnsFacts) ([]string, error) {
	var got []string
	for _, n := range c.dnsProbeNames(f) {
		as, err := c.queryDNS(ctx, host, f.clusterIP, n.name)
		if err == nil && !containsAddr(as, n.want) {
			err = fmt.Errorf("%s is %v, not %s", n.name, as, n.want)
		}
		if err != nil {
			return nil, fmt.Errorf("%s via %s: %w", n.name, f.clusterIP, err)
		}
		got = append(got, n.name+" -> "+n.want)
	}
	return got, nil
}

type probeName struct{ name, want string }

func (c *Cluster) dnsProbeNames(f *dnsFacts) []probeName {
	d := c.Inv.Network.ClusterDomain
	return []probeName{
		{"kubernetes.default.svc." + d, f.apiIP},
		{addons.DNSService + "." + addons.DNSNamespace + ".svc." + d, f.clusterIP},
	}
}

func containsAddr(as []netip.Addr, want string) bool {
	return slices.ContainsFunc(as, func(a netip.Addr) bool { return a.String() == want })
}

// DNSCause says why cluster DNS fails for pods on host: the DNS Service
// (missing, another address), the endpoints (no ready CoreDNS), the pod
// network (host cannot reach a CoreDNS pod's IP), or the Service routing
// (the pods answer, the Service address does not). It only reads.
func (c *Cluster) DNSCause(ctx context.Context, host string, queryErr error) (cause, hint string) {
	cs, err := c.kubeClient()
	if err != nil {
		return "unknown: " + err.Error(), ""
	}
	f, err := c.readDNSFacts(ctx, cs)
	if err != nil {
		return "unknown: " + err.Error(), "the apiserver must be ready"
	}
	return c.dnsCause(ctx, cs, host, f, queryErr)
}

func (c *Cluster) dnsCause(ctx context.Context, cs kubernetes.Interface, host string, f *dnsFacts, queryErr error) (string, string) {
	if p, hint := f.serviceProblem(); p != "" {
		return p, hint
	}
	if len(f.ready) == 0 {
		return f.endpointsProblem(ctx, cs)
	}
	name := c.dnsProbeNames(f)[0]
	var answered []string
	for _, ep := range f.ready {
		as, err := c.queryDNS(ctx, host, ep.ip, name.name)
		var rerr *dnsq.RcodeError
		switch {
		case err == nil || errors.As(err, &rerr):
			// It answered: the pod network carries the query.
			if err == nil && containsAddr(as, name.want) {
				answered = append(answered, ep.String())
				continue
			}
			if err == nil {
				err = fmt.Errorf("%s is %v, not %s", name.name, as, name.want)
			}
			return fmt.Sprintf("CoreDNS answers wrongly: %s says %v", ep, err),
				"CoreDNS serves network.clusterDomain (" + c.Inv.Network.ClusterDomain + ") only if the kubelets use the same; see 'kubectl -n kube-system logs -l k8s-app=kube-dns'"
		default:
			return fmt.Sprintf("the pod network: %s cannot reach CoreDNS pod %s: %v", host, ep, err),
				"check the route to " + ep.node + "'s pod subnet on " + host + " ('ip route'; hardway-pod-routes) and the CNI on both; 'hardway verify' shows the routes"
		}
	}
	return fmt.Sprintf("the Service routing: the CoreDNS pods answer (%s), %s:53 does not from %s (%v)", strings.Join(answered, ", "), f.clusterIP, host, queryErr),
		"kube-proxy on " + host + " forwards the Service address: see 'journalctl -u kube-proxy' there"
}
