package pki

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// TestLostIdentityIsNeverMadeAnew removes parts of the identity from a full
// state directory: Generate must refuse before writing a byte, name what is
// missing, and point at state pull and the flag that does it on purpose.
func TestLostIdentityIsNeverMadeAnew(t *testing.T) {
	for _, tc := range []struct {
		name      string
		remove    []string // relative to the state directory
		wantErr   []string
		wantFlags []string
		allow     Options // with these, Generate goes ahead
	}{
		{name: "encryption config", remove: []string{"encryption-config.yaml"},
			wantErr:   []string{"encryption-config.yaml is missing", "refusing to make a new encryption key"},
			wantFlags: []string{"--new-encryption-key"}, allow: Options{NewEncryptionKey: true}},
		{name: "service-account pair", remove: []string{"pki/service-account.key", "pki/service-account.pub"},
			wantErr:   []string{"service-account.key is missing", "refusing to make a new service-account key"},
			wantFlags: []string{"--new-service-account-key"}, allow: Options{NewServiceAccountKey: true}},
		{name: "service-account key only", remove: []string{"pki/service-account.key"},
			wantErr:   []string{"service-account.key is missing"},
			wantFlags: []string{"--new-service-account-key", "invalidates every service-account token"}, allow: Options{NewServiceAccountKey: true}},
		{name: "whole pki directory", remove: []string{"pki"},
			wantErr: []string{"pki/ca.crt and pki/ca.key are missing", "pki/front-proxy-ca.crt and pki/front-proxy-ca.key are missing",
				"service-account.key is missing", "(encryption-config.yaml, kubeconfigs/admin.kubeconfig"},
			wantFlags: []string{"--replace-ca=ca", "--replace-ca=front-proxy-ca", "--new-service-account-key"},
			allow:     Options{ReplaceCA: []string{"all"}, NewServiceAccountKey: true}},
		{name: "everything but one kubeconfig", remove: []string{"pki", "encryption-config.yaml", "kubeconfigs/kube-scheduler.kubeconfig",
			"kubeconfigs/kube-controller-manager.kubeconfig", "kubeconfigs/kube-proxy.kubeconfig", "kubeconfigs/w-0.kubeconfig", "kubeconfigs/w-1.kubeconfig"},
			wantErr:   []string{"refusing to make a new ca", "refusing to make a new encryption key", "(kubeconfigs/admin.kubeconfig)"},
			wantFlags: []string{"--new-encryption-key"},
			allow:     Options{ReplaceCA: []string{"all"}, NewServiceAccountKey: true, NewEncryptionKey: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
			generate(t, inv, dir, Options{})
			for _, f := range tc.remove {
				if err := os.RemoveAll(filepath.Join(string(dir), f)); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, string(dir))
			_, err := Generate(t.Context(), inv, dir, Options{})
			if err == nil {
				t.Fatal("Generate made a new identity next to existing state")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			hint := usererr.HintOf(err)
			for _, w := range append([]string{"hardway state pull cp-0", "backup"}, tc.wantFlags...) {
				if !strings.Contains(hint, w) {
					t.Errorf("hint lacks %q:\n%s", w, hint)
				}
			}
			after := snapshot(t, string(dir))
			if len(after) != len(before) {
				t.Errorf("files written although refused: %d → %d", len(before), len(after))
			}
			for p, st := range before {
				if after[p] != st {
					t.Errorf("%s changed although refused", p)
				}
			}

			// Said on purpose, it goes ahead and the state is whole.
			generate(t, inv, dir, tc.allow)
			if c := Check(inv, dir, time.Now()); AnyFailed(c) {
				t.Errorf("check after the explicit flag: %+v", c)
			}
		})
	}
}

// TestIdentityGuardIgnoresNonState: logs and the lock file are not a cluster.
func TestIdentityGuardIgnoresNonState(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	if err := os.MkdirAll(dir.LogDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir.LogDir(), "up.log"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(string(dir), "lock"), nil, 0o600)
	rs := generate(t, inv, dir, Options{})
	for _, r := range rs {
		if r.Status != Created {
			t.Errorf("%s: %s, want created", r.Name, r.Status)
		}
	}
}

// A damaged copy is told from a valid one by parsing alone, and the reason
// never quotes the content.
func TestDamage(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, key, pub, enc := read(dir.Cert(CA)), read(dir.Key(CA)), read(PublicKeyPath(dir, ServiceAccount)), read(dir.EncryptionConfig())
	c, _ := LoadEncryptionConfig(dir.EncryptionConfig())
	secret := c.Resources[0].Providers[0].Secretbox.Keys[0].Secret
	short := strings.Replace(string(enc), secret, "c2hvcnQ=", 1) // "short": 5 bytes
	for _, tc := range []struct {
		name string
		fn   func([]byte) string
		data []byte
		want string
	}{
		{"certificate", CertificateDamage, ca, ""},
		{"bundle of two", CertificateDamage, append(append([]byte{}, ca...), ca...), ""},
		{"truncated certificate", CertificateDamage, ca[:len(ca)/2], "no PEM certificate (truncated or overwritten?)"},
		{"bundle truncated after the first", CertificateDamage, append(append([]byte{}, ca...), ca[:40]...), "not PEM after certificate 1 (truncated?)"},
		{"empty certificate", CertificateDamage, []byte("  \n"), "empty"},
		{"a key where a certificate belongs", CertificateDamage, key, `PEM block 1 is "EC PRIVATE KEY", not a certificate`},
		{"public key", PublicKeyDamage, pub, ""},
		{"truncated public key", PublicKeyDamage, pub[:30], "no PEM public key that parses (truncated or overwritten?)"},
		{"private key", PrivateKeyDamage, key, ""},
		{"garbage private key", PrivateKeyDamage, []byte("${CA_KEY}"), "no PEM private key that parses (truncated or overwritten?)"},
		{"encryption config", EncryptionConfigDamage, enc, ""},
		{"literal placeholder", EncryptionConfigDamage, []byte(strings.Replace(string(enc), secret, "${ENCRYPTION_KEY}", 1)),
			"a key is not base64 (a literal ${ENCRYPTION_KEY}? the apiserver cannot start with it)"},
		{"short key", EncryptionConfigDamage, []byte(short), "a key has the wrong length for its provider"},
		{"half-written config", EncryptionConfigDamage, enc[:len(enc)/3], "not a valid EncryptionConfiguration"},
		{"empty config", EncryptionConfigDamage, nil, "empty"},
	} {
		if got := tc.fn(tc.data); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
