package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/cfssl/csr"
	cferr "github.com/cloudflare/cfssl/errors"
	"github.com/cloudflare/cfssl/signer"

	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

var (
	server = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both   = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
)

func etcdWant(name string, addrs ...string) []string {
	return append(append([]string{name}, addrs...), "127.0.0.1", "localhost")
}

// wantTable is the table written out by hand for baseInventory, so that a
// wrong row in Table() fails here.
var wantTable = []struct {
	name, ca, cn string
	org          []string
	eku          []x509.ExtKeyUsage
	sans         []string
}{
	{name: "ca", cn: "kubernetes-ca"},
	{name: "front-proxy-ca", cn: "front-proxy-ca"},
	{name: "etcd-ca", cn: "etcd-ca"},
	{"admin", "ca", "admin", []string{"system:masters"}, client, nil},
	{"kube-controller-manager", "ca", "system:kube-controller-manager", nil, client, nil},
	{"kube-scheduler", "ca", "system:kube-scheduler", nil, client, nil},
	{"kube-proxy", "ca", "system:kube-proxy", []string{"system:node-proxier"}, client, nil},
	{"kubelet-w-0", "ca", "system:node:w-0", []string{"system:nodes"}, both, []string{"w-0", "192.0.2.20"}},
	{"kubelet-w-1", "ca", "system:node:w-1", []string{"system:nodes"}, both, []string{"w-1", "192.0.2.21"}},
	{"kube-apiserver", "ca", "kubernetes", nil, server, []string{
		"cp-0", "10.0.0.10", "192.0.2.10", "cp-1", "192.0.2.11", "cp-2", "192.0.2.12",
		"127.0.0.1", "localhost", "10.32.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local", "api.example.test"}},
	{"apiserver-kubelet-client", "ca", "kube-apiserver-kubelet-client", nil, client, nil},
	{"apiserver-etcd-client", "etcd-ca", "kube-apiserver-etcd-client", nil, client, nil},
	{"etcd-server-cp-0", "etcd-ca", "cp-0", nil, both, etcdWant("cp-0", "10.0.0.10", "192.0.2.10")},
	{"etcd-server-cp-1", "etcd-ca", "cp-1", nil, both, etcdWant("cp-1", "192.0.2.11")},
	{"etcd-server-cp-2", "etcd-ca", "cp-2", nil, both, etcdWant("cp-2", "192.0.2.12")},
	{"etcd-peer-cp-0", "etcd-ca", "cp-0", nil, both, etcdWant("cp-0", "10.0.0.10", "192.0.2.10")},
	{"etcd-peer-cp-1", "etcd-ca", "cp-1", nil, both, etcdWant("cp-1", "192.0.2.11")},
	{"etcd-peer-cp-2", "etcd-ca", "cp-2", nil, both, etcdWant("cp-2", "192.0.2.12")},
	{"front-proxy-client", "front-proxy-ca", "front-proxy-client", nil, client, nil},
}

