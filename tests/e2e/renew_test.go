package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// renewScenarios is issue 12 §2's acceptance: `hardway certs renew --all`
// on a cluster that holds a Secret. The availability pollers (see
// startAvailability) ask every ~200 ms whether any apiserver answers
// /readyz and whether etcd serves a linearizable read (quorum); every poll
// must succeed. (A first poller counted the members that answered a status
// request within 2 s, and on a loaded machine a slow member counted as a
// lost quorum.) Afterwards the Secret reads back, every leaf has a new serial —
// in the state directory and as the apiservers and etcd members serve it —
// and verify passes. It depends only on the cold up, and leaves the cluster
// converged.
func (e *env) renewScenarios(t *testing.T) {
	kubectl := filepath.Join(e.mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kubectl")
	st := filepath.Join(filepath.Dir(e.inv), ".hardway")
	kc := filepath.Join(st, "kubeconfigs/admin.kubeconfig")
	// --server: an earlier subtest moved the inventory's apiServerEndpoint
	// (and so the admin kubeconfig) to a name only the certificate knows.
	srv := "https://" + e.res.Hosts[0].Address + ":6443"

	t.Run("hardening: no admin kubeconfig on the hosts; the kubelet client certificate is not in system:masters", func(t *testing.T) {
		e.t = t
		for _, h := range e.res.Hosts {
			if out, err := e.ssh(h.Name, "ls /var/lib/kubernetes/"); err != nil || strings.Contains(out, "admin") {
				t.Errorf("%s: %v\n%s", h.Name, err, out)
			}
		}
		b, err := os.ReadFile(filepath.Join(st, "pki/apiserver-kubelet-client.crt"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil || len(c.Subject.Organization) != 0 || c.Subject.CommonName != "kube-apiserver-kubelet-client" {
			t.Errorf("apiserver-kubelet-client: %v %s", err, c.Subject)
		}
		// What the certificate may do as its own user, asked of the API:
		// the kubelets' API through the binding, nothing else.
		kubectl := filepath.Join(e.mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kubectl")
		for verb, want := range map[string]string{"get nodes --subresource=proxy": "yes", "create nodes --subresource=proxy": "yes",
			"get secrets -A": "no", "create clusterrolebindings": "no"} {
			// stdout only: kubectl warns on stderr about cluster-scoped resources.
			out, _ := exec.Command(kubectl, append([]string{"--kubeconfig", kc, "--server", srv, "auth", "can-i", "--as", "kube-apiserver-kubelet-client"}, strings.Fields(verb)...)...).Output()
			if strings.TrimSpace(string(out)) != want {
				t.Errorf("can-i %s as the kubelet client: %q, want %s", verb, out, want)
			}
		}
	})

	t.Run("certs renew --all --dry-run plans the roll and changes nothing", func(t *testing.T) {
		e.t = t
		before := e.world()
		code, out, errs := e.hardway("certs", "renew", "--all", "--dry-run", "--cache-dir", e.cacheDir)
		if code != 0 {
			t.Fatalf("certs renew --dry-run: exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{
			"[renew] would reissue",
			"[push] would controller-2: write /etc/etcd/etcd-server.crt (0644, renewed)",
			"[etcd] would controller-1: etcd: restart (files changed)",
			"[control-plane] would controller-3: kube-apiserver: restart (files changed)",
			"[control-plane] would controller-1: kube-scheduler: restart (files changed)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the dry run does not plan %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, ".service (") {
			t.Errorf("the dry run pushes a unit:\n%s", out)
		}
		after := e.world()
		for h, b := range before.hosts {
			if a := after.hosts[h]; a != b {
				t.Errorf("%s changed:\n%s", h, diffLines(b, a))
			}
		}
		if fmt.Sprint(before.local) != fmt.Sprint(after.local) {
			t.Errorf("the local directory changed")
		}
	})

	t.Run("certs renew --all keeps an apiserver ready and etcd's quorum at every poll but one at most; the Secret reads back; serials changed; verify passes", func(t *testing.T) {
		e.t = t
		if out, err := exec.Command(kubectl, "--kubeconfig", kc, "--server", srv, "create", "secret", "generic", "hardway-e2e-renew",
			"--from-literal=answer=43").CombinedOutput(); err != nil {
			t.Fatalf("create secret: %v %s", err, out)
		}
		leaves := []string{"admin", "kube-controller-manager", "kube-scheduler", "kube-apiserver", "apiserver-kubelet-client",
			"apiserver-etcd-client", "front-proxy-client"}
		for _, h := range e.res.Hosts {
			leaves = append(leaves, "etcd-server-"+h.Name, "etcd-peer-"+h.Name)
		}
		before := map[string]string{}
		for _, n := range leaves {
			before[n] = serialOf(t, filepath.Join(st, "pki", n+".crt"))
		}
		served := e.servedSerials(t, st)
		for k, v := range served {
			if want := before[strings.SplitN(k, "@", 2)[0]]; v != want {
				t.Fatalf("%s serves serial %s, the state directory has %s", k, v, want)
			}
		}

		a := e.startAvailability(t)
		code, out, errs := e.hardway("certs", "renew", "--all", "--cache-dir", e.cacheDir)
		a.end(t)
		t.Logf("certs renew:\n%s", out)
		if code != 0 {
			t.Fatalf("certs renew --all: exit %d\n%s\n%s", code, out, errs)
		}

		got, err := exec.Command(kubectl, "--kubeconfig", kc, "--server", srv, "get", "secret", "hardway-e2e-renew",
			"-o", "jsonpath={.data.answer}").CombinedOutput()
		if err != nil || string(got) != "NDM=" {
			t.Errorf("the Secret after renew: %v %q", err, got)
		}
		for _, n := range leaves {
			if s := serialOf(t, filepath.Join(st, "pki", n+".crt")); s == before[n] {
				t.Errorf("%s: serial %s unchanged", n, s)
			}
		}
		// What the services serve now is the new certificate: they were
		// restarted, not only given new files.
		for k, v := range e.servedSerials(t, st) {
			name := strings.SplitN(k, "@", 2)[0]
			if v == before[name] || v != serialOf(t, filepath.Join(st, "pki", name+".crt")) {
				t.Errorf("%s serves serial %s (before %s)", k, v, before[name])
			}
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after certs renew:\n  %s", strings.Join(f, "\n  "))
		}
		exec.Command(kubectl, "--kubeconfig", kc, "--server", srv, "delete", "secret", "hardway-e2e-renew").Run()
	})
}

// serialOf is the serial number of the certificate in a PEM file.
func serialOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c.SerialNumber.Text(16)
}

// servedSerials is the serial of the certificate each apiserver and each
// etcd member presents, by "<leaf>@<host>", read over TLS from this
// machine (the lab's bridge reaches the hosts).
func (e *env) servedSerials(t *testing.T, st string) map[string]string {
	t.Helper()
	client, err := tls.LoadX509KeyPair(filepath.Join(st, "pki/apiserver-etcd-client.crt"), filepath.Join(st, "pki/apiserver-etcd-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, h := range e.res.Hosts {
		for leaf, port := range map[string]string{"kube-apiserver": "6443", "etcd-server-" + h.Name: "2379"} {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
				Config: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{client}}} // #nosec: only the serial is read
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(h.Address, port))
			cancel()
			if err != nil {
				t.Fatalf("%s:%s: %v", h.Name, port, err)
			}
			cs := c.(*tls.Conn).ConnectionState()
			out[leaf+"@"+h.Name] = cs.PeerCertificates[0].SerialNumber.Text(16)
			c.Close()
		}
	}
	return out
}
