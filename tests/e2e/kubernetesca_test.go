package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/pki"
)

// Issue 12 §4 for the cluster CA: `hardway rotate ca --which kubernetes` on
// the worker cluster, which holds a Secret, pods and CoreDNS. The rotation
// is killed once its first phase is recorded and finished by the next run,
// while pollers see a ready apiserver (trusting what the state directory
// trusts at that moment) and a linearizable etcd read at every poll.
// Afterwards every leaf the cluster CA signs is the new CA's, in the state
// directory and as the apiservers and kubelets serve it, the old CA is
// retired, the Secret reads back, kubectl works with the rewritten admin
// kubeconfig, a new pod starts and resolves a new Service's name (CoreDNS
// watches the API with the new CA), verify passes and up has nothing to do.
// It leaves the cluster converged, on a new cluster CA.

// kubernetesCASecret is the Secret that must read back.
const kubernetesCASecret = "hardway-kubernetes-ca"

func (e *workersEnv) kubernetesCAScenarios(t *testing.T) {
	t.Run("rotate ca --which kubernetes killed after phase 1 and finished by the next run: an apiserver ready and an etcd quorum at every poll but one at most, every leaf from the new CA, the Secret reads back, a new pod resolves DNS", func(t *testing.T) {
		e.t = t
		st := e.stateDir()
		if out, err := e.k("get", "secret", kubernetesCASecret); err != nil {
			if !strings.Contains(out, "NotFound") {
				t.Fatalf("get secret: %v %s", err, out)
			}
			e.mustK("create", "secret", "generic", kubernetesCASecret, "--from-literal=k=before-the-rotation")
		}
		oldPEM, err := os.ReadFile(st.Cert(pki.CA))
		if err != nil {
			t.Fatal(err)
		}
		old, err := pki.ParseCertificate(oldPEM)
		if err != nil {
			t.Fatal(err)
		}

		// The dry run plans every phase and changes nothing.
		before := treeDigest(t, string(st))
		code, out, errs := e.hardway("rotate", "ca", "--which", "kubernetes", "--dry-run", "--cache-dir", e.cacheDir)
		if code != 0 {
			t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{"make a new ca", "would worker-2: write /var/lib/kubelet/ca.crt", "would worker-1: write /var/lib/kube-proxy/kubeconfig",
			"would controller-3: write /var/lib/kubernetes/ca-trust.crt", "wait until kube-root-ca.crt in every namespace holds the trust bundle (old + new CA",
			"restart Deployment kube-system/coredns (rolling)", "wait for Node worker-1 to be Ready", "rotation complete"} {
			if !strings.Contains(out, want) {
				t.Errorf("dry run lacks %q:\n%s", want, out)
			}
		}
		if after := treeDigest(t, string(st)); after != before {
			t.Fatal("the dry run changed the state directory")
		}

		bin := filepath.Join(t.TempDir(), "hardway")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/hardway/hardway/cmd/hardway").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		a := e.startAvailability(t)
		start := time.Now()
		done, log, err := killWhenRecorded(t, exec.Command(bin, "rotate", "ca", "--which", "kubernetes", "-i", e.inv, "--cache-dir", e.cacheDir), st.CARotation(pki.WhichKubernetes), 1, 12*time.Minute, func() { a.end(t) })
		first := time.Since(start)
		t.Logf("killed after phase %d was recorded (%v), %s in:\n%s", done, err, first.Round(time.Second), log)
		// Mid-rotation, up refuses with the command that finishes it.
		if code, out, errs := e.hardway("up", "--dry-run"); code == 0 || !strings.Contains(out+errs, "hardway rotate ca --which kubernetes") {
			t.Errorf("up mid-rotation: exit %d\n%s\n%s", code, out, errs)
		}
		code, out, errs = e.hardway("rotate", "ca", "--which", "kubernetes", "-o", "json", "--cache-dir", e.cacheDir)
		a.end(t)
		t.Logf("FIGURE rotate ca --which kubernetes (3 controllers, 2 workers): %s in all (%s until killed after phase 1); the second run:\n%s",
			time.Since(start).Round(time.Second), first.Round(time.Second), errs)
		if code != 0 {
			t.Fatalf("rotate after the kill: exit %d\n%s\n%s", code, out, errs)
		}
		var res rotateCAJSON
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// Reissued may be fewer than the CA's 8 leaves: the killed run may
		// have reissued some before the kill (every leaf is checked below).
		if !res.Complete || res.ResumedAfter < 1 || res.OldCA != pki.CA || res.CA != pki.CA || len(res.Reissued) > 8 {
			t.Errorf("result: %+v", res)
		}

		// The state directory: a new CA, the old one retired, every leaf
		// and kubeconfig from the new one, the bundle the new CA alone.
		newPEM, err := os.ReadFile(st.Cert(pki.CA))
		if err != nil || string(newPEM) == string(oldPEM) {
			t.Fatalf("the cluster CA was not replaced: %v", err)
		}
		newCA, err := pki.ParseCertificate(newPEM)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(pki.RetiredDir(st), "ca-"+old.SerialNumber.Text(16)+".crt")); err != nil || string(got) != string(oldPEM) {
			t.Errorf("the old cluster CA is not kept: %v", err)
		}
		if b, err := os.ReadFile(st.Cert(pki.CATrustBundle)); err != nil || string(b) != string(newPEM) {
			t.Errorf("the bundle is not the new CA alone: %v", err)
		}
		leaves := []string{"admin", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kube-apiserver", "apiserver-kubelet-client", "kubelet-worker-1", "kubelet-worker-2"}
		for _, name := range leaves {
			b, err := os.ReadFile(st.Cert(name))
			if err != nil {
				t.Fatal(err)
			}
			c, err := pki.ParseCertificate(b)
			if err != nil || c.CheckSignatureFrom(newCA) != nil {
				t.Errorf("%s is not signed by the new CA: %v", name, err)
			}
		}
		// As served: the apiservers on 6443, the kubelets on 10250, each
		// verified against the new CA alone.
		pool := x509.NewCertPool()
		pool.AddCert(newCA)
		for _, h := range e.res.Hosts {
			port := "6443"
			if strings.HasPrefix(h.Name, "worker-") {
				port = "10250"
			}
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: h.Address}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(h.Address, port))
			cancel()
			if err != nil {
				t.Errorf("%s:%s does not serve a certificate of the new CA: %v", h.Name, port, err)
				continue
			}
			c.Close()
		}
		// What pods trust: kube-root-ca.crt is the new CA alone.
		cm := e.mustK("-n", "default", "get", "configmap", "kube-root-ca.crt", "-o", "jsonpath={.data.ca\\.crt}")
		if !pemHolds(cm, newCA.Raw) || pemHolds(cm, old.Raw) {
			t.Errorf("kube-root-ca.crt is not the new CA alone:\n%s", cm)
		}
		// The Secret, with kubectl and the rewritten admin kubeconfig.
		if v := e.mustK("get", "secret", kubernetesCASecret, "-o", "jsonpath={.data.k}"); v != "YmVmb3JlLXRoZS1yb3RhdGlvbg==" {
			t.Errorf("the Secret reads back %q", v)
		}
		// CoreDNS was restarted and watches the API with the new CA: no
		// certificate error in its log since.
		if logs, err := e.liveLogs("kube-system", "k8s-app=kube-dns"); err != nil || strings.Contains(logs, "x509") {
			t.Errorf("CoreDNS logs: %v\n%s", err, logs)
		}
		// A new pod starts and resolves a new Service's name (smoke makes
		// both); logs, exec and port-forward go through the kubelets'
		// reissued certificates.
		code, out, errs = e.hardway("smoke")
		if code != 0 || !strings.Contains(out, "PASS  smoke/dns") {
			t.Errorf("smoke after the rotation: exit %d\n%s\n%s", code, out, errs)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Errorf("verify after the rotation:\n  %s", strings.Join(f, "\n  "))
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("up after the rotation:\n%s", out)
		}
	})
}