func TestGenerateTable(t *testing.T) {
	for _, alg := range []string{"ecdsa-p256", "rsa-2048"} {
		t.Run(alg, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory, alg)
			rs := generate(t, inv, dir, Options{})
			got := byName(rs)

			var names []string
			for _, e := range Entries(inv) {
				names = append(names, e.Name)
			}
			var want []string
			for _, w := range wantTable {
				want = append(want, w.name)
			}
			if !slices.Equal(names, want) {
				t.Fatalf("entries:\n got %v\nwant %v", names, want)
			}

			for _, w := range wantTable {
				t.Run(w.name, func(t *testing.T) {
					c := readCert(t, dir, w.name)
					kind := KindCertificate
					if w.ca == "" {
						kind = KindCA
					}
					if r := got[kind+"/"+w.name]; r.Status != Created {
						t.Errorf("status %q, want created", r.Status)
					}
					if c.Subject.CommonName != w.cn {
						t.Errorf("CN %q, want %q", c.Subject.CommonName, w.cn)
					}
					if !slices.Equal(c.Subject.Organization, w.org) {
						t.Errorf("O %q, want %q", c.Subject.Organization, w.org)
					}
					if w.ca == "" {
						if !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0 || !c.BasicConstraintsValid {
							t.Errorf("CA: IsCA %v, cert sign %v", c.IsCA, c.KeyUsage&x509.KeyUsageCertSign != 0)
						}
						if got, want := c.NotAfter.Sub(c.NotBefore), inv.PKI.CAValidity.D(); got < want || got > want+time.Hour {
							t.Errorf("CA lifetime %v, want %v", got, want)
						}
					} else {
						if c.IsCA || c.KeyUsage&x509.KeyUsageCertSign != 0 {
							t.Errorf("leaf is a CA")
						}
						if !slices.Equal(c.ExtKeyUsage, w.eku) {
							t.Errorf("extended key usages %v, want %v", c.ExtKeyUsage, w.eku)
						}
						if c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
							t.Errorf("no digital signature usage")
						}
						_, isRSA := c.PublicKey.(*rsa.PublicKey)
						if enc := c.KeyUsage&x509.KeyUsageKeyEncipherment != 0; enc != isRSA {
							t.Errorf("key encipherment %v for an RSA key %v", enc, isRSA)
						}
						// The Go-built cfssl profile must not fall back to
						// cfssl's one-year default: 365d plus the backdating.
						if got, want := c.NotAfter.Sub(c.NotBefore), inv.PKI.LeafValidity.D()+5*time.Minute; got != want {
							t.Errorf("lifetime %v, want %v", got, want)
						}
					}
					if got := CertSANs(c); !slices.Equal(sorted(got), sorted(w.sans)) {
						t.Errorf("SANs\n got %v\nwant %v", got, w.sans)
					}
					if a := algorithmOf(c.PublicKey); a != alg {
						t.Errorf("key algorithm %s, want %s", a, alg)
					}
					keyPEM, err := os.ReadFile(dir.Key(w.name))
					if err != nil {
						t.Fatal(err)
					}
					key, err := parseKey(keyPEM)
					if err != nil || !keyMatches(c, key) {
						t.Errorf("key does not match (%v)", err)
					}
					assertMode(t, dir.Key(w.name), 0o600)
					ca := w.ca
					if ca == "" {
						ca = w.name
					}
					roots := x509.NewCertPool()
					roots.AddCert(readCert(t, dir, ca))
					eku := w.eku
					if eku == nil {
						eku = []x509.ExtKeyUsage{x509.ExtKeyUsageAny}
					}
					if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: eku}); err != nil {
						t.Errorf("chain to %s: %v", ca, err)
					}
				})
			}
			for _, d := range []string{string(dir), dir.PKIDir(), dir.KubeconfigDir()} {
				assertMode(t, d, os.ModeDir|0o700)
			}
		})
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != want {
		t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
	}
}

// TestOpenSSLVerify checks every leaf with another implementation than Go's:
// openssl verify against the CA named in the table, for the purpose its
// usages promise.
func TestOpenSSLVerify(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl not found: run hack/setup.sh")
	}
	for _, alg := range []string{"ecdsa-p256", "rsa-2048"} {
		t.Run(alg, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory, alg)
			generate(t, inv, dir, Options{})
			for _, w := range wantTable {
				if w.ca == "" {
					continue
				}
				purposes := []string{}
				if slices.Contains(w.eku, x509.ExtKeyUsageServerAuth) {
					purposes = append(purposes, "sslserver")
				}
				if slices.Contains(w.eku, x509.ExtKeyUsageClientAuth) {
					purposes = append(purposes, "sslclient")
				}
				for _, p := range purposes {
					out, err := exec.Command(openssl, "verify", "-x509_strict", "-purpose", p,
						"-CAfile", dir.Cert(w.ca), dir.Cert(w.name)).CombinedOutput()
					if err != nil || !strings.Contains(string(out), ": OK") {
						t.Errorf("openssl verify -purpose %s %s against %s: %v\n%s", p, w.name, w.ca, err, out)
					}
				}
				// The other CA must not verify it: the front proxy's trust is separate.
				other := map[string]string{CA: FrontProxyCA, FrontProxyCA: CA, EtcdCA: CA}[w.ca]
				if out, err := exec.Command(openssl, "verify", "-CAfile", dir.Cert(other), dir.Cert(w.name)).CombinedOutput(); err == nil {
					t.Errorf("%s verifies against %s too:\n%s", w.name, other, out)
				}
			}
		})
	}
}

