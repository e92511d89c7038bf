package pki

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// etcdRows are the certificates etcd trusts for: what the etcd CA signs.
var etcdRows = []string{"apiserver-etcd-client", "etcd-server-cp-0", "etcd-server-cp-1", "etcd-server-cp-2",
	"etcd-peer-cp-0", "etcd-peer-cp-1", "etcd-peer-cp-2"}

func TestNewClusterHasEtcdCA(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	rs := byName(generate(t, inv, dir, Options{}))
	if r := rs[KindCA+"/"+EtcdCA]; r.Status != Created {
		t.Fatalf("etcd-ca: %+v", r)
	}
	etcdCA, ca := readCert(t, dir, EtcdCA), readCert(t, dir, CA)
	for _, n := range etcdRows {
		c := readCert(t, dir, n)
		if c.CheckSignatureFrom(etcdCA) != nil || c.CheckSignatureFrom(ca) == nil {
			t.Errorf("%s: not signed by the etcd CA alone", n)
		}
	}
	// Worker certificates come from the cluster CA, never from etcd's.
	for _, n := range []string{"kube-proxy", "kubelet-w-0", "admin"} {
		if readCert(t, dir, n).CheckSignatureFrom(etcdCA) == nil {
			t.Errorf("%s is signed by the etcd CA", n)
		}
	}
	want, _ := os.ReadFile(dir.Cert(EtcdCA))
	if got, _ := os.ReadFile(dir.Cert(EtcdTrustBundle)); string(got) != string(want) {
		t.Errorf("trust bundle is not the etcd CA:\n%s", got)
	}
	if legacy, err := EtcdLegacy(dir); legacy || err != nil {
		t.Errorf("legacy %v, %v", legacy, err)
	}
}

