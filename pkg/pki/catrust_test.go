package pki

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// A state directory made before the cluster CA's trust bundle existed: Check
// names the missing bundle (so up's pki step runs), Generate writes it equal
// to the CA and leaves every kubeconfig byte for byte as it was (their
// certificate-authority-data, now the bundle, is the same CA), and a second
// Generate changes nothing.
func TestClusterCATrustBundle(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	caPEM, err := os.ReadFile(dir.Cert(CA))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dir.Cert(CATrustBundle)); err != nil || !bytes.Equal(b, caPEM) {
		t.Fatalf("bundle of a new state directory is not the CA: %v", err)
	}
	kcs := map[string][]byte{}
	for _, k := range Kubeconfigs(inv) {
		b, err := os.ReadFile(dir.Kubeconfig(k.Name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.Load(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cfg.Clusters[inv.Cluster].CertificateAuthorityData, caPEM) {
			t.Errorf("kubeconfig %s does not trust the CA", k.Name)
		}
		kcs[k.Name] = b
	}

	// As an earlier hardway left it.
	if err := os.Remove(dir.Cert(CATrustBundle)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range Check(inv, dir, time.Now()) {
		if r.Kind == KindTrustBundle && r.Name == CATrustBundle {
			found = r.State == CheckFailed && strings.Contains(strings.Join(r.Problems, ";"), "missing")
		}
	}
	if !found {
		t.Error("Check does not name the missing bundle")
	}
	rs := generate(t, inv, dir, Options{})
	for _, r := range rs {
		switch {
		case r.Name == CATrustBundle:
			if r.Status != Created {
				t.Errorf("bundle: %s", r.Status)
			}
		case r.Status != Reused:
			t.Errorf("%s %s: %s %s", r.Kind, r.Name, r.Status, r.Reason)
		}
	}
	for name, want := range kcs {
		if b, _ := os.ReadFile(dir.Kubeconfig(name)); !bytes.Equal(b, want) {
			t.Errorf("kubeconfig %s changed", name)
		}
	}
	if rs := Check(inv, dir, time.Now()); AnyFailed(rs) {
		t.Errorf("after Generate: %+v", rs)
	}

	// A bundle that is not the CA (and no rotation recorded) is an error
	// that Generate repairs.
	if err := os.WriteFile(dir.Cert(CATrustBundle), readFile(t, dir.Cert(FrontProxyCA)), 0o644); err != nil {
		t.Fatal(err)
	}
	if rs := Check(inv, dir, time.Now()); !AnyFailed(rs) {
		t.Error("a foreign bundle passes Check")
	}
	generate(t, inv, dir, Options{})
	if b, _ := os.ReadFile(dir.Cert(CATrustBundle)); !bytes.Equal(b, caPEM) {
		t.Error("Generate did not rewrite the bundle")
	}
	for _, r := range generate(t, inv, dir, Options{}) {
		if r.Status != Reused {
			t.Errorf("third Generate: %s %s: %s", r.Kind, r.Name, r.Status)
		}
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