func TestIdempotent(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	before := snapshot(t, string(dir))
	rs := generate(t, inv, dir, Options{})
	for _, r := range rs {
		if r.Status != Reused {
			t.Errorf("%s %s: %s (%s), want reused", r.Kind, r.Name, r.Status, r.Reason)
		}
	}
	after := snapshot(t, string(dir))
	if len(before) != len(after) {
		t.Errorf("%d files before, %d after", len(before), len(after))
	}
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			t.Errorf("%s changed", p)
		}
	}
	// Every kind of file is covered by the comparison.
	for _, p := range []string{dir.Cert("ca"), dir.Key("ca"), dir.Key(ServiceAccount),
		PublicKeyPath(dir, ServiceAccount), dir.EncryptionConfig(), dir.Kubeconfig("admin"), dir.Kubeconfig("w-0")} {
		if _, ok := before[p]; !ok {
			t.Errorf("%s not written", p)
		}
	}
}

func TestSANChangeReissuesOnlyAffectedLeaves(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	before := snapshot(t, string(dir))

	// cp-1 moves; w-1 is removed.
	changed := strings.Replace(baseInventory, "192.0.2.11", "192.0.2.111", 1)
	changed = strings.Replace(changed, "  - name: w-1\n    address: 192.0.2.21\n", "", 1)
	inv = reload(t, inv, changed, "ecdsa-p256")
	rs := generate(t, inv, dir, Options{})

	wantReissued := map[string]bool{"kube-apiserver": true, "etcd-server-cp-1": true, "etcd-peer-cp-1": true}
	for _, r := range rs {
		if r.Kind != KindCertificate && r.Kind != KindCA {
			continue
		}
		if wantReissued[r.Name] {
			if r.Status != Reissued || !strings.Contains(r.Reason, "SANs changed") || !strings.Contains(r.Reason, "192.0.2.111") {
				t.Errorf("%s: %s (%s), want reissued for its SANs", r.Name, r.Status, r.Reason)
			}
			continue
		}
		if r.Status != Reused {
			t.Errorf("%s: %s (%s), want reused", r.Name, r.Status, r.Reason)
		}
	}
	if before[dir.Cert("ca")] != snapshot(t, string(dir))[dir.Cert("ca")] {
		t.Error("ca.crt changed")
	}
	c := readCert(t, dir, "kube-apiserver")
	if s := CertSANs(c); !slices.Contains(s, "192.0.2.111") || slices.Contains(s, "192.0.2.11") {
		t.Errorf("kube-apiserver SANs %v", s)
	}
	if err := c.CheckSignatureFrom(readCert(t, dir, "ca")); err != nil {
		t.Errorf("reissued from another CA: %v", err)
	}
	// The kubeconfigs embed unchanged certificates: untouched.
	if before[dir.Kubeconfig("admin")] != snapshot(t, string(dir))[dir.Kubeconfig("admin")] {
		t.Error("admin kubeconfig changed")
	}
}

func TestMissingCAKeyIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove []string
	}{
		{"key only", []string{"ca.key"}},
		{"cert and key", []string{"ca.key", "ca.crt"}},
		{"front-proxy key", []string{"front-proxy-ca.key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
			generate(t, inv, dir, Options{})
			for _, f := range tc.remove {
				if err := os.Remove(dir.PKIDir() + "/" + f); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, string(dir))
			_, err := Generate(t.Context(), inv, dir, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			if h := usererr.HintOf(err); !strings.Contains(h, "--replace-ca") || !strings.Contains(h, "backup") {
				t.Errorf("hint %q", h)
			}
			if !strings.Contains(err.Error(), "missing") {
				t.Errorf("error %q", err)
			}
			after := snapshot(t, string(dir))
			if len(after) != len(before) {
				t.Errorf("files created: %d → %d", len(before), len(after))
			}
		})
	}
}