// A state directory an older hardway made (etcd's certificates from the
// cluster CA, no etcd CA) stays that way: a new etcd CA would replace what
// the running etcd trusts.
func TestLegacyEtcdStaysLegacy(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{LegacyEtcd: true})
	if _, err := os.Stat(dir.Cert(EtcdCA)); err == nil {
		t.Fatal("legacy generate made an etcd CA")
	}
	before := snapshot(t, string(dir))
	for _, r := range generate(t, inv, dir, Options{}) {
		if r.Status != Reused {
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	after := snapshot(t, string(dir))
	for p := range after {
		if before[p] != after[p] {
			t.Errorf("%s changed", p)
		}
	}
	if _, err := os.Stat(dir.Cert(EtcdCA)); err == nil {
		t.Fatal("a second run made an etcd CA")
	}
	if legacy, err := EtcdLegacy(dir); !legacy || err != nil {
		t.Errorf("legacy %v, %v", legacy, err)
	}
	want, _ := os.ReadFile(dir.Cert(CA))
	if got, _ := os.ReadFile(dir.Cert(EtcdTrustBundle)); string(got) != string(want) {
		t.Error("a legacy cluster's etcd trust bundle is not the cluster CA")
	}
	if rs := Check(inv, dir, time.Now()); AnyFailed(rs) {
		t.Errorf("check: %+v", rs)
	}
	// certs renew keeps signing etcd's leaves with the cluster CA.
	leaves, err := ResolveLeaves(inv, []string{"etcd-server"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Renew(t.Context(), inv, dir, leaves, time.Now()); err != nil {
		t.Fatal(err)
	}
	if readCert(t, dir, "etcd-server-cp-0").CheckSignatureFrom(readCert(t, dir, CA)) != nil {
		t.Error("renewed etcd-server-cp-0 not signed by the cluster CA")
	}
}

// Losing the etcd CA's files is not "an older cluster": the leaves on disk
// say another CA signed them, and a new one is refused.
func TestLostEtcdCARefused(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	os.Remove(dir.Cert(EtcdCA))
	os.Remove(dir.Key(EtcdCA))
	before := snapshot(t, string(dir))
	_, err := Generate(t.Context(), inv, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "refusing to make a new etcd CA") {
		t.Fatalf("got %v", err)
	}
	after := snapshot(t, string(dir))
	for p := range after {
		if before[p] != after[p] {
			t.Errorf("%s changed", p)
		}
	}
}

// The state side of a rotation, phase by phase, from a legacy cluster and
// then from the etcd CA to a new one.
func TestCARotationState(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{LegacyEtcd: true})
	caPEM, _ := os.ReadFile(dir.Cert(CA))
	caKey, _ := os.ReadFile(dir.Key(CA))

	rotate := func(wantOld string) {
		t.Helper()
		now := time.Now()
		r, err := StartCARotation(inv, dir, WhichEtcd, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.OldCA != wantOld {
			t.Fatalf("old CA %s, want %s", r.OldCA, wantOld)
		}
		oldPEM := r.OldCert
		if len(r.StateChanges(dir, PhaseTrustBoth)) == 0 {
			t.Fatal("nothing to change before the rotation")
		}
		if err := SaveCARotation(dir, r, now); err != nil {
			t.Fatal(err)
		}
		if err := r.ApplyState(dir, PhaseTrustBoth); err != nil {
			t.Fatal(err)
		}
		if c := r.StateChanges(dir, PhaseTrustBoth); len(c) > 0 {
			t.Fatalf("after ApplyState: %v", c)
		}
		if got, _ := os.ReadFile(dir.Cert(EtcdTrustBundle)); string(got) != strings.TrimSpace(oldPEM)+"\n"+r.NewCert {
			t.Errorf("phase 1 bundle:\n%s", got)
		}
		// Between phases 1 and 2 the leaves signed by the old CA are the
		// rotation's order, not a fault: Check warns and names the command.
		for _, res := range Check(inv, dir, time.Now()) {
			if res.State == CheckFailed {
				t.Errorf("check between phases 1 and 2: %s failed: %v", res.Name, res.Problems)
			}
			if slices.Contains(etcdRows, res.Name) &&
				!slices.ContainsFunc(res.Problems, func(p string) bool { return strings.Contains(p, "hardway rotate ca --which etcd") }) {
				t.Errorf("check between phases 1 and 2: %s: %v, want the rotation named", res.Name, res.Problems)
			}
		}
		if _, err := Generate(t.Context(), inv, dir, Options{}); err == nil || !strings.Contains(usererr.HintOf(err), "hardway rotate ca --which etcd") {
			t.Errorf("generate during a rotation: %v", err)
		}
		back, err := LoadCARotation(dir, WhichEtcd)
		if err != nil || back == nil || back.NewKey != r.NewKey {
			t.Fatalf("load: %v", err)
		}
		todo, err := r.UnsignedLeaves(inv, dir)
		if err != nil || len(todo) != len(etcdRows) {
			t.Fatalf("unsigned %d, %v", len(todo), err)
		}
		if _, err := Renew(t.Context(), inv, dir, todo, now); err != nil {
			t.Fatal(err)
		}
		if todo, _ := r.UnsignedLeaves(inv, dir); len(todo) != 0 {
			t.Errorf("still unsigned: %v", todo)
		}
		if err := r.ApplyState(dir, PhaseDropOld); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(dir.Cert(EtcdTrustBundle)); string(got) != r.NewCert {
			t.Errorf("phase 3 bundle:\n%s", got)
		}
		if err := FinishCARotation(dir, WhichEtcd); err != nil {
			t.Fatal(err)
		}
		// Afterwards a plain run has nothing to do.
		for _, res := range generate(t, inv, dir, Options{}) {
			if res.Status != Reused {
				t.Errorf("after the rotation: %s %s (%s)", res.Name, res.Status, res.Reason)
			}
		}
		if rs := Check(inv, dir, time.Now()); AnyFailed(rs) {
			t.Errorf("check: %+v", rs)
		}
	}
	rotate(CA)
	// The cluster CA is untouched: it still signs everyone else.
	if got, _ := os.ReadFile(dir.Cert(CA)); string(got) != string(caPEM) {
		t.Error("the cluster CA changed")
	}
	if got, _ := os.ReadFile(dir.Key(CA)); string(got) != string(caKey) {
		t.Error("the cluster CA's key changed")
	}
	if legacy, _ := EtcdLegacy(dir); legacy {
		t.Error("still legacy after the rotation")
	}

	first := readCert(t, dir, EtcdCA)
	firstKey, _ := os.ReadFile(dir.Key(EtcdCA))
	rotate(EtcdCA)
	// The replaced etcd CA is kept, key and all, for older backups.
	base := RetiredDir(dir) + "/etcd-ca-" + first.SerialNumber.Text(16)
	if got, err := os.ReadFile(base + ".key"); err != nil || string(got) != string(firstKey) {
		t.Errorf("retired key: %v", err)
	}
	if fi, err := os.Stat(base + ".key"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("retired key mode: %v %v", fi, err)
	}
	if readCert(t, dir, EtcdCA).Equal(first) {
		t.Error("the etcd CA was not replaced")
	}
}

func TestLookupCATarget(t *testing.T) {
	if _, err := LookupCATarget("cluster"); err == nil || !strings.Contains(err.Error(), "no such CA") {
		t.Errorf("cluster: %v", err)
	}
	kt, err := LookupCATarget(WhichKubernetes)
	if err != nil || kt.CA != CA || kt.Bundle != CATrustBundle ||
		strings.Join(kt.Leaves(), ",") != "admin,kube-controller-manager,kube-scheduler,kube-proxy,kubelet,kube-apiserver,apiserver-kubelet-client" {
		t.Errorf("%+v %v", kt, err)
	}
	tg, err := LookupCATarget(WhichEtcd)
	if err != nil || tg.CA != EtcdCA || strings.Join(tg.Leaves(), ",") != "apiserver-etcd-client,etcd-server,etcd-peer" {
		t.Errorf("%+v %v", tg, err)
	}
}

// The front-proxy CA rotates the same way: the bundle (old + new) first,
// front-proxy-client reissued, then the new CA alone; the old CA retired.
func TestCARotationFrontProxyState(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	old := readCert(t, dir, FrontProxyCA)
	oldPEM, _ := os.ReadFile(dir.Cert(FrontProxyCA))
	if got, _ := os.ReadFile(dir.Cert(FrontProxyTrustBundle)); string(got) != string(oldPEM) {
		t.Fatal("the front-proxy bundle is not the front-proxy CA")
	}
	now := time.Now()
	r, err := StartCARotation(inv, dir, WhichFrontProxy, now)
	if err != nil || r.OldCA != FrontProxyCA {
		t.Fatalf("%+v %v", r, err)
	}
	if err := SaveCARotation(dir, r, now); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyState(dir, PhaseTrustBoth); err != nil {
		t.Fatal(err)
	}
	todo, err := r.UnsignedLeaves(inv, dir)
	if err != nil || len(todo) != 1 || todo[0].Name != "front-proxy-client" {
		t.Fatalf("unsigned %+v, %v", todo, err)
	}
	if _, err := Renew(t.Context(), inv, dir, todo, now); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyState(dir, PhaseDropOld); err != nil {
		t.Fatal(err)
	}
	if err := FinishCARotation(dir, WhichFrontProxy); err != nil {
		t.Fatal(err)
	}
	if readCert(t, dir, "front-proxy-client").CheckSignatureFrom(readCert(t, dir, FrontProxyCA)) != nil {
		t.Error("front-proxy-client is not signed by the new CA")
	}
	if got, err := os.ReadFile(RetiredDir(dir) + "/front-proxy-ca-" + old.SerialNumber.Text(16) + ".crt"); err != nil || string(got) != string(oldPEM) {
		t.Errorf("retired: %v", err)
	}
	for _, res := range generate(t, inv, dir, Options{}) {
		if res.Status != Reused {
			t.Errorf("after the rotation: %s %s (%s)", res.Name, res.Status, res.Reason)
		}
	}
}
