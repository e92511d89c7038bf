package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/apilb"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/verify"
)

// Issue 15 §1: the workers keep the API when a control-plane host is gone.
// Each worker runs a node-local load balancer (Traefik) on 127.0.0.1:6443
// in front of all three apiservers. The host taken away is the one
// apiServerEndpoint names (the admin's endpoint, the lab's default: the
// first control-plane host), powered off entirely: link down first, so its
// peers' connections hang as after a power cut, then its container stops.
// It is powered on again at the end and verify passes again, so the
// scenarios after these find the cluster as the cold up left it.

// lbWorkers are the lab's workers.
var lbWorkers = []string{"worker-1", "worker-2"}

func (e *workersEnv) lostControllerScenarios(t *testing.T) {
	t.Run("lost controller: every worker reaches the API through its node-local load balancer", func(t *testing.T) {
		e.t = t
		for _, w := range lbWorkers {
			out, err := e.ssh(w, "grep -h 'server:' /var/lib/kubelet/kubeconfig /var/lib/kube-proxy/kubeconfig")
			if err != nil || strings.Count(out, "server: https://127.0.0.1:6443") != 2 {
				t.Errorf("%s: the kubelet's and kube-proxy's kubeconfigs do not name the load balancer: %v\n%s", w, err, out)
			}
		}
		inv, err := inventory.Load(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		r := e.verify()
		for _, w := range lbWorkers {
			ep := result(r, "worker/lb-endpoint", w)
			be := result(r, "worker/lb-backends", w)
			if ep.Status != verify.Pass || be.Status != verify.Pass || !strings.Contains(be.Message, "3 backends, all passing") {
				t.Errorf("%s: lb-endpoint %s %q; lb-backends %s %q", w, ep.Status, ep.Message, be.Status, be.Message)
			}
			for _, h := range inv.ControlPlane {
				if cp := h.Name + " " + net.JoinHostPort(h.IP(), "6443") + " UP"; !strings.Contains(be.Message, cp) {
					t.Errorf("%s: lb-backends does not list %q: %s", w, cp, be.Message)
				}
			}
		}
	})

	t.Run("lost controller: the host apiServerEndpoint names is powered off; workers stay Ready, pods run, a new pod starts, kubectl works through a worker", func(t *testing.T) {
		e.t = t
		inv, err := inventory.Load(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		// The worst case: the host the admin's kubeconfig names.
		victim, victimAddr := "", ""
		for _, h := range inv.ControlPlane {
			if h.Address == inv.APIServerHost() {
				victim, victimAddr = h.Name, net.JoinHostPort(h.IP(), "6443")
			}
		}
		if victim == "" {
			t.Fatalf("no control-plane host at apiServerEndpoint %s", inv.APIServerHost())
		}
		leaders := e.mustK("get", "lease", "-n", "kube-system", "kube-controller-manager", "kube-scheduler", "-o", "jsonpath={.items[*].spec.holderIdentity}")
		t.Logf("stopping %s (apiServerEndpoint %s); leaders before: %s", victim, inv.APIServerURL(), leaders)

		// Two pods pinned to the workers: they must run on, untouched.
		for i, w := range lbWorkers {
			e.apply(lbPod(fmt.Sprintf("lb-keep-%d", i+1), w))
		}
		e.mustK("wait", "--for=condition=Ready", "pod/lb-keep-1", "pod/lb-keep-2", "--timeout=120s")
		containers := func() map[string]string {
			m := map[string]string{}
			for i, w := range lbWorkers {
				out, _ := e.ssh(w, fmt.Sprintf("crictl ps -q --state running --name '^pause$' --label io.kubernetes.pod.name=lb-keep-%d", i+1))
				m[w] = strings.TrimSpace(out)
			}
			return m
		}
		before := containers()
		for w, id := range before {
			if id == "" {
				t.Fatalf("%s: no running container of its lb-keep pod", w)
			}
		}
		// The worst case for the workers: every API connection through
		// their load balancers on the victim. The other apiservers restart
		// at once, so the connections on them move to the only one that
		// accepts; the power cut then leaves the kubelets' connections open
		// towards a host that never answers, and only client-go's HTTP/2
		// health check (shortened in the units) notices.
		survivors := apiServers(inv, victim)
		var wg sync.WaitGroup
		for name := range survivors {
			wg.Go(func() {
				if out, err := e.ssh(name, "systemctl restart kube-apiserver"); err != nil {
					t.Errorf("%s: restart kube-apiserver: %v\n%s", name, err, out)
				}
			})
		}
		wg.Wait()
		for name, url := range survivors {
			deadline := time.Now().Add(2 * time.Minute)
			for {
				out, err := e.k("--server", url, "get", "--raw", "/readyz")
				if err == nil && strings.TrimSpace(out) == "ok" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: not ready 2m after its restart: %v %s", name, err, out)
				}
				time.Sleep(time.Second)
			}
		}

		t.Cleanup(func() {
			// Whatever happened above: the host comes back for the next tests.
			if err := e.lab.PowerOn(context.Background(), victim); err != nil && !strings.Contains(err.Error(), "is running") {
				t.Errorf("power on %s: %v", victim, err)
			}
		})

		start := time.Now()
		if err := e.lab.PowerOff(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
		// Each worker's node lease, read every second from a surviving
		// apiserver for the whole outage: how old it ever got.
		stale := leaseAges(t, e, slices.Collect(maps.Values(survivors)))
		// kubectl through worker-1's load balancer: an SSH tunnel to its
		// 127.0.0.1:6443, with the admin's credentials that stay here.
		kt := e.tunnel(t, "worker-1")

		// Each load balancer takes the host out within seconds.
		for _, w := range lbWorkers {
			deadline := time.Now().Add(30 * time.Second)
			for {
				bs, err := e.lbBackends(w)
				if err == nil && slices.ContainsFunc(bs, func(b apilb.Backend) bool { return b.Address == victimAddr && b.Status == apilb.Down }) &&
					!slices.ContainsFunc(bs, func(b apilb.Backend) bool { return b.Address != victimAddr && b.Status != apilb.Up }) {
					t.Logf("FIGURE %s: %s out of its load balancer after %s", w, victim, time.Since(start).Round(100*time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: backends %v (%v) 30s after %s went away", w, bs, err, victim)
				}
				time.Sleep(500 * time.Millisecond)
			}
		}

		// A new pod (no nodeName: the scheduler, whichever is leader now,
		// places it) starts while the host is gone.
		kt.apply(t, lbPodAnywhere("lb-new"))
		if out, err := kt.k("wait", "--for=condition=Ready", "pod/lb-new", "--timeout=180s"); err != nil {
			t.Fatalf("the new pod did not start without %s: %v\n%s\n%s", victim, err, out, kt.describe("pod", "lb-new"))
		}
		t.Logf("FIGURE a new pod Ready %s after %s went away", time.Since(start).Round(time.Second), victim)

		// Workers stay Ready past the node monitor's grace period (50 s):
		// their leases keep being renewed through the load balancers.
		const watch = 75 * time.Second
		renew := map[string]string{}
		for time.Since(start) < watch {
			for _, w := range lbWorkers {
				out, err := kt.k("get", "node", w, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
				if err != nil {
					t.Logf("kubectl get node %s: %v %s (the apiservers' etcd failover; asked again)", w, err, strings.TrimSpace(out))
					continue
				}
				if strings.TrimSpace(out) != "True" {
					t.Fatalf("%s not Ready %s after %s went away: %v %s\n%s", w, time.Since(start).Round(time.Second), victim, err, out, kt.describe("node", w))
				}
				if out, err := kt.k("get", "lease", "-n", "kube-node-lease", w, "-o", "jsonpath={.spec.renewTime}"); err == nil {
					renew[w] = strings.TrimSpace(out)
				}
			}
			time.Sleep(5 * time.Second)
		}
		for _, w := range lbWorkers {
			rt, err := time.Parse(time.RFC3339Nano, renew[w])
			if err != nil || rt.Before(start.Add(watch/2)) {
				t.Errorf("%s: lease last renewed %q, not during the outage", w, renew[w])
			}
		}
		// A lease older than its duration (40 s) is expired: the kubelet
		// kept a dead connection too long (before the shortened HTTP/2
		// health check: 43-45 s, and the node NotReady now and then).
		for w, age := range stale() {
			t.Logf("FIGURE %s: node lease at most %s old during the outage", w, age)
			if age >= leaseDuration {
				t.Errorf("%s: node lease %s old during the outage (its duration: %s): the kubelet kept its connection to %s", w, age, leaseDuration, victim)
			}
		}
		// The pinned pods ran on: the same containers, no restart.
		if after := containers(); !sameMap(before, after) {
			t.Errorf("containers changed during the outage: before %v, after %v", before, after)
		}
		if out, err := kt.k("get", "pod", "lb-keep-1", "lb-keep-2", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[0].restartCount}{"\n"}{end}`); err != nil ||
			strings.Count(out, " Running 0") != 2 {
			t.Errorf("pinned pods after %s: %v\n%s", watch, err, out)
		}
		if out, err := kt.k("get", "nodes"); err != nil || !strings.Contains(out, "worker-1") {
			t.Errorf("kubectl get nodes through worker-1: %v %s", err, out)
		}
		leaders, _ = kt.k("get", "lease", "-n", "kube-system", "kube-controller-manager", "kube-scheduler", "-o", "jsonpath={.items[*].spec.holderIdentity}")
		t.Logf("leaders while %s is gone: %s", victim, leaders)

		// verify names the lost backend, with a hint, and still reaches the
		// API through each worker.
		_, out, _ := e.hardway("verify", "-o", "json", "--timeout", "30s")
		r := parseReport(t, out)
		for _, w := range lbWorkers {
			be := result(r, "worker/lb-backends", w)
			if be.Status != verify.Warn || !strings.Contains(be.Message, "1 of 3 backends down: "+victim+" "+victimAddr+" DOWN") ||
				!strings.Contains(be.Hint, "the apiserver on "+victim+" does not accept connections from "+w) {
				t.Errorf("%s: lb-backends with %s gone: %s %q (hint %q)", w, victim, be.Status, be.Message, be.Hint)
			}
			if ep := result(r, "worker/lb-endpoint", w); ep.Status != verify.Pass {
				t.Errorf("%s: lb-endpoint with %s gone: %s %q", w, victim, ep.Status, ep.Message)
			}
		}
		// The cluster-wide checks reach the API through a controller that
		// is up: with the first one gone they failed before (apiHost).
		if rb := result(r, "rbac", ""); rb.Status != verify.Pass {
			t.Errorf("rbac with %s gone: %s %q", victim, rb.Status, rb.Message)
		}
		for _, x := range r.Results {
			if x.Check == "nodes" && x.Status == verify.Fail {
				t.Errorf("nodes with %s gone: %s %q", victim, x.Host, x.Message)
			}
		}

		// Back: the host boots, rejoins, and every check passes again.
		back := time.Now()
		if err := e.lab.PowerOn(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(4 * time.Minute)
		for {
			f := failures(e.verify())
			if len(f) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("verify %s after %s came back:\n  %s", time.Since(back).Round(time.Second), victim, strings.Join(f, "\n  "))
			}
			time.Sleep(5 * time.Second)
		}
		t.Logf("FIGURE %s powered on -> every verify check passes: %s", victim, time.Since(back).Round(time.Second))
		r = e.verify()
		for _, w := range lbWorkers {
			if be := result(r, "worker/lb-backends", w); be.Status != verify.Pass {
				t.Errorf("%s: lb-backends after %s came back: %s %q", w, victim, be.Status, be.Message)
			}
		}
		e.mustK("delete", "pod", "lb-keep-1", "lb-keep-2", "lb-new", "--wait=false")
	})
}

// leaseDuration is the kubelet's nodeLeaseDurationSeconds (its default).
const leaseDuration = 40 * time.Second

// apiServers maps each control-plane host but victim to its apiserver's URL.
func apiServers(inv *inventory.Inventory, victim string) map[string]string {
	out := map[string]string{}
	for _, h := range inv.ControlPlane {
		if h.Name != victim {
			out[h.Name] = "https://" + net.JoinHostPort(h.IP(), "6443")
		}
	}
	return out
}

// leaseAges reads each worker's node lease every second, from the first of
// servers that answers, until the returned function is called; that returns
// the oldest each lease was seen (renewTime's age, rounded to a second).
func leaseAges(t *testing.T, e *workersEnv, servers []string) func() map[string]time.Duration {
	stop := make(chan struct{})
	done := make(chan map[string]time.Duration)
	go func() {
		oldest := map[string]time.Duration{}
		for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
			for _, srv := range servers {
				out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "--server", srv, "--request-timeout", "2s",
					"get", "lease", "-n", "kube-node-lease", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.renewTime}{"\n"}{end}`).Output()
				if err != nil {
					continue
				}
				for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					name, ts, ok := strings.Cut(l, " ")
					rt, err := time.Parse(time.RFC3339Nano, ts)
					if !ok || err != nil || !slices.Contains(lbWorkers, name) {
						continue
					}
					if age := time.Since(rt).Round(time.Second); age > oldest[name] {
						oldest[name] = age
					}
				}
				break
			}
			select {
			case <-stop:
				done <- oldest
				return
			case <-time.After(time.Second):
			}
		}
		<-stop
		done <- oldest
	}()
	var once sync.Once
	var res map[string]time.Duration
	get := func() map[string]time.Duration {
		once.Do(func() { close(stop); res = <-done })
		return res
	}
	t.Cleanup(func() { get() })
	return get
}

// lbPod is a pause pod pinned to node.
func lbPod(name, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: lb-test}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers: [{name: pause, image: %s, imagePullPolicy: Never}]
`, name, node, pauseImage)
}

// lbPodAnywhere is a pause pod the scheduler places.
func lbPodAnywhere(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, labels: {app: lb-test}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: pause, image: %s, imagePullPolicy: Never}]
`, name, pauseImage)
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func parseReport(t *testing.T, out string) *verify.Report {
	t.Helper()
	var r verify.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify -o json: %v\n%s", err, out)
	}
	return &r
}

