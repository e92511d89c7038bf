package pki

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/state"
)

func TestCheck(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	t0 := time.Now()
	generate(t, inv, dir, Options{})
	day := 24 * time.Hour

	find := func(rs []CheckResult, kind, name string) CheckResult {
		for _, r := range rs {
			if r.Kind == kind && r.Name == name {
				return r
			}
		}
		t.Fatalf("no result for %s %s", kind, name)
		return CheckResult{}
	}

	t.Run("fresh", func(t *testing.T) {
		rs := Check(inv, dir, t0)
		if len(rs) != len(wantTable)+2+6+len(CATargets()) {
			t.Errorf("%d results", len(rs))
		}
		for _, r := range rs {
			if r.State != CheckOK {
				t.Errorf("%s %s: %s %v", r.Kind, r.Name, r.State, r.Problems)
			}
		}
		if r := find(rs, KindCertificate, "admin"); r.Residual != "364d" {
			t.Errorf("residual %q", r.Residual)
		}
	})
	t.Run("renewal window is a warning", func(t *testing.T) {
		rs := Check(inv, dir, t0.Add(300*day))
		if AnyFailed(rs) {
			t.Error("failed")
		}
		r := find(rs, KindCertificate, "kube-apiserver")
		if r.State != CheckWarning || !strings.Contains(r.Problems[0], "renewal window") {
			t.Errorf("%s %v", r.State, r.Problems)
		}
		if r := find(rs, KindCA, "ca"); r.State != CheckOK {
			t.Errorf("ca: %s %v", r.State, r.Problems)
		}
	})
	t.Run("expired", func(t *testing.T) {
		rs := Check(inv, dir, t0.Add(366*day))
		r := find(rs, KindCertificate, "admin")
		if r.State != CheckFailed || r.Residual != "expired" {
			t.Errorf("%s %s %v", r.State, r.Residual, r.Problems)
		}
	})
	t.Run("CA near its end", func(t *testing.T) {
		rs := Check(inv, dir, t0.Add(3000*day))
		if r := find(rs, KindCA, "ca"); r.State != CheckWarning || !strings.Contains(r.Problems[0], "--replace-ca=ca") {
			t.Errorf("ca: %s %v", r.State, r.Problems)
		}
	})
	t.Run("SANs not covering", func(t *testing.T) {
		inv2 := reload(t, inv, strings.Replace(baseInventory, "192.0.2.12", "192.0.2.99", 1), "ecdsa-p256")
		defer reload(t, inv, baseInventory, "ecdsa-p256")
		rs := Check(inv2, dir, t0)
		if !AnyFailed(rs) {
			t.Error("not failed")
		}
		for _, name := range []string{"kube-apiserver", "etcd-server-cp-2", "etcd-peer-cp-2"} {
			r := find(rs, KindCertificate, name)
			got := strings.Join(r.Problems, "|")
			if r.State != CheckFailed || !strings.Contains(got, "does not cover the inventory: missing 192.0.2.99") ||
				!strings.Contains(got, "SANs no longer in the inventory: 192.0.2.12") {
				t.Errorf("%s: %s %v", name, r.State, r.Problems)
			}
		}
		if r := find(rs, KindCertificate, "etcd-server-cp-1"); r.State != CheckOK {
			t.Errorf("cp-1: %s %v", r.State, r.Problems)
		}
	})
	for _, tc := range []struct {
		name, kind, entry, want string
		break_                  func(t *testing.T)
	}{
		{"missing leaf", KindCertificate, "etcd-peer-cp-1", "missing", func(t *testing.T) { os.Remove(dir.Cert("etcd-peer-cp-1")) }},
		{"missing key", KindCertificate, "admin", "key " + dir.Key("admin") + " missing", func(t *testing.T) { os.Remove(dir.Key("admin")) }},
		{"missing CA key", KindCA, "ca", "no leaf can be reissued", func(t *testing.T) { os.Remove(dir.Key("ca")) }},
		{"stale kubeconfig", KindKubeconfig, "admin", "out of date", func(t *testing.T) {
			os.Remove(dir.Cert("admin"))
			generate(t, inv, dir, Options{})
			os.WriteFile(dir.Kubeconfig("admin"), []byte("apiVersion: v1\nkind: Config\n"), 0o600)
		}},
		{"bad encryption key", KindEncryptionConfig, "encryption-config", ":10:23: ", func(t *testing.T) {
			b, _ := os.ReadFile(dir.EncryptionConfig())
			s := string(b)
			i := strings.Index(s, "secret: ") + len("secret: ")
			j := strings.Index(s[i:], "\n")
			os.WriteFile(dir.EncryptionConfig(), []byte(s[:i]+"${ENCRYPTION_KEY}"+s[i+j:]), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := snapshotFiles(t, dir)
			defer restoreFiles(t, saved)
			tc.break_(t)
			rs := Check(inv, dir, t0)
			r := find(rs, tc.kind, tc.entry)
			if r.State != CheckFailed || !strings.Contains(strings.Join(r.Problems, "|"), tc.want) {
				t.Errorf("%s %v, want %q", r.State, r.Problems, tc.want)
			}
			if !AnyFailed(rs) {
				t.Error("AnyFailed false")
			}
		})
	}
}

func snapshotFiles(t *testing.T, dir state.Dir) map[string]fileState { return snapshot(t, string(dir)) }

func restoreFiles(t *testing.T, saved map[string]fileState) {
	t.Helper()
	for p, f := range saved {
		if f.mode.IsDir() {
			continue
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode.Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkGenerate makes the whole table (2 CAs and 17 leaves for 3
// control-plane hosts and 3 workers, plus the service-account key,
// encryption config and kubeconfigs) from an empty state directory.
func BenchmarkGenerate(b *testing.B) {
	inventory := baseInventory + "  - name: w-2\n    address: 192.0.2.22\n"
	for _, alg := range []string{"ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096"} {
		b.Run(alg, func(b *testing.B) {
			inv, _ := loadInventory(b, inventory, alg)
			if n := len(Entries(inv)); n != 19 {
				b.Fatalf("%d entries", n)
			}
			i, tmp := 0, b.TempDir()
			for b.Loop() {
				i++
				dir := state.Dir(filepath.Join(tmp, fmt.Sprint(i)))
				if _, err := Generate(context.Background(), inv, dir, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
