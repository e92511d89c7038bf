// Package smoke is `hardway smoke`: the smoke test of Kubernetes the Hard
// Way, automated. In a namespace of its own (deleted at the end, also after
// a failure or an interrupt) it proves, one pass/fail line each with a hint:
// a Secret is stored encrypted in etcd; a Deployment runs; port-forward,
// logs and exec work; a NodePort Service answers on every worker; a pod
// resolves cluster names.
//
// What an image must offer (--image): an HTTP server on --port (any answer
// to GET / counts; the lab's hardway.local/hello:v1 also names the pod),
// and for the DNS step either GET /resolve?name=N answering N's addresses
// one per line (hello does), or a shell with getent or nslookup (nginx,
// busybox). exec runs in a second container of the cluster's pause image,
// the sandbox image every worker has (`/pause -v`), so any image will do.
package smoke

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hardway/hardway/pkg/addons"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/verify"
)

// The smoke test's objects: one name for the namespace, the Secret, the
// Deployment and the Service.
const (
	Namespace = "hardway-smoke"
	Name      = "hardway-smoke"
	// HelloImage is the lab's test server (hack/mirror/hello).
	HelloImage = "hardway.local/hello:v1"
	// HelloPort is where it listens.
	HelloPort = 8080
)

// Env is what smoke reaches the cluster with; the caller (pkg/cluster)
// builds it over SSH.
type Env struct {
	// Kube and Rest reach the apiserver; Rest also carries port-forward
	// and exec (client-go), so it must dial the apiserver itself.
	Kube kubernetes.Interface
	Rest *rest.Config
	// EtcdGet reads a key raw from etcd.
	EtcdGet func(ctx context.Context, key string) ([]byte, error)
	// DialFrom opens a TCP connection from host's side (SSH).
	DialFrom func(ctx context.Context, host, addr string) (net.Conn, error)
	// From is the host the NodePorts are asked from (a control-plane host:
	// outside the workers, like a client).
	From       string
	Workers    []inventory.Host
	Provider   string // the encryption provider: k8s:enc:<provider>:v1:
	Domain     string // the cluster domain
	PauseImage string // the sandbox image every worker has; exec runs there
	// DNSCause says why DNS fails for pods on node (pkg/cluster.DNSCause).
	DNSCause func(ctx context.Context, node string, err error) (cause, hint string)
}

// Options tune a run.
type Options struct {
	Image   string        // default HelloImage
	Port    int           // default HelloPort
	Timeout time.Duration // per wait (the Deployment, a NodePort, DNS); default 2m
	Keep    bool          // leave the namespace for a look afterwards
	// Progress is told about each result as it is known (the text output).
	Progress func(verify.Result)
}

type run struct {
	env  Env
	opt  Options
	rep  *verify.Report
	pod  *corev1.Pod // the running pod, once there is one
	svc  *corev1.Service
	fwd  string // 127.0.0.1:port of the port-forward, while it runs
	stop func()
}

// Run runs every step and cleans up; the report has one result per step
// (and per worker for the NodePort).
func Run(ctx context.Context, env Env, opt Options) *verify.Report {
	if opt.Image == "" {
		opt.Image = HelloImage
	}
	if opt.Port == 0 {
		opt.Port = HelloPort
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 2 * time.Minute
	}
	start := time.Now()
	r := &run{env: env, opt: opt, rep: &verify.Report{}}
	defer func() { r.rep.Duration = time.Since(start) }()

	// The cleanup runs on a context of its own: an interrupt (ctx ends)
	// must still remove the namespace.
	defer r.cleanup(ctx)
	if !r.step("smoke/namespace", r.namespace(ctx)) {
		return r.rep
	}
	r.step("smoke/secret", r.secret(ctx))
	if !r.step("smoke/deployment", r.deployment(ctx)) {
		for _, s := range []string{"smoke/port-forward", "smoke/logs", "smoke/exec", "smoke/nodeport", "smoke/dns"} {
			r.step(s, verify.Failf("", "fix smoke/deployment first", "not run: no pod is running"))
		}
		return r.rep
	}
	r.step("smoke/port-forward", r.portForward(ctx))
	defer r.stopForward()
	r.step("smoke/logs", r.logs(ctx))
	r.step("smoke/exec", r.exec(ctx))
	for _, res := range r.nodePorts(ctx) {
		r.step("smoke/nodeport", res)
	}
	r.step("smoke/dns", r.dns(ctx))
	return r.rep
}

