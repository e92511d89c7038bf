package inventory

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA writes a self-signed CA certificate in PEM to dir/name.
func testCA(t *testing.T, dir, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mirror CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// parseIn parses src as an inventory file in dir (ca: paths resolve there).
func parseIn(t *testing.T, dir, src string) (*Inventory, []Problem) {
	t.Helper()
	inv, err := Parse("inv.yaml", filepath.Join(dir, "inv.yaml"), []byte(src))
	if err == nil {
		return inv, nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is not a ValidationError: %v", err)
	}
	return nil, ve.Problems
}

func TestRegistries(t *testing.T) {
	dir := t.TempDir()
	ca := testCA(t, dir, "mirror-ca.pem")
	inv, probs := parseIn(t, dir, `registries:
  - name: registry.k8s.io
    mirrors:
      - url: http://10.240.16.1:5000/
      - url: https://mirror.example.internal
        ca: mirror-ca.pem
  - name: docker.io
    mirrorOnly: true
    mirrors:
      - url: https://[fd00::5]:5443
        insecureSkipVerify: true
  - name: "10.240.16.1:5000"
    mirrors:
      - url: http://10.240.16.1:5000
`+good)
	if probs != nil {
		t.Fatalf("unexpected problems: %v", probs)
	}
	r := inv.Registries
	if len(r) != 3 || r[0].Name != "registry.k8s.io" || !r[1].MirrorOnly || len(r[0].Mirrors) != 2 {
		t.Fatalf("registries: %+v", r)
	}
	if r[0].Mirrors[0].URL != "http://10.240.16.1:5000" {
		t.Errorf("trailing / kept: %q", r[0].Mirrors[0].URL)
	}
	if string(r[0].Mirrors[1].CAData) != string(ca) {
		t.Error("the CA file was not read")
	}
	var warns []string
	for _, w := range inv.Warnings {
		warns = append(warns, strings.TrimPrefix(w.String(), "inv.yaml:"))
	}
	want := []string{
		"4:14: registries[0].mirrors[0].url: warning: http://10.240.16.1:5000 is plain http",
		"11:29: registries[1].mirrors[0].insecureSkipVerify: warning: https://[fd00::5]:5443's certificate is not verified",
		"14:14: registries[2].mirrors[0].url: warning: http://10.240.16.1:5000 is plain http",
	}
	if len(warns) != len(want) {
		t.Fatalf("warnings:\n  %s", strings.Join(warns, "\n  "))
	}
	for i := range want {
		if !strings.HasPrefix(warns[i], want[i]) {
			t.Errorf("warning %d = %q, want prefix %q", i, warns[i], want[i])
		}
	}
}

// Each rule, at the position and path it must be reported at.
func TestRegistryRules(t *testing.T) {
	dir := t.TempDir()
	testCA(t, dir, "ca.pem")
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := func(name, mirror string) string {
		return "registries:\n  - name: " + name + "\n    mirrors:\n      - " + mirror + "\n" + good
	}
	cases := []struct{ name, src, want string }{
		{"no name", "registries:\n  - mirrors: [{url: https://m.example}]\n" + good, "2:5: registries[0].name: a name is required"},
		{"scheme in name", reg("https://registry.k8s.io", "url: https://m.example"), `2:11: registries[0].name: "https://registry.k8s.io" is a URL, not a registry name`},
		{"path in name", reg("docker.io/library", "url: https://m.example"), `2:11: registries[0].name: "docker.io/library" is not a registry name (it has a path)`},
		{"upper case", reg("Registry.K8s.io", "url: https://m.example"), `2:11: registries[0].name: "Registry.K8s.io" is not a registry name`},
		{"bad port", reg("reg.example:99999", "url: https://m.example"), `2:11: registries[0].name: "reg.example:99999" is not a registry name`},
		{"bare ipv6", reg("fd00::1", "url: https://m.example"), `2:11: registries[0].name: "fd00::1" is not a registry name`},
		{"docker hub alias", reg("index.docker.io", "url: https://m.example"), `2:11: registries[0].name: "index.docker.io" never matches an image name (hint: images of Docker Hub are named docker.io/…; write docker.io)`},
		{"duplicate", "registries:\n  - {name: quay.io, mirrors: [{url: https://a.example}]}\n  - {name: quay.io, mirrors: [{url: https://b.example}]}\n" + good,
			`3:12: registries[1].name: "quay.io" is already listed at registries[0]`},
		{"no mirrors", "registries:\n  - name: quay.io\n" + good, "2:5: registries[0].mirrors: a registry needs at least one mirror"},
		{"empty mirrors", "registries:\n  - name: quay.io\n    mirrors: []\n" + good, "3:14: registries[0].mirrors: a registry needs at least one mirror"},
		{"no url", reg("quay.io", "ca: ca.pem"), "4:9: registries[0].mirrors[0].url: a URL is required"},
		{"ftp", reg("quay.io", "url: ftp://m.example"), `4:14: registries[0].mirrors[0].url: "ftp://m.example" is not a mirror URL`},
		{"no scheme", reg("quay.io", "url: m.example:5000"), `4:14: registries[0].mirrors[0].url: "m.example:5000" is not a mirror URL`},
		{"credentials", reg("quay.io", "url: https://u:p@m.example"), `4:14: registries[0].mirrors[0].url: "https://u:p@m.example" has a user name or password in it`},
		{"path", reg("quay.io", "url: https://m.example/v2/proxy"), `4:14: registries[0].mirrors[0].url: "https://m.example/v2/proxy" has a path, query or fragment`},
		{"bad host", reg("quay.io", "url: https://m_x.example"), `4:14: registries[0].mirrors[0].url: "https://m_x.example" has no valid host[:port]`},
		{"duplicate url", "registries:\n  - name: quay.io\n    mirrors:\n      - url: https://m.example\n      - url: https://m.example/\n" + good,
			"5:14: registries[0].mirrors[1].url: https://m.example is already listed at registries[0].mirrors[0]"},
		{"http with skip", reg("quay.io", "{url: http://m.example, insecureSkipVerify: true}"), "4:15: registries[0].mirrors[0].url: http://m.example is plain http: ca and insecureSkipVerify mean nothing there"},
		{"http with ca", reg("quay.io", "{url: http://m.example, ca: ca.pem}"), "4:15: registries[0].mirrors[0].url: http://m.example is plain http: ca and insecureSkipVerify"},
		{"ca and skip", reg("quay.io", "{url: https://m.example, ca: ca.pem, insecureSkipVerify: true}"), "4:66: registries[0].mirrors[0].insecureSkipVerify: ca and insecureSkipVerify contradict each other"},
		{"skip not a bool", reg("quay.io", "{url: https://m.example, insecureSkipVerify: yes please}"), `4:54: registries[0].mirrors[0].insecureSkipVerify: "yes please" is not true or false`},
		{"missing ca", reg("quay.io", "{url: https://m.example, ca: nope.pem}"), "4:38: registries[0].mirrors[0].ca: open " + filepath.Join(dir, "nope.pem") + ": no such file or directory"},
		{"ca not a cert", reg("quay.io", "{url: https://m.example, ca: key.pem}"), "4:38: registries[0].mirrors[0].ca: " + filepath.Join(dir, "key.pem") + " holds no PEM certificate"},
		{"ca garbage", reg("quay.io", "{url: https://m.example, ca: bad.pem}"), "4:38: registries[0].mirrors[0].ca: " + filepath.Join(dir, "bad.pem") + ": x509: "},
		{"unknown key", reg("quay.io", "{url: https://m.example, insecure: true}"), `4:34: registries[0].mirrors[0].insecure: unknown key`},
		{"mirrors not a list", "registries:\n  - name: quay.io\n    mirrors: https://m.example\n" + good, "3:14: registries[0].mirrors: must be a list"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, probs := parseIn(t, dir, c.src)
			var all []string
			for _, p := range probs {
				s := strings.TrimPrefix(p.String(), "inv.yaml:")
				all = append(all, s)
				if strings.HasPrefix(s, c.want) {
					return
				}
			}
			t.Fatalf("want a problem starting %q, got:\n  %s", c.want, strings.Join(all, "\n  "))
		})
	}
}

// Without registries: nothing to read, nothing filled in.
func TestNoRegistries(t *testing.T) {
	inv, probs := parse(t, good)
	if probs != nil || inv.Registries != nil {
		t.Fatalf("registries %+v, problems %v", inv.Registries, probs)
	}
}
