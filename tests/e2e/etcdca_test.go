package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/verify"
)

// Issue 12 §1 and §4: etcd trusts a CA of its own, so a certificate from
// the cluster CA (a worker's kube-proxy or kubelet certificate, or admin's)
// gets nothing from etcd; and a cluster made before the etcd CA migrates
// to one with 'hardway rotate ca --which etcd', with an apiserver ready and
// an etcd quorum at every poll, killed after its first phase and finished
// by the next run.

func (e *env) stateDir() state.Dir { return state.Dir(filepath.Join(filepath.Dir(e.inv), ".hardway")) }

// etcdTLS is a TLS config for etcd with the state directory's certificate
// name and what the state directory trusts for etcd now.
func (e *env) etcdTLS(t *testing.T, name string) *tls.Config {
	t.Helper()
	st := e.stateDir()
	pool := x509.NewCertPool()
	for _, f := range []string{st.Cert(pki.EtcdTrustBundle), st.Cert(pki.CA)} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(b)
	}
	cert, err := tls.LoadX509KeyPair(st.Cert(name), st.Key(name))
	if err != nil {
		t.Fatal(err)
	}
	// GetClientCertificate, not Certificates: Go sends a certificate from
	// Certificates only when the server's request names its CA, so a
	// certificate of another CA would never reach etcd and the test would
	// prove nothing about etcd refusing it. This one is always sent.
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
}

// etcdRead reads a key from the member on addr with the named certificate,
// through etcd's own client (gRPC).
func (e *env) etcdRead(t *testing.T, addr, name string) error {
	t.Helper()
	cli, err := etcd.New(etcd.Config{Endpoints: []string{"https://" + addr + ":2379"}, TLS: e.etcdTLS(t, name)})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/registry/namespaces/default")
	return err
}