// step records res under name; it reports whether it passed.
func (r *run) step(name string, res verify.Result) bool {
	res.Check = name
	r.rep.Results = append(r.rep.Results, res)
	switch res.Status {
	case verify.Pass:
		r.rep.Pass++
	case verify.Warn:
		r.rep.Warn++
	default:
		r.rep.Fail++
	}
	if r.opt.Progress != nil {
		r.opt.Progress(res)
	}
	return res.Status != verify.Fail
}

func labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": Name, "app.kubernetes.io/managed-by": "hardway"}
}

// namespace creates the namespace, after removing one a killed run left.
func (r *run) namespace(ctx context.Context) verify.Result {
	ns := r.env.Kube.CoreV1().Namespaces()
	if _, err := ns.Get(ctx, Namespace, metav1.GetOptions{}); err == nil {
		if err := r.deleteNamespace(ctx); err != nil {
			return verify.Failf("", "delete it: kubectl delete namespace "+Namespace, "namespace %s is left from an earlier run and does not go away: %v", Namespace, err)
		}
	} else if !apierrors.IsNotFound(err) {
		return verify.Failf("", "the apiserver must be ready: 'hardway verify'", "%v", err)
	}
	_, err := ns.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: labels()}}, metav1.CreateOptions{})
	if err != nil {
		return verify.Failf("", "the admin kubeconfig must be allowed to create namespaces", "create namespace %s: %v", Namespace, err)
	}
	return verify.OKf("", "namespace %s created (deleted at the end)", Namespace)
}

func (r *run) deleteNamespace(ctx context.Context) error {
	ns := r.env.Kube.CoreV1().Namespaces()
	if err := ns.Delete(ctx, Namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return poll.Until(ctx, poll.Options{Interval: 500 * time.Millisecond, Max: 2 * time.Second}, func(ctx context.Context) error {
		_, err := ns.Get(ctx, Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("still terminating")
		}
		return err
	})
}

func (r *run) cleanup(ctx context.Context) {
	r.stopForward()
	if r.opt.Keep {
		r.step("smoke/cleanup", verify.OKf("", "kept namespace %s (--keep); remove it with: kubectl delete namespace %s", Namespace, Namespace))
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := r.deleteNamespace(cctx); err != nil {
		r.step("smoke/cleanup", verify.Failf("", "kubectl delete namespace "+Namespace, "namespace %s not removed: %v", Namespace, err))
		return
	}
	r.step("smoke/cleanup", verify.OKf("", "namespace %s deleted (%s)", Namespace, time.Since(start).Round(100*time.Millisecond)))
}

// secret writes a Secret with a random value and reads it raw from etcd:
// it must start with k8s:enc:<provider>:v1: and not contain the value.
func (r *run) secret(ctx context.Context) verify.Result {
	var b [12]byte
	rand.Read(b[:])
	value := "hardway-smoke-" + hex.EncodeToString(b[:])
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels()},
		StringData: map[string]string{"mykey": value}}
	if _, err := r.env.Kube.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return verify.Failf("", "", "create Secret %s/%s: %v", Namespace, Name, err)
	}
	key := "/registry/secrets/" + Namespace + "/" + Name
	raw, err := r.env.EtcdGet(ctx, key)
	if err != nil {
		return verify.Failf("", "'hardway verify' checks etcd", "read %s from etcd: %v", key, err)
	}
	want := "k8s:enc:" + r.env.Provider + ":v1:"
	switch {
	case bytes.Contains(raw, []byte(value)):
		return verify.Failf("", "the apiserver runs without --encryption-provider-config or with identity first: 'hardway up' renders and restarts it",
			"the Secret's value is readable in etcd (%s)", key)
	case !bytes.HasPrefix(raw, []byte(want)):
		got := string(raw[:min(len(raw), 24)])
		return verify.Failf("", "the encryption config's first provider is not the inventory's: see 'hardway certs generate'", "%s starts %q, not %s", key, got, want)
	}
	// The prefix up to the key name, e.g. k8s:enc:secretbox:v1:key1:
	prefix := string(raw[:min(len(raw), len(want)+16)])
	if i := strings.Index(prefix[len(want):], ":"); i >= 0 {
		prefix = prefix[:len(want)+i+1]
	} else {
		prefix = want
	}
	return verify.OKf("", "Secret %s/%s is stored in etcd as %s… (%d bytes, the value not in them)", Namespace, Name, prefix, len(raw))
}

