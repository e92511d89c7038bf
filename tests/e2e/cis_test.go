package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/lab"
	"github.com/hardway/hardway/pkg/pki"
)

// kubeBenchReport is what the checks need of kube-bench's --json.
type kubeBenchReport struct {
	Controls []struct {
		ID    string `json:"id"`
		Tests []struct {
			Results []struct {
				ID     string `json:"test_number"`
				Text   string `json:"test_desc"`
				Status string `json:"status"`
				Actual string `json:"actual_value"`
			} `json:"results"`
		} `json:"tests"`
	} `json:"Controls"`
	Totals struct {
		Pass int `json:"total_pass"`
		Fail int `json:"total_fail"`
		Warn int `json:"total_warn"`
		Info int `json:"total_info"`
	} `json:"Totals"`
}

// cisScenarios: the CIS Kubernetes Benchmark as kube-bench runs it on each
// host (hack/cis/run.sh, built by make cis-build), and the settings behind
// it seen working from outside: the kubelets' API refuses anonymous
// requests and has no read-only port, one node's credentials reach
// neither another node's Secrets nor its Node, and a privileged pod is
// refused by Pod Security and recorded in every apiserver's audit log.
func (e *workersEnv) cisScenarios(t *testing.T) {
	t.Run("kube-bench (CIS 1.12): no check FAILs on any controller or worker", func(t *testing.T) {
		e.t = t
		results := filepath.Join(t.TempDir(), "cis")
		var hosts []string
		for _, h := range append(append([]lab.Host{}, e.res.Hosts...), e.res.Workers...) {
			hosts = append(hosts, h.Name)
		}
		if len(hosts) != 5 {
			t.Fatalf("hosts %v: want 3 controllers and 2 workers", hosts)
		}
		args := append([]string{"../../hack/cis/run.sh", "-F", e.res.SSHConfig, "-k", e.kubeconfig, "-o", results}, hosts...)
		cmd := exec.Command("bash", args...)
		cmd.Env = append(os.Environ(), "HARDWAY_MIRROR="+e.mirror)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hack/cis/run.sh: %v (run 'make cis-build' if kube-bench is missing)\n%s", err, out)
		}
		t.Logf("FIGURE kube-bench on 3 controllers + 2 workers: %s\n%s", time.Since(start).Round(time.Second), out)
		for _, h := range hosts {
			b, err := os.ReadFile(filepath.Join(results, h+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var reps []kubeBenchReport
			if err := json.Unmarshal(b, &reps); err != nil {
				// One target set is one object, several an array.
				var one kubeBenchReport
				if err2 := json.Unmarshal(b, &one); err2 != nil {
					t.Fatalf("%s: %v", h, err)
				}
				reps = []kubeBenchReport{one}
			}
			pass := 0
			for _, r := range reps {
				for _, c := range r.Controls {
					for _, g := range c.Tests {
						for _, x := range g.Results {
							switch x.Status {
							case "FAIL":
								t.Errorf("%s: %s FAIL: %s (actual: %.200s)", h, x.ID, x.Text, x.Actual)
							case "PASS":
								pass++
							}
						}
					}
				}
			}
			// A benchmark that ran nothing cannot fail: the hosts' own
			// counts are 55+ on a controller and 19+ on a worker.
			if min := map[bool]int{true: 50, false: 17}[strings.HasPrefix(h, "controller-")]; pass < min {
				t.Errorf("%s: %d checks passed, fewer than %d: did kube-bench find the components?\n%s", h, pass, min, b)
			}
		}
	})

	t.Run("etcd runs as etcd with its keys root's; a data dir etcd ran on as root is etcd's again at the next start", func(t *testing.T) {
		e.t = t
		h := e.res.Hosts[0].Name
		out, err := e.ssh(h, "ps -o user= -C etcd; stat -c '%U:%G %a' /var/lib/etcd /var/lib/etcd/member/snap/db /etc/etcd/etcd-server.key")
		if f := strings.Fields(out); err != nil || len(f) == 0 || f[0] != "etcd" || !strings.Contains(out, "etcd:etcd 700\netcd:etcd") || !strings.Contains(out, "root:root 600") {
			t.Fatalf("%s: etcd's user, data and key: %v\n%s", h, err, out)
		}
		// What a cluster an older hardway made has: etcd stopped, every
		// file of the member root's. systemd's StateDirectory= hands the
		// tree back before etcd starts.
		if out, err := e.ssh(h, "systemctl stop etcd && chown -R root:root /var/lib/etcd"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		e.mustUp()
		out, err = e.ssh(h, "systemctl is-active etcd; find /var/lib/etcd ! -user etcd | head -5")
		if err != nil || strings.TrimSpace(out) != "active" {
			t.Errorf("%s after up: etcd not active, or files not etcd's: %v\n%s", h, err, out)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Errorf("verify:\n  %s", strings.Join(f, "\n  "))
		}
	})

	t.Run("a kubelet refuses an anonymous request (401) and has no read-only port", func(t *testing.T) {
		e.t = t
		for _, w := range e.res.Workers {
			// Verified against the cluster CA: the serving certificate is
			// the node's own, not a self-signed one.
			pool := e.clusterPool(t)
			cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
			resp, err := cl.Get("https://" + net.JoinHostPort(w.Address, "10250") + "/pods")
			if err != nil {
				t.Errorf("%s:10250: %v", w.Name, err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s:10250/pods without credentials: %s, want 401", w.Name, resp.Status)
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort(w.Address, "10255"), 5*time.Second)
			if err == nil {
				c.Close()
				t.Errorf("%s:10255 (the read-only port) accepts connections", w.Name)
			} else if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s:10255: %v, want connection refused", w.Name, err)
			}
		}
	})

	t.Run("one node's kubelet credentials read neither another node's pods' Secrets nor change another Node (Node authorizer, NodeRestriction)", func(t *testing.T) {
		e.t = t
		e.mustK("create", "secret", "generic", "cis-node-secret", "--from-literal=k=v")
		e.apply(`apiVersion: v1
kind: Pod
metadata: {name: cis-secret-user}
spec:
  nodeName: worker-2
  terminationGracePeriodSeconds: 1
  containers:
  - {name: pause, image: ` + pauseImage + `, imagePullPolicy: Never, volumeMounts: [{name: s, mountPath: /s}]}
  volumes:
  - {name: s, secret: {secretName: cis-node-secret}}
`)
		defer e.k("delete", "pod", "cis-secret-user", "--wait=false")
		defer e.k("delete", "secret", "cis-node-secret")
		server := "https://" + net.JoinHostPort(e.res.Hosts[0].Address, "6443")
		asNode := func(node string, args ...string) (string, error) {
			kc := e.stateDir().Kubeconfig(node)
			cmd := exec.Command(e.kubectl, append([]string{"--kubeconfig", kc, "--server", server, "--request-timeout", "30s"}, args...)...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		// The pod's own node reads it (once the Node authorizer's graph has
		// the pod): the refusal below is about the node, not the Secret.
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := asNode("worker-2", "get", "secret", "cis-node-secret", "-o", "name")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker-2 cannot read the Secret its own pod mounts: %v\n%s", err, out)
			}
			time.Sleep(time.Second)
		}
		if out, err := asNode("worker-1", "get", "secret", "cis-node-secret"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("worker-1 reads worker-2's pod's Secret: %v\n%s", err, out)
		}
		if out, err := asNode("worker-1", "label", "node", "worker-2", "hardway.io/cis=worker-1"); err == nil || !strings.Contains(out, "Forbidden") && !strings.Contains(out, "forbidden") {
			t.Errorf("worker-1 changes Node worker-2: %v\n%s", err, out)
		}
		if out := e.mustK("get", "node", "worker-2", "-o", "jsonpath={.metadata.labels}"); strings.Contains(out, "hardway.io/cis") {
			t.Errorf("Node worker-2 carries worker-1's label: %s", out)
		}
	})

	t.Run("a privileged pod is refused by Pod Security (baseline) through every apiserver, and each one's audit log records the refusal", func(t *testing.T) {
		e.t = t
		for _, h := range e.res.Hosts {
			if !strings.HasPrefix(h.Name, "controller-") {
				continue
			}
			name := "cis-privileged-" + h.Name
			pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"containers":[{"name":"p","image":%q,"imagePullPolicy":"Never","securityContext":{"privileged":true}}]}}`, name, pauseImage)
			cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "--server", "https://"+net.JoinHostPort(h.Address, "6443"), "create", "-f", "-")
			cmd.Stdin = strings.NewReader(pod)
			out, err := cmd.CombinedOutput()
			if err == nil {
				e.k("delete", "pod", name, "--wait=false")
				t.Errorf("%s admitted a privileged pod in default:\n%s", h.Name, out)
				continue
			}
			if !strings.Contains(string(out), "violates PodSecurity") {
				t.Errorf("%s refused the pod, but not for Pod Security: %v\n%s", h.Name, err, out)
			}
			// The log backend writes as the request ends; a few seconds at most.
			var last string
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			for ctx.Err() == nil {
				last, err = e.ssh(h.Name, "grep -F '\"name\":\""+name+"\"' /var/log/kubernetes/audit.log | grep -F '\"code\":403' | grep -F 'pod-security.kubernetes.io/enforce-policy' | tail -1")
				if err == nil && strings.TrimSpace(last) != "" {
					break
				}
				time.Sleep(time.Second)
			}
			cancel()
			if strings.TrimSpace(last) == "" {
				t.Errorf("%s: no 403 with pod-security.kubernetes.io/enforce-policy for %s in its audit log (%v)", h.Name, name, err)
			} else if !strings.Contains(last, `"baseline:latest"`) {
				t.Errorf("%s: the audit event names another policy than baseline:latest:\n%s", h.Name, last)
			}
		}
		// The same pod without privileged is admitted (a server-side dry
		// run): the level is baseline, not a refusal of everything.
		cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "create", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cis-baseline"},"spec":{"containers":[{"name":"p","image":%q,"imagePullPolicy":"Never"}]}}`, pauseImage))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("an unprivileged pod is refused in default: %v\n%s", err, out)
		}
	})
}

// clusterPool is the state directory's cluster CA trust bundle.
func (e *workersEnv) clusterPool(t *testing.T) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(e.stateDir().Cert(pki.CATrustBundle))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("no certificate in the cluster CA trust bundle")
	}
	return pool
}
