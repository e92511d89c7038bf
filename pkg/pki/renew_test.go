package pki

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

func TestResolveLeaves(t *testing.T) {
	inv, _ := loadInventory(t, baseInventory, "ecdsa-p256")
	names := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name)
		}
		return out
	}
	all, err := ResolveLeaves(inv, nil, true)
	if err != nil || len(all) != len(Entries(inv))-3 || slices.ContainsFunc(all, Entry.IsCA) {
		t.Fatalf("--all: %v %v", err, names(all))
	}
	// A row stands for all its hosts; the order is the table's.
	got, err := ResolveLeaves(inv, []string{"kubelet-w-1", "etcd-peer", "admin"}, false)
	if want := []string{"admin", "kubelet-w-1", "etcd-peer-cp-0", "etcd-peer-cp-1", "etcd-peer-cp-2"}; err != nil || !slices.Equal(names(got), want) {
		t.Errorf("got %v %v, want %v", names(got), err, want)
	}
	for _, tc := range []struct {
		names []string
		all   bool
		want  string
	}{
		{nil, false, "no certificate named"},
		{[]string{"admin"}, true, "not both"},
		{[]string{"ca"}, false, "ca is a CA"},
		{[]string{"front-proxy-ca"}, false, "is a CA"},
		{[]string{"kubelet-w-9"}, false, `no certificate "kubelet-w-9"`},
	} {
		_, err := ResolveLeaves(inv, tc.names, tc.all)
		if err == nil || !strings.Contains(err.Error(), tc.want) || usererr.CodeOf(err) != usererr.CodeUsage || usererr.HintOf(err) == "" {
			t.Errorf("%v all=%v: %v (code %d, hint %q)", tc.names, tc.all, err, usererr.CodeOf(err), usererr.HintOf(err))
		}
	}
}

// Renew reissues exactly the named leaves from the same CA, with new keys,
// the same subjects and SANs, and rewrites only the kubeconfigs embedding them.
func TestRenew(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	before := snapshot(t, string(dir))
	leaves, err := ResolveLeaves(inv, []string{"admin", "etcd-server-cp-1", "front-proxy-client"}, false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rs, err := Renew(t.Context(), inv, dir, leaves, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%+v", rs)
	}
	for _, r := range rs {
		if r.OldSerial == "" || r.OldSerial == r.Serial || r.NotAfter.Before(now.Add(364*24*time.Hour)) {
			t.Errorf("%+v", r)
		}
	}
	after := snapshot(t, string(dir))
	changed := func(p string) bool { return before[p].data != after[p].data }
	for p := range after {
		want := false
		for _, n := range []string{"admin", "etcd-server-cp-1", "front-proxy-client"} {
			want = want || p == dir.Cert(n) || p == dir.Key(n)
		}
		want = want || p == dir.Kubeconfig("admin")
		if changed(p) != want {
			t.Errorf("%s: changed %v, want %v", p, changed(p), want)
		}
	}
	for n, ca := range map[string]string{"admin": CA, "etcd-server-cp-1": EtcdCA} {
		c := readCert(t, dir, n)
		if err := c.CheckSignatureFrom(readCert(t, dir, ca)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if c := readCert(t, dir, "etcd-server-cp-1"); c.Subject.CommonName != "cp-1" || !slices.Contains(CertSANs(c), "192.0.2.11") {
		t.Errorf("subject %s, SANs %v", c.Subject, CertSANs(c))
	}
	if rs := Check(inv, dir, time.Now()); AnyFailed(rs) {
		t.Errorf("check after renew: %+v", rs)
	}
	// A generate afterwards has nothing to do.
	for _, r := range generate(t, inv, dir, Options{}) {
		if r.Status != Reused {
			t.Errorf("%s %s: %s (%s)", r.Kind, r.Name, r.Status, r.Reason)
		}
	}

	// Never a new CA: a missing CA key is an error, and nothing is written.
	os.Remove(dir.Key(FrontProxyCA))
	before = snapshot(t, string(dir))
	leaves, _ = ResolveLeaves(inv, []string{"front-proxy-client"}, false)
	if _, err := Renew(t.Context(), inv, dir, leaves, now); err == nil || !strings.Contains(err.Error(), "front-proxy-ca.key") {
		t.Errorf("renew without the CA key: %v", err)
	}
	after = snapshot(t, string(dir))
	for p := range after {
		if changed(p) {
			t.Errorf("%s changed", p)
		}
	}
}

// A kubelet client certificate of an earlier hardway, in system:masters,
// is reissued without the group.
func TestKubeletClientLeavesSystemMasters(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	if c := readCert(t, dir, "apiserver-kubelet-client"); len(c.Subject.Organization) != 0 {
		t.Fatalf("O %v", c.Subject.Organization)
	}
	// What an earlier table issued.
	caPEM, _ := os.ReadFile(dir.Cert(CA))
	keyPEM, _ := os.ReadFile(dir.Key(CA))
	ca, key, err := checkCAFiles(CA, caPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	is, err := newIssuer(CA, ca, key, inv.PKI.Algorithm, inv.PKI.LeafValidity.D())
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	for _, x := range Entries(inv) {
		if x.Name == "apiserver-kubelet-client" {
			e = x
		}
	}
	e.Org = []string{"system:masters"}
	certPEM, kPEM, err := is.issue(e, time.Now(), inv.PKI.LeafValidity.D())
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.WritePair(e.Name, certPEM, kPEM); err != nil {
		t.Fatal(err)
	}
	r := byName(generate(t, inv, dir, Options{}))["certificate/apiserver-kubelet-client"]
	if r.Status != Reissued || r.Reason != "O changed (system:masters → )" {
		t.Errorf("%s (%s)", r.Status, r.Reason)
	}
	if c := readCert(t, dir, "apiserver-kubelet-client"); len(c.Subject.Organization) != 0 || c.Subject.CommonName != "kube-apiserver-kubelet-client" {
		t.Errorf("reissued as %s", c.Subject)
	}
}

// An expiry names the command that fixes it; other problems do not.
func TestRenewHint(t *testing.T) {
	for _, tc := range []struct {
		r    CheckResult
		want bool
	}{
		{CheckResult{Name: "kube-apiserver", Kind: KindCertificate, CA: CA, Problems: []string{"expired on 2026-01-01"}}, true},
		{CheckResult{Name: "kube-apiserver", Kind: KindCertificate, CA: CA, Problems: []string{"inside its renewal window (the last 121d): x"}}, true},
		{CheckResult{Name: "kube-apiserver", Kind: KindCertificate, CA: CA, Problems: []string{"does not cover the inventory: missing x"}}, false},
		{CheckResult{Name: "ca", Kind: KindCA, Problems: []string{"expired on 2026-01-01"}}, false},
	} {
		h := RenewHint(tc.r)
		if got := strings.Contains(h, "hardway certs renew "+tc.r.Name); got != tc.want {
			t.Errorf("%+v: %q", tc.r, h)
		}
	}
	// Check itself names it inside the window.
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	for _, r := range Check(inv, dir, time.Now().Add(300*24*time.Hour)) {
		if r.Kind == KindCertificate && (r.State != CheckWarning || !strings.Contains(strings.Join(r.Problems, ";"), "hardway certs renew "+r.Name)) {
			t.Errorf("%s: %s %v", r.Name, r.State, r.Problems)
		}
		if r.Kind == KindCertificate && !strings.Contains(CheckHint(inv, dir, r), "hardway certs renew "+r.Name) {
			t.Errorf("%s: hint %q", r.Name, CheckHint(inv, dir, r))
		}
	}
}