func TestReplaceCA(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	os.Remove(dir.Key("ca"))
	oldFP := readCert(t, dir, "front-proxy-client").Raw

	rs := byName(generate(t, inv, dir, Options{ReplaceCA: []string{"ca"}}))
	if r := rs["ca/ca"]; r.Status != Replaced {
		t.Errorf("ca: %s", r.Status)
	}
	if r := rs["ca/front-proxy-ca"]; r.Status != Reused {
		t.Errorf("front-proxy-ca: %s", r.Status)
	}
	for _, w := range wantTable {
		r := rs[KindCertificate+"/"+w.name]
		switch w.ca {
		case CA:
			if r.Status != Reissued || r.Reason != "not signed by the current ca" {
				t.Errorf("%s: %s (%s)", w.name, r.Status, r.Reason)
			}
		case FrontProxyCA:
			if r.Status != Reused {
				t.Errorf("%s: %s (%s)", w.name, r.Status, r.Reason)
			}
		}
	}
	if !slices.Equal(readCert(t, dir, "front-proxy-client").Raw, oldFP) {
		t.Error("front-proxy-client changed")
	}
	if rs["kubeconfig/admin"].Status != Updated {
		t.Errorf("admin kubeconfig: %s", rs["kubeconfig/admin"].Status)
	}
	if _, err := Generate(t.Context(), inv, dir, Options{ReplaceCA: []string{"root"}}); usererr.CodeOf(err) != usererr.CodeUsage {
		t.Errorf("unknown CA name: %v", err)
	}
}

func TestRenewal(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	t0 := time.Now()
	generate(t, inv, dir, Options{})
	for _, tc := range []struct {
		name   string
		at     time.Duration
		status Status
		reason string
	}{
		// 365d leaves: window is the last 121 days (a third).
		{"two thirds of life left", 120 * 24 * time.Hour, Reused, ""},
		{"inside the window", 250 * 24 * time.Hour, Reissued, "renewal window: expires in 11"}, // 115 days less the seconds generation took
		{"expired", 400 * 24 * time.Hour, Reissued, "expired on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir2 := copyState(t, dir)
			now := t0.Add(tc.at)
			rs := generate(t, inv, dir2, Options{Now: func() time.Time { return now }})
			for _, r := range rs {
				switch r.Kind {
				case KindCA:
					if r.Status != Reused {
						t.Errorf("%s: %s", r.Name, r.Status)
					}
				case KindCertificate:
					if r.Status != tc.status || !strings.HasPrefix(r.Reason, tc.reason) {
						t.Errorf("%s: %s (%s), want %s (%s)", r.Name, r.Status, r.Reason, tc.status, tc.reason)
					}
					if tc.status == Reissued && !r.NotAfter.After(now.Add(300*24*time.Hour)) {
						t.Errorf("%s: reissued until %v only", r.Name, r.NotAfter)
					}
				}
			}
		})
	}
}

// copyState copies a state directory, so that subtests start from the same one.
func copyState(t *testing.T, dir state.Dir) state.Dir {
	t.Helper()
	dst := t.TempDir() + "/state"
	if out, err := exec.Command("cp", "-a", string(dir), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return state.Dir(dst)
}

func TestRenewalWindow(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		life, want time.Duration
	}{
		{365 * day, 365 * day / 3},
		{3650 * day, 3650 * day / 3},
		{60 * day, 30 * day}, // at least 30 days...
		{40 * day, 20 * day}, // ...but at most half the lifetime
		{2 * day, day},
	} {
		c := &x509.Certificate{NotBefore: time.Unix(0, 0), NotAfter: time.Unix(0, 0).Add(tc.life)}
		if got := RenewalWindow(c); got != tc.want {
			t.Errorf("lifetime %v: window %v, want %v", tc.life, got, tc.want)
		}
	}
}

func TestAlgorithmChange(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	inv = reload(t, inv, baseInventory, "rsa-2048")
	rs := generate(t, inv, dir, Options{})
	for _, r := range rs {
		switch r.Kind {
		case KindCA:
			if r.Status != Reused || !strings.Contains(r.Note, "--replace-ca") {
				t.Errorf("%s: %s, note %q", r.Name, r.Status, r.Note)
			}
		case KindCertificate:
			if r.Status != Reissued || r.Reason != "key algorithm changed (ecdsa-p256 → rsa-2048)" {
				t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
			}
		}
	}
	c := readCert(t, dir, "kube-apiserver")
	if k, ok := c.PublicKey.(*rsa.PublicKey); !ok || k.N.BitLen() != 2048 {
		t.Errorf("kube-apiserver key %T", c.PublicKey)
	}
	if _, ok := readCert(t, dir, "ca").PublicKey.(*ecdsa.PublicKey); !ok {
		t.Error("CA key replaced")
	}
	if k, ok := readCert(t, dir, "admin").PublicKey.(*rsa.PublicKey); !ok || k.N.BitLen() != 2048 {
		t.Error("admin key not RSA")
	}
}