// deployment runs the image with the pause image beside it and waits for
// the pod to be ready.
func (r *run) deployment(ctx context.Context) verify.Result {
	one := int32(1)
	grace := int64(1)
	port := int32(r.opt.Port)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels()},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels()},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{
						{Name: "app", Image: r.opt.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
							// Ready once something listens: any server will do.
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
								PeriodSeconds: 1}},
						{Name: "exec", Image: r.env.PauseImage, ImagePullPolicy: corev1.PullIfNotPresent},
					},
				},
			},
		},
	}
	if _, err := r.env.Kube.AppsV1().Deployments(Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return verify.Failf("", "", "create Deployment %s/%s: %v", Namespace, Name, err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, r.opt.Timeout)
	defer cancel()
	sel := "app.kubernetes.io/name=" + Name
	err := poll.Until(wctx, poll.Options{Interval: 500 * time.Millisecond, Max: 2 * time.Second}, func(ctx context.Context) error {
		pods, err := r.env.Kube.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; addons.PodReady(p) && p.Status.PodIP != "" {
				r.pod = p
				return nil
			}
		}
		return errors.New("no ready pod")
	})
	if err != nil {
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer pcancel()
		probs, hint := addons.PodProblems(pctx, r.env.Kube, Namespace, sel)
		if hint == "" || strings.Contains(hint, "dns.image") {
			hint = imageHint(r.opt.Image, r.opt.Port, probs)
		}
		return verify.Failf("", hint, "Deployment %s/%s not running after %s: %s", Namespace, Name, r.opt.Timeout, strings.Join(probs, "; "))
	}
	return verify.OKf("", "Deployment %s/%s: pod %s running on %s (%s), ready after %s", Namespace, Name, r.pod.Name, r.pod.Spec.NodeName,
		r.pod.Status.PodIP, time.Since(start).Round(100*time.Millisecond))
}

func imageHint(image string, port int, probs []string) string {
	all := strings.Join(probs, " ")
	switch {
	case strings.Contains(all, "ImagePull") || strings.Contains(all, "ErrImageNeverPull") || strings.Contains(all, "ErrImagePull"):
		return "no worker has " + image + " and none could pull it: list its tarball under images: in the inventory (imported by 'hardway up'), or name another with --image"
	case strings.Contains(all, "readiness probe"):
		return fmt.Sprintf("nothing listens on port %d in %s: smoke needs an HTTP server there (--port names another)", port, image)
	}
	return "see 'kubectl -n " + Namespace + " describe pods' (run with --keep to keep them)"
}

// portForward forwards a local port to the pod's --port (client-go, as
// kubectl does) and asks GET / through it. The forward stays open for the
// DNS step.
func (r *run) portForward(ctx context.Context) verify.Result {
	local, stop, err := forward(ctx, r.env.Kube, r.env.Rest, r.pod, r.opt.Port)
	if err != nil {
		return verify.Failf("", "the apiserver reaches the kubelet (the kubelet RBAC, the kubelet's serving certificate: 'hardway verify')",
			"port-forward to %s:%d: %v", r.pod.Name, r.opt.Port, err)
	}
	r.fwd, r.stop = local, stop
	body, code, err := httpGet(ctx, nil, "http://"+local+"/")
	if err != nil {
		return verify.Failf("", fmt.Sprintf("the image must serve HTTP on port %d (--port)", r.opt.Port), "GET / through the port-forward: %v", err)
	}
	return verify.OKf("", "GET / through a port-forward to %s:%d: HTTP %d %s", r.pod.Name, r.opt.Port, code, quoteShort(body))
}