// etcdRefuses proves with a bare TLS connection that the member on addr
// rejects the named client certificate in the handshake: with TLS 1.3 the
// client's side completes, and the server's alert arrives at the first read.
// A certificate etcd accepts reads nothing (etcd waits for gRPC) until the
// deadline. It returns the alert, or an error saying there was none.
func (e *env) etcdRefuses(t *testing.T, addr, name string) (string, error) {
	t.Helper()
	d := &tls.Dialer{Config: e.etcdTLS(t, name)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr+":2379")
	if err != nil {
		if strings.Contains(err.Error(), "remote error: tls:") {
			return err.Error(), nil
		}
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if err != nil && strings.Contains(err.Error(), "remote error: tls:") {
		return err.Error(), nil
	}
	return "", errors.New("etcd took the certificate (read: " + errString(err) + ")")
}

func errString(err error) string {
	if err == nil {
		return "data"
	}
	return err.Error()
}

// expectEtcdTrust checks each member: the apiservers' etcd client
// certificate reads, and the cluster-CA certificates are refused (refused
// true) or read (refused false: a single-CA cluster).
func (e *env) expectEtcdTrust(t *testing.T, refused bool) {
	t.Helper()
	for _, h := range e.res.Hosts {
		if err := e.etcdRead(t, h.Address, "apiserver-etcd-client"); err != nil {
			t.Errorf("%s: apiserver-etcd-client cannot read etcd: %v", h.Name, err)
		}
		for _, name := range []string{"kube-proxy", "admin"} {
			alert, rerr := e.etcdRefuses(t, h.Address, name)
			err := e.etcdRead(t, h.Address, name)
			switch {
			case refused && (err == nil || rerr != nil):
				t.Errorf("%s: etcd accepts the cluster CA's %s certificate: read %v, handshake %v", h.Name, name, err, rerr)
			case refused && strings.Contains(alert, "certificate required"):
				t.Errorf("%s: %s was never sent to etcd (%s): the check proves nothing", h.Name, name, alert)
			case refused:
				t.Logf("%s: %s refused: %s", h.Name, name, alert)
			case !refused && (err != nil || rerr == nil):
				t.Errorf("%s: the single-CA cluster's etcd refuses %s: read %v, alert %q", h.Name, name, err, alert)
			}
		}
	}
}

// makeSingleCA turns the lab cluster into one as a hardway before the etcd
// CA made it: etcd's certificates signed by the cluster CA, etcd trusting
// the cluster CA, no etcd CA in the state directory or on the hosts.
//
// The honest way there is the one such a cluster took: its state directory
// is generated the old way (pki.Options.LegacyEtcd, which no command sets:
// it signs etcd's rows with the cluster CA) and pushed by `up`. The switch
// from the etcd CA back to the cluster CA is the very replacement of trust
// that cannot roll member by member (a restarted member would trust no
// peer), so the control plane is stopped first and `up` starts it again,
// all members together, on their data. One difference from an old cluster
// stays: the apiservers' --etcd-cafile names the trust bundle file (the
// cluster CA here), as this hardway renders it; 'rotate ca' refuses hosts
// whose units differ from that (TestCARotationGuards).
func (e *env) makeSingleCA(t *testing.T) {
	t.Helper()
	for _, h := range e.res.Hosts {
		if out, err := e.ssh(h.Name, "systemctl stop kube-scheduler kube-controller-manager kube-apiserver etcd && rm -f /etc/etcd/etcd-ca.crt /etc/etcd/etcd-ca.key"); err != nil {
			t.Fatalf("%s: %v\n%s", h.Name, err, out)
		}
	}
	st := e.stateDir()
	gone := []string{st.Cert(pki.EtcdCA), st.Key(pki.EtcdCA), st.Cert(pki.EtcdTrustBundle),
		st.Cert("apiserver-etcd-client"), st.Key("apiserver-etcd-client")}
	for _, pat := range []string{"etcd-server-*", "etcd-peer-*"} {
		m, _ := filepath.Glob(filepath.Join(st.PKIDir(), pat))
		gone = append(gone, m...)
	}
	for _, p := range gone {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := inventory.Load(e.inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Generate(context.Background(), inv, st, pki.Options{LegacyEtcd: true}); err != nil {
		t.Fatal(err)
	}
	e.mustUp()
	if legacy, err := pki.EtcdLegacy(st); !legacy || err != nil {
		t.Fatalf("not a single-CA state directory: %v %v", legacy, err)
	}
}

type rotateCAJSON struct {
	CA           string   `json:"ca"`
	OldCA        string   `json:"oldCA"`
	New          string   `json:"new"`
	ResumedAfter int      `json:"resumedAfterPhase"`
	Reissued     []string `json:"reissued"`
	Complete     bool     `json:"complete"`
}

func (e *env) etcdCAScenarios(t *testing.T) {
	t.Run("etcd trusts only its own CA: kube-proxy's and admin's cluster-CA certificates are refused in the TLS handshake, the apiservers' etcd client reads", func(t *testing.T) {
		e.t = t
		e.expectEtcdTrust(t, true)
		for _, h := range e.res.Hosts {
			out, err := e.ssh(h.Name, "tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value etcd)/cmdline | grep -e --peer-cert-allowed-cn")
			if err != nil || !strings.Contains(out, "controller-1,controller-2,controller-3") {
				t.Errorf("%s: etcd runs without --peer-cert-allowed-cn: %v %q", h.Name, err, out)
			}
		}
	})

	t.Run("a single-CA cluster migrates to the etcd CA with rotate ca --which etcd, killed after phase 1 and finished by the next run: an apiserver ready and an etcd quorum at every poll but one at most, the Secret reads back, kube-proxy refused", func(t *testing.T) {
		e.t = t
		e.makeSingleCA(t)
		// The hole the etcd CA closes, seen for real: any cluster-CA
		// certificate reads etcd. (This is also what makes the refusal
		// checks below able to fail.)
		e.expectEtcdTrust(t, false)
		rep := e.verify()
		if f := failures(rep); len(f) > 0 {
			t.Fatalf("verify on the single-CA cluster:\n  %s", strings.Join(f, "\n  "))
		}
		if !hasWarning(rep, "etcd trusts the cluster CA", "hardway rotate ca --which etcd") {
			t.Error("verify does not warn about etcd trusting the cluster CA")
		}
		e.kubectl(t, "create", "secret", "generic", "hardway-etcdca", "--from-literal=k=kept-through-the-ca-rotation")

		st := e.stateDir()
		record := st.CARotation(pki.WhichEtcd)
		before := treeDigest(t, string(st))
		code, out, errs := e.hardway("rotate", "ca", "--which", "etcd", "--dry-run")
		if code != 0 || !strings.Contains(out, "make a new etcd-ca") || !strings.Contains(out, "would controller-2: write /etc/etcd/ca.crt") ||
			!strings.Contains(out, "etcd: restart") {
			t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
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
		// SIGKILL by its PID as soon as phase 1 (trust-both) is recorded:
		// the bundle is on every host, the leaves are still the old ones.
		done, log, err := killWhenRecorded(t, exec.Command(bin, "rotate", "ca", "--which", "etcd", "-i", e.inv), record, 1, 8*time.Minute, func() { a.end(t) })
		t.Logf("killed after phase %d was recorded (%v):\n%s", done, err, log)
		// Mid-rotation, up refuses and names the command that finishes it.
		code, out, errs = e.hardway("up", "--dry-run")
		if code == 0 || !strings.Contains(errs, "a CA rotation is under way") || !strings.Contains(errs, "hardway rotate ca --which etcd") {
			t.Errorf("up mid-rotation: exit %d\n%s\n%s", code, out, errs)
		}
		code, out, errs = e.hardway("rotate", "ca", "--which", "etcd", "-o", "json")
		a.end(t)
		t.Logf("the rotation took %s in all; the second run:\n%s", time.Since(start).Round(time.Second), errs)
		if code != 0 {
			t.Fatalf("rotate after the kill: exit %d\n%s\n%s", code, out, errs)
		}
		var res rotateCAJSON
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// The killed run may have reissued some of the 7 leaves before the
		// kill reached it (local writes, quick): the next run reissues the
		// rest, and every one of them is checked below.
		if !res.Complete || res.ResumedAfter < 1 || res.OldCA != pki.CA || res.CA != pki.EtcdCA || len(res.Reissued) > 7 {
			t.Errorf("result: %+v", res)
		}
		if _, err := os.Stat(record); err == nil {
			t.Error("the record is still there after a complete rotation")
		}

		// etcd trusts the etcd CA alone, on every host, and it is the
		// state directory's.
		want, err := os.ReadFile(st.Cert(pki.EtcdCA))
		if err != nil {
			t.Fatal(err)
		}
		etcdCA, err := pki.ParseCertificate(want)
		if err != nil {
			t.Fatal(err)
		}
		leaves := []string{"apiserver-etcd-client"}
		for _, h := range e.res.Hosts {
			leaves = append(leaves, "etcd-server-"+h.Name, "etcd-peer-"+h.Name)
		}
		for _, name := range leaves {
			b, err := os.ReadFile(st.Cert(name))
			if err != nil {
				t.Fatal(err)
			}
			if c, err := pki.ParseCertificate(b); err != nil || c.CheckSignatureFrom(etcdCA) != nil {
				t.Errorf("%s is not signed by the new etcd CA: %v", name, err)
			}
		}
		for _, h := range e.res.Hosts {
			for _, p := range []string{"/etc/etcd/ca.crt", "/var/lib/kubernetes/etcd-ca.crt", "/etc/etcd/etcd-ca.crt"} {
				got, err := e.ssh(h.Name, "cat "+p)
				if err != nil || got != string(want) {
					t.Errorf("%s:%s is not the new etcd CA alone: %v", h.Name, p, err)
				}
			}
		}
		e.expectEtcdTrust(t, true)
		if v := e.kubectl(t, "get", "secret", "hardway-etcdca", "-o", "jsonpath={.data.k}"); v != base64.StdEncoding.EncodeToString([]byte("kept-through-the-ca-rotation")) {
			t.Errorf("the Secret reads back %q", v)
		}
		rep = e.verify()
		if f := failures(rep); len(f) > 0 {
			t.Errorf("verify after the rotation:\n  %s", strings.Join(f, "\n  "))
		}
		if hasWarning(rep, "etcd trusts the cluster CA", "") || hasWarning(rep, "CA rotation is under way", "") {
			t.Error("verify still warns about etcd's CA")
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("up after the rotation:\n%s", out)
		}
	})
	e.frontProxyScenario(t)
}

// frontProxyScenario rotates the front-proxy CA: the same three phases,
// with the apiservers and controller-managers as the trusting side.
func (e *env) frontProxyScenario(t *testing.T) {
	t.Run("rotate ca --which front-proxy: an apiserver ready and an etcd quorum at every poll but one at most; the apiservers trust and publish the new CA, front-proxy-client is reissued from it, the old one retired", func(t *testing.T) {
		e.t = t
		st := e.stateDir()
		oldPEM, err := os.ReadFile(st.Cert(pki.FrontProxyCA))
		if err != nil {
			t.Fatal(err)
		}
		old, err := pki.ParseCertificate(oldPEM)
		if err != nil {
			t.Fatal(err)
		}
		a := e.startAvailability(t)
		start := time.Now()
		code, out, errs := e.hardway("rotate", "ca", "--which", "front-proxy", "-o", "json")
		a.end(t)
		t.Logf("the rotation took %s:\n%s", time.Since(start).Round(time.Second), errs)
		if code != 0 {
			t.Fatalf("rotate: exit %d\n%s\n%s", code, out, errs)
		}
		var res rotateCAJSON
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !res.Complete || res.OldCA != pki.FrontProxyCA || strings.Join(res.Reissued, ",") != "front-proxy-client" {
			t.Errorf("result: %+v", res)
		}
		newPEM, err := os.ReadFile(st.Cert(pki.FrontProxyCA))
		if err != nil || string(newPEM) == string(oldPEM) {
			t.Fatalf("the front-proxy CA was not replaced: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(pki.RetiredDir(st), "front-proxy-ca-"+old.SerialNumber.Text(16)+".crt")); err != nil || string(got) != string(oldPEM) {
			t.Errorf("the old front-proxy CA is not kept: %v", err)
		}
		client, err := os.ReadFile(st.Cert("front-proxy-client"))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range e.res.Hosts {
			for p, want := range map[string][]byte{"/var/lib/kubernetes/front-proxy-trust.crt": newPEM, "/var/lib/kubernetes/front-proxy-ca.crt": newPEM,
				"/var/lib/kubernetes/front-proxy-client.crt": client} {
				if got, err := e.ssh(h.Name, "cat "+p); err != nil || got != string(want) {
					t.Errorf("%s:%s is not the state directory's new one: %v", h.Name, p, err)
				}
			}
		}
		// The apiservers publish what they trust for extension apiservers.
		cm := e.kubectl(t, "-n", "kube-system", "get", "configmap", "extension-apiserver-authentication", "-o", "jsonpath={.data.requestheader-client-ca-file}")
		newCert, _ := pki.ParseCertificate(newPEM)
		if !pemHolds(cm, newCert.Raw) {
			t.Errorf("extension-apiserver-authentication does not publish the new front-proxy CA:\n%s", cm)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Errorf("verify after the rotation:\n  %s", strings.Join(f, "\n  "))
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("up after the rotation:\n%s", out)
		}
	})
}

// pemHolds reports whether a PEM bundle holds the certificate raw.
func pemHolds(bundle string, raw []byte) bool {
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if bytes.Equal(b.Bytes, raw) {
			return true
		}
	}
}

func hasWarning(r *verify.Report, msg, hint string) bool {
	for _, x := range r.Results {
		if x.Status == verify.Warn && strings.Contains(x.Message, msg) && strings.Contains(x.Hint, hint) {
			return true
		}
	}
	return false
}

// treeDigest is every file's path, mode and content under dir, but the run
// logs (every command writes one).
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "logs" {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String() + "\n")
		if fi.Mode().IsRegular() && d.Name() != "lock" {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