func TestBrokenLeavesAreReissued(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, d state.Dir)
		status Status
		reason string
	}{
		{"cert missing", func(t *testing.T, d state.Dir) { os.Remove(d.Cert("admin")) }, Created, ""},
		{"key missing", func(t *testing.T, d state.Dir) { os.Remove(d.Key("admin")) }, Reissued, "key missing"},
		{"key of another cert", func(t *testing.T, d state.Dir) {
			b, _ := os.ReadFile(d.Key("kube-proxy"))
			os.WriteFile(d.Key("admin"), b, 0o600)
		}, Reissued, "key does not match the certificate"},
		{"garbage cert", func(t *testing.T, d state.Dir) {
			os.WriteFile(d.Cert("admin"), []byte("not pem"), 0o644)
		}, Reissued, "unreadable certificate"},
		{"signed by the other CA", func(t *testing.T, d state.Dir) {
			c, _ := os.ReadFile(d.Cert("front-proxy-client"))
			k, _ := os.ReadFile(d.Key("front-proxy-client"))
			os.WriteFile(d.Cert("admin"), c, 0o644)
			os.WriteFile(d.Key("admin"), k, 0o600)
		}, Reissued, "not signed by the current ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
			generate(t, inv, dir, Options{})
			tc.break_(t, dir)
			r := byName(generate(t, inv, dir, Options{}))["certificate/admin"]
			if r.Status != tc.status || !strings.HasPrefix(r.Reason, tc.reason) {
				t.Errorf("%s (%s), want %s (%s)", r.Status, r.Reason, tc.status, tc.reason)
			}
			if c := readCert(t, dir, "admin"); c.Subject.CommonName != "admin" {
				t.Errorf("CN %s", c.Subject.CommonName)
			}
		})
	}
}

// cfssl pitfalls: an unknown profile must be an error, not cfssl's silent
// fallback to the default profile; cfssl's JSON errors read as messages.
func TestIssuerGuards(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	caPEM, _ := os.ReadFile(dir.Cert("ca"))
	keyPEM, _ := os.ReadFile(dir.Key("ca"))
	cert, key, err := checkCAFiles("ca", caPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	is, err := newIssuer("ca", cert, key, "ecdsa-p256", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := is.issue(Entry{Name: "x", Row: "no-such-row", CN: "x"}, time.Now(), time.Hour); err == nil ||
		!strings.Contains(err.Error(), `no profile "no-such-row"`) {
		t.Errorf("unknown profile: %v", err)
	}
	// front-proxy-client belongs to the other CA: no profile here either.
	if _, _, err := is.issue(Entry{Name: "front-proxy-client", Row: "front-proxy-client", CN: "x"}, time.Now(), time.Hour); err == nil {
		t.Error("ca signed a front-proxy-ca row")
	}
	// The default profile has no usages: were it ever used, cfssl refuses.
	if _, err := is.signer.Sign(signerRequestFor(t, "unknown")); err == nil {
		t.Error("cfssl signed with the default profile")
	} else if strings.HasPrefix(wrapCFSSL(err, "sign").Error(), "sign: {") {
		t.Errorf("JSON error text: %v", wrapCFSSL(err, "sign"))
	}

	e := cferr.New(cferr.PolicyError, cferr.NoKeyUsages)
	w := wrapCFSSL(e, "sign %s", "admin")
	if strings.Contains(w.Error(), "{") || !strings.HasPrefix(w.Error(), "sign admin: ") {
		t.Errorf("wrapped: %q", w)
	}
	var ce *cferr.Error
	if !errors.As(w, &ce) {
		t.Error("cfssl error not reachable")
	}
}

func signerRequestFor(t *testing.T, profile string) signer.SignRequest {
	t.Helper()
	csrPEM, _, err := csr.ParseRequest(&csr.CertificateRequest{CN: "x", KeyRequest: &csr.KeyRequest{A: "ecdsa", S: 256}})
	if err != nil {
		t.Fatal(err)
	}
	return signer.SignRequest{Request: string(csrPEM), Profile: profile}
}