// result is the check's result for host (a zero Result if there is none).
func result(r *verify.Report, check, host string) verify.Result {
	for _, x := range r.Results {
		if x.Check == check && x.Host == host {
			return x
		}
	}
	return verify.Result{Check: check, Host: host, Message: "no such result"}
}

// lbBackends asks worker's load balancer for its backends, on the worker.
func (e *workersEnv) lbBackends(w string) ([]apilb.Backend, error) {
	out, err := e.ssh(w, "curl -sS --max-time 5 http://127.0.0.1:6444"+apilb.ServicesPath)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	return apilb.Backends([]byte(out), "kube-apiserver")
}

// kubeTunnel is kubectl through an SSH tunnel to a worker's 127.0.0.1:6443.
type kubeTunnel struct {
	e      *workersEnv
	server string
}

// tunnel forwards a local port to worker's 127.0.0.1:6443 until the test ends.
func (e *workersEnv) tunnel(t *testing.T, worker string) *kubeTunnel {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command("ssh", "-F", e.res.SSHConfig, "-N", "-o", "ExitOnForwardFailure=yes", "-L", addr+":127.0.0.1:6443", worker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	kt := &kubeTunnel{e: e, server: "https://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := kt.k("get", "--raw", "/version")
		if err == nil && strings.Contains(out, "gitVersion") {
			return kt
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl through %s's 127.0.0.1:6443: %v %s", worker, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (kt *kubeTunnel) k(args ...string) (string, error) {
	cmd := exec.Command(kt.e.kubectl, append([]string{"--kubeconfig", kt.e.kubeconfig, "--server", kt.server, "--request-timeout", "20s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (kt *kubeTunnel) describe(kind, name string) string {
	out, _ := kt.k("describe", kind, name)
	return out
}

// apply retries for a minute: right after a power cut the apiservers'
// own etcd connections to the lost member hang until their keepalive gives
// up (about 40 s), and a write that lands on one fails meanwhile — as a
// user's kubectl would, then succeed on a retry.
func (kt *kubeTunnel) apply(t *testing.T, manifest string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		cmd := exec.Command(kt.e.kubectl, "--kubeconfig", kt.e.kubeconfig, "--server", kt.server, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl apply through %s: %v\n%s", kt.server, err, out)
		}
		t.Logf("kubectl apply through %s: %v %s (retrying)", kt.server, err, strings.TrimSpace(string(out)))
		time.Sleep(3 * time.Second)
	}
}
