package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/verify"
)

// certs renew plans, from a converged cluster with an unrelated drift: the
// renewed leaves' files only (counted as changed before they are reissued,
// as in a dry run), then exactly the restarts they bring, host by host; the
// plan reads only, and the reissue changes the named leaves and nothing else.
func TestRenewPlan(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st, Renew: []string{"kube-apiserver", "etcd-server-c2", "kube-scheduler"}}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	// Drift that up would push and renew must leave alone.
	unit := "/etc/systemd/system/kube-controller-manager.service"
	fc.model["c1"].files[unit] = "644 root 0 root 0 12 0000"

	var names []string
	for _, s := range fc.RenewSteps() {
		names = append(names, s.Name)
	}
	if want := []string{StepPreflight, StepIdentity, StepRenew, StepFetch, StepRender, StepPush, StepEtcd, StepControlPlane, StepRBAC, "workers"}; !slices.Equal(names, want) {
		t.Fatalf("steps %v, want %v", names, want)
	}

	renew, err := fc.planRenew(ctx, nil)
	if err != nil || len(renew) != 1 || renew[0].Kind != plan.Reissue {
		t.Fatalf("renew: %v %q", err, descs(renew))
	}
	for _, s := range []string{"kube-apiserver: expires", "etcd-server-c2: expires", "kube-scheduler: expires", "rewrites kubeconfig kube-scheduler"} {
		if !strings.Contains(renew[0].Diff, s) {
			t.Errorf("renew plan lacks %q:\n%s", s, renew[0].Diff)
		}
	}

	push, err := fc.planPush(ctx, plan.Planned(renew))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range push {
		if a.Kind != plan.Write || !strings.Contains(a.Desc, "renewed") {
			t.Errorf("push: %s %s: %s", a.Kind, a.Host, a.Desc)
		}
		got = append(got, a.Host+" "+strings.Fields(a.Desc)[1]+" "+strings.Join(a.Restarts, ","))
	}
	want := []string{
		"c1 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c1 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c1 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
		"c2 /etc/etcd/etcd-server.crt etcd",
		"c2 /etc/etcd/etcd-server.key etcd",
		"c2 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c2 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c2 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
		"c3 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c3 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c3 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
	}
	if !slices.Equal(got, want) {
		t.Errorf("push:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	earlier := plan.Planned(append(renew, push...))
	et, err := fc.planEtcd(ctx, earlier)
	if err != nil || len(et) != 1 || et[0].Host != "c2" || et[0].Kind != plan.Restart {
		t.Errorf("etcd: %v %q", err, descs(et))
	}
	cp, err := fc.planControlPlane(ctx, earlier)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := descs(cp), []string{
		"restart c1: kube-apiserver: restart (files changed)",
		"restart c2: kube-apiserver: restart (files changed)",
		"restart c3: kube-apiserver: restart (files changed)",
		"restart c1: kube-scheduler: restart (files changed)",
		"restart c2: kube-scheduler: restart (files changed)",
		"restart c3: kube-scheduler: restart (files changed)",
	}; !slices.Equal(got, want) {
		t.Errorf("control plane:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}

	serial := func(name string) string { return readSerial(t, st, name) }
	before := map[string]string{}
	for _, e := range pki.Entries(inv) {
		before[e.Name] = serial(e.Name)
	}
	sched, _ := os.ReadFile(st.Kubeconfig("kube-scheduler"))
	cm, _ := os.ReadFile(st.Kubeconfig("kube-controller-manager"))
	if err := renew[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range pki.Entries(inv) {
		changed := serial(e.Name) != before[e.Name]
		if changed != slices.Contains(fc.opt.Renew, e.Name) {
			t.Errorf("%s: serial changed %v", e.Name, changed)
		}
	}
	if b, _ := os.ReadFile(st.Kubeconfig("kube-scheduler")); string(b) == string(sched) {
		t.Error("the scheduler's kubeconfig still embeds the old certificate")
	}
	if b, _ := os.ReadFile(st.Kubeconfig("kube-controller-manager")); string(b) != string(cm) {
		t.Error("the controller-manager's kubeconfig changed")
	}
	if rs := pki.Check(inv, st, time.Now()); pki.AnyFailed(rs) {
		t.Errorf("check after renew: %+v", rs)
	}
}

func readSerial(t *testing.T, st interface{ Cert(string) string }, name string) string {
	t.Helper()
	b, err := os.ReadFile(st.Cert(name))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// An admin kubeconfig left on a control-plane host (an earlier hardway
// pushed it) is removed by up unless the inventory asks for it; nothing
// else is planned on a converged host, and asking keeps (pushes) it.
func TestOldAdminKubeconfigRemoved(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.model["c2"].oldAdmin = true
	as, err := fc.planPush(ctx, nil)
	if got := descs(as); err != nil || len(got) != 1 || got[0] != "write c2: remove /var/lib/kubernetes/admin.kubeconfig (system:masters; pki.adminKubeconfigOnHosts is off)" {
		t.Fatalf("%v %q", err, got)
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}
	if err := as[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	if cmds := fc.commands("c2"); cmds[len(cmds)-1] != "rm -f /var/lib/kubernetes/admin.kubeconfig" {
		t.Errorf("last command %q", cmds[len(cmds)-1])
	}

	inv.PKI.AdminKubeconfigOnHosts = true
	fc2 := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc2.withRelease()
	as, err = fc2.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range as {
		if strings.Contains(a.Desc, "admin.kubeconfig") {
			n++
			if !strings.HasPrefix(a.Desc, "write /var/lib/kubernetes/admin.kubeconfig") {
				t.Errorf("%s", a.Desc)
			}
		}
	}
	if n != 3 {
		t.Errorf("admin kubeconfig pushed to %d hosts, want 3", n)
	}
}

// verify's (and so the daemon's) findings about a leaf's expiry name the
// command that fixes it.
func TestExpiryFindingsNameCertsRenew(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	for _, tc := range []struct {
		name      string
		notBefore time.Time
		notAfter  time.Time
		status    verify.Status
	}{
		{"in the renewal window", time.Now().Add(-355 * 24 * time.Hour), time.Now().Add(10 * 24 * time.Hour), verify.Warn},
		{"expired", time.Now().Add(-400 * 24 * time.Hour), time.Now().Add(-24 * time.Hour), verify.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeLeaf(t, st, "kube-scheduler", "system:kube-scheduler", tc.notBefore, tc.notAfter)
			var got []verify.Result
			for _, r := range fc.checkPKI(context.Background()) {
				// (Its kubeconfig, now out of date, is another finding.)
				if strings.HasPrefix(r.Message, "kube-scheduler:") && !strings.Contains(r.Message, "out of date") {
					got = append(got, r)
				}
			}
			if len(got) != 1 || got[0].Status != tc.status || !strings.Contains(got[0].Hint, "hardway certs renew kube-scheduler") {
				t.Errorf("%+v", got)
			}
		})
	}
}

// writeLeaf signs a client certificate for name with the CA in st, valid
// from notBefore to notAfter, and writes it with a new key.
func writeLeaf(t *testing.T, st state.Dir, name, cn string, notBefore, notAfter time.Time) {
	t.Helper()
	caCert := parsePEMCert(t, st.Cert("ca"))
	kb, _ := os.ReadFile(st.Key("ca"))
	blk, _ := pem.Decode(kb)
	var caKey any
	var err error
	if caKey, err = x509.ParsePKCS8PrivateKey(blk.Bytes); err != nil {
		if caKey, err = x509.ParseECPrivateKey(blk.Bytes); err != nil {
			t.Fatalf("ca key: %v", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(st.Key(name), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	os.WriteFile(st.Cert(name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func parsePEMCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