func (r *run) stopForward() {
	if r.stop != nil {
		r.stop()
		r.stop, r.fwd = nil, ""
	}
}

// logs reads the app container's log.
func (r *run) logs(ctx context.Context) verify.Result {
	b, err := r.env.Kube.CoreV1().Pods(Namespace).GetLogs(r.pod.Name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil {
		return verify.Failf("", "the apiserver reaches the kubelet as the kubelet-client user (RBAC 'system:kube-apiserver-to-kubelet'; 'hardway verify' checks it)", "kubectl logs %s: %v", r.pod.Name, err)
	}
	first := strings.TrimSpace(string(b))
	if first == "" {
		return verify.OKf("", "logs of %s/app: empty (the image logged nothing yet), the call works", r.pod.Name)
	}
	first, _, _ = strings.Cut(first, "\n")
	return verify.OKf("", "logs of %s/app: %s", r.pod.Name, quoteShort(first))
}

// exec runs `/pause -v` in the pause container beside the app: the one
// binary every cluster has whose answer is known.
func (r *run) exec(ctx context.Context) verify.Result {
	out, err := execIn(ctx, r.env.Kube, r.env.Rest, r.pod, "exec", []string{"/pause", "-v"})
	if err != nil {
		return verify.Failf("", "the apiserver reaches the kubelet (RBAC, its serving certificate) and the kubelet containerd's streaming server", "exec /pause -v in %s: %v", r.pod.Name, err)
	}
	if !strings.Contains(out, "pause") {
		return verify.Failf("", "", "exec /pause -v in %s answered %s", r.pod.Name, quoteShort(out))
	}
	return verify.OKf("", "exec /pause -v in %s/exec: %s", r.pod.Name, quoteShort(strings.TrimSpace(out)))
}

// nodePorts makes a NodePort Service for the pod and asks GET / on every
// worker's address from env.From: kube-proxy on each worker must forward
// it, to a pod on another worker too.
func (r *run) nodePorts(ctx context.Context) []verify.Result {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: labels()},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app.kubernetes.io/name": Name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(r.opt.Port))}}}}
	s, err := r.env.Kube.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return []verify.Result{verify.Failf("", "", "create Service %s/%s: %v", Namespace, Name, err)}
	}
	r.svc = s
	np := s.Spec.Ports[0].NodePort
	res := make([]verify.Result, len(r.env.Workers))
	done := make(chan struct{}, len(r.env.Workers))
	for i, w := range r.env.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			addr := net.JoinHostPort(w.IP(), strconv.Itoa(int(np)))
			dial := func(ctx context.Context, _, _ string) (net.Conn, error) { return r.env.DialFrom(ctx, r.env.From, addr) }
			var body string
			var code int
			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, r.opt.Timeout)
			defer cancel()
			// kube-proxy programs the port within a second or so of the
			// Service; retried until then.
			err := poll.Until(wctx, poll.Options{Interval: 500 * time.Millisecond, Max: 2 * time.Second, Attempt: 10 * time.Second}, func(ctx context.Context) error {
				var err error
				body, code, err = httpGet(ctx, dial, "http://"+addr+"/")
				return err
			})
			if err != nil {
				res[i] = verify.Failf(w.Name, "kube-proxy on "+w.Name+" programs NodePorts: see 'journalctl -u kube-proxy' there; the pod's worker must be reachable from it (pod routes)",
					"NodePort %d on %s from %s: %v", np, addr, r.env.From, err)
				return
			}
			res[i] = verify.OKf(w.Name, "GET http://%s/ from %s: HTTP %d %s (%s)", addr, r.env.From, code, quoteShort(body), time.Since(start).Round(10*time.Millisecond))
		}()
	}
	for range r.env.Workers {
		<-done
	}
	return res
}

// dnsName is a name the pod resolves and the address it must get.
type dnsName struct{ name, want string }

