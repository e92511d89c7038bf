package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/verify"
)

// Issue 15 §2 and §3: CoreDNS applied by up, verify's DNS checks, and
// `hardway smoke` on the demo cluster — passing, and failing with the right
// cause when CoreDNS has no replica or its Service is gone, until up puts it
// back. It leaves the cluster as it found it (verify passing).
func (e *workersEnv) dnsSmokeScenarios(t *testing.T) {
	t.Run("smoke: verify resolves from each worker, smoke passes and cleans up", func(t *testing.T) {
		e.t = t
		rep := e.verify()
		seen := map[string]bool{}
		for _, r := range rep.Results {
			if strings.HasPrefix(r.Check, "dns/") {
				seen[r.Check+" "+r.Host] = r.Status == verify.Pass
				if r.Status != verify.Pass {
					t.Errorf("%s %s: %s %s (hint: %s)", r.Check, r.Host, r.Status, r.Message, r.Hint)
				}
			}
		}
		for _, want := range []string{"dns/deployment ", "dns/service ", "dns/endpoints ", "dns/resolve worker-1", "dns/resolve worker-2"} {
			if _, ok := seen[want]; !ok {
				t.Errorf("verify has no %q result: %v", want, seen)
			}
		}

		start := time.Now()
		code, out, errs := e.hardway("smoke")
		t.Logf("FIGURE hardway smoke: %s", time.Since(start).Round(100*time.Millisecond))
		if code != 0 {
			t.Fatalf("smoke: exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{"PASS  smoke/secret", "k8s:enc:secretbox:v1:", "PASS  smoke/deployment", "PASS  smoke/port-forward", "hello from hardway-smoke-",
			"PASS  smoke/logs", "hello: listening on :8080", "PASS  smoke/exec", "PASS  smoke/nodeport     worker-1", "PASS  smoke/nodeport     worker-2",
			"PASS  smoke/dns", "kubernetes.default -> 10.32.0.1", "PASS  smoke/cleanup"} {
			if !strings.Contains(out, want) {
				t.Errorf("smoke output lacks %q:\n%s", want, out)
			}
		}
		if out, err := e.k("get", "namespace", "hardway-smoke"); err == nil {
			t.Errorf("the smoke namespace is still there:\n%s", out)
		}

		code, out, errs = e.hardway("smoke", "-o", "json")
		if code != 0 {
			t.Fatalf("smoke -o json: exit %d\n%s\n%s", code, out, errs)
		}
		var r verify.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("smoke -o json: %v\n%s", err, out)
		}
		steps := map[string]int{}
		for _, x := range r.Results {
			steps[x.Check]++
			if x.Status != verify.Pass {
				t.Errorf("smoke -o json: %s %s: %s", x.Check, x.Status, x.Message)
			}
		}
		for _, s := range []string{"smoke/namespace", "smoke/secret", "smoke/deployment", "smoke/port-forward", "smoke/logs", "smoke/exec", "smoke/dns", "smoke/cleanup"} {
			if steps[s] != 1 {
				t.Errorf("smoke -o json: step %s %d times: %v", s, steps[s], steps)
			}
		}
		if steps["smoke/nodeport"] != 2 || r.Fail != 0 {
			t.Errorf("smoke -o json: %d NodePort results, %d failed", steps["smoke/nodeport"], r.Fail)
		}
	})

	t.Run("smoke with CoreDNS scaled to 0 fails at DNS naming the endpoints; up scales it back and smoke passes", func(t *testing.T) {
		e.t = t
		e.mustK("-n", "kube-system", "scale", "deployment", "coredns", "--replicas=0")
		deadline := time.Now().Add(time.Minute)
		for strings.TrimSpace(e.mustK("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "name")) != "" {
			if time.Now().After(deadline) {
				t.Fatal("CoreDNS pods still there a minute after the scale to 0")
			}
			time.Sleep(time.Second)
		}
		code, out, errs := e.hardway("smoke", "--timeout", "30s")
		if code == 0 {
			t.Fatalf("smoke passed without CoreDNS:\n%s", out)
		}
		if !strings.Contains(out, "FAIL  smoke/dns") || !strings.Contains(out, "cause: the endpoints: kube-system/kube-dns has no ready CoreDNS endpoint") ||
			!strings.Contains(out, "PASS  smoke/cleanup") {
			t.Errorf("smoke without CoreDNS:\n%s\n%s", out, errs)
		}
		for _, s := range []string{"PASS  smoke/secret", "PASS  smoke/deployment", "PASS  smoke/exec"} {
			if !strings.Contains(out, s) {
				t.Errorf("smoke without CoreDNS lacks %q (only DNS should fail):\n%s", s, out)
			}
		}
		f := strings.Join(failures(e.verify()), "\n")
		if !strings.Contains(f, "dns/deployment : Deployment kube-system/coredns: 0/0 replicas available (scaled to 0)") ||
			!strings.Contains(f, "dns/endpoints : the endpoints: kube-system/kube-dns has no ready CoreDNS endpoint") {
			t.Errorf("verify without CoreDNS:\n%s", f)
		}
		if dry := e.mustUp("--dry-run"); !strings.Contains(dry, "[dns]     Deployment kube-system/coredns: spec.replicas is 0, want 2") {
			t.Errorf("up --dry-run does not plan CoreDNS back:\n%s", dry)
		}
		if up := e.mustUp(); !strings.Contains(up, "[dns] apply CoreDNS") || !strings.Contains(up, "[dns] wait for CoreDNS") {
			t.Errorf("up did not apply CoreDNS:\n%s", up)
		}
		// Scheduled anew with both workers Ready: one replica on each.
		out = e.mustK("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}")
		if nodes := strings.Fields(out); len(nodes) != 2 || nodes[0] == nodes[1] {
			t.Errorf("CoreDNS pods on %q, want one on each worker", nodes)
		}
		if code, out, errs := e.hardway("smoke"); code != 0 {
			t.Fatalf("smoke after up: exit %d\n%s\n%s", code, out, errs)
		}
	})

	t.Run("smoke without the kube-dns Service fails at DNS naming the Service; up recreates it and smoke passes", func(t *testing.T) {
		e.t = t
		e.mustK("-n", "kube-system", "delete", "service", "kube-dns")
		code, out, errs := e.hardway("smoke", "--timeout", "30s")
		if code == 0 {
			t.Fatalf("smoke passed without the DNS Service:\n%s", out)
		}
		if !strings.Contains(out, "FAIL  smoke/dns") || !strings.Contains(out, "cause: the DNS Service: kube-system/kube-dns is missing") {
			t.Errorf("smoke without the DNS Service:\n%s\n%s", out, errs)
		}
		if dry := e.mustUp("--dry-run"); !strings.Contains(dry, "[dns]     Service kube-system/kube-dns missing") {
			t.Errorf("up --dry-run does not plan the Service back:\n%s", dry)
		}
		e.mustUp()
		if ip := strings.TrimSpace(e.mustK("-n", "kube-system", "get", "svc", "kube-dns", "-o", "jsonpath={.spec.clusterIP}")); ip != "10.32.0.10" {
			t.Errorf("kube-dns recreated on %s, want 10.32.0.10", ip)
		}
		if code, out, errs := e.hardway("smoke"); code != 0 {
			t.Fatalf("smoke after up: exit %d\n%s\n%s", code, out, errs)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("a second up after the repair:\n%s", out)
		}
	})
}