// dns resolves kubernetes.default (the search path) and the smoke
// Service's name from the pod: through the image's /resolve when it has
// one, else getent or nslookup in its shell. A failure says why (the DNS
// Service, the endpoints, the pod network) as verify does.
func (r *run) dns(ctx context.Context) verify.Result {
	k, err := r.env.Kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return verify.Failf("", "", "read Service default/kubernetes: %v", err)
	}
	if r.svc == nil {
		return verify.Failf("", "fix smoke/nodeport first", "not run: no Service")
	}
	names := []dnsName{
		{"kubernetes.default", k.Spec.ClusterIP},
		{Name, r.svc.Spec.ClusterIP},
		{Name + "." + Namespace + ".svc." + r.env.Domain, r.svc.Spec.ClusterIP},
	}
	how := ""
	var got []string
	start := time.Now()
	for _, n := range names {
		wctx, cancel := context.WithTimeout(ctx, min(r.opt.Timeout, time.Minute))
		var addrs []string
		err := poll.Until(wctx, poll.Options{Interval: 500 * time.Millisecond, Max: 2 * time.Second, Attempt: 25 * time.Second}, func(ctx context.Context) error {
			var err error
			addrs, how, err = r.resolve(ctx, n.name)
			if err == nil && !slices.Contains(addrs, n.want) {
				err = fmt.Errorf("%s is %v, not %s", n.name, addrs, n.want)
			}
			if errors.Is(err, errNoResolver) {
				return poll.Stop(err)
			}
			return err
		})
		cancel()
		if errors.Is(err, errNoResolver) {
			return verify.Failf("", "the image must answer GET /resolve?name= (like "+HelloImage+") or have getent or nslookup in a shell", "%v", err)
		}
		if err != nil {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			cause, hint := r.env.DNSCause(cctx, r.pod.Spec.NodeName, err)
			ccancel()
			return verify.Failf(r.pod.Spec.NodeName, hint, "%s from pod %s (%s): %v; cause: %s", n.name, r.pod.Name, how, err, cause)
		}
		got = append(got, n.name+" -> "+n.want)
	}
	return verify.OKf(r.pod.Spec.NodeName, "from pod %s (%s): %s (%s)", r.pod.Name, how, strings.Join(got, ", "), time.Since(start).Round(10*time.Millisecond))
}

var errNoResolver = errors.New("the image can neither answer /resolve nor run getent or nslookup")

var ipv4 = regexp.MustCompile(`\b(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})\b`)

// resolve asks the pod for name's addresses.
func (r *run) resolve(ctx context.Context, name string) ([]string, string, error) {
	if r.fwd != "" {
		// The pod's resolver may take its time (timeouts, the search list).
		body, code, err := httpGetTimeout(ctx, nil, "http://"+r.fwd+"/resolve?name="+url.QueryEscape(name), 20*time.Second)
		switch {
		case err != nil:
			return nil, "GET /resolve", fmt.Errorf("%s: GET /resolve: %w", name, err)
		case code == http.StatusOK:
			return strings.Fields(body), "GET /resolve", nil
		case code != http.StatusNotFound:
			return nil, "GET /resolve", fmt.Errorf("%s: %s", name, strings.TrimSpace(body))
		}
		// No /resolve in this image: the shell's way below.
	}
	out, err := execIn(ctx, r.env.Kube, r.env.Rest, r.pod, "app", []string{"sh", "-c", "getent hosts " + name + " || nslookup " + name})
	if err != nil && strings.Contains(err.Error(), "executable file not found") {
		return nil, "", errNoResolver
	}
	// nslookup names the server it asked first: only the lines after
	// the name's own count.
	if i := strings.Index(out, "Name:"); i >= 0 {
		out = out[i:]
	}
	addrs := ipv4.FindAllString(out, -1)
	if len(addrs) == 0 {
		if err == nil {
			err = errors.New("no address")
		}
		return nil, "getent/nslookup", fmt.Errorf("%s: %v %s", name, err, quoteShort(strings.TrimSpace(out)))
	}
	return addrs, "getent/nslookup", nil
}

// httpGet is one GET with dial (nil: the default), without keep-alives.
func httpGet(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), u string) (string, int, error) {
	return httpGetTimeout(ctx, dial, u, 10*time.Second)
}

func httpGetTimeout(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), u string, timeout time.Duration) (string, int, error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: dial, Proxy: nil}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return string(b), resp.StatusCode, err
}

func quoteShort(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 100 {
		s = s[:97] + "..."
	}
	return strconv.Quote(s)
}
