package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway"
	"github.com/hardway/hardway/pkg/pki"
)

// pkiSetup writes the example inventory into a temporary directory.
func pkiSetup(t *testing.T) (inv, state string) {
	t.Helper()
	dir := t.TempDir()
	inv = filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, hardway.ExampleInventory, 0o644); err != nil {
		t.Fatal(err)
	}
	return inv, filepath.Join(dir, "S")
}

func TestPKICommand(t *testing.T) {
	inv, st := pkiSetup(t)

	code, out, stderr := run(t, "certs", "generate", "-i", inv, "--state", st)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"NAME", "kube-apiserver", "controller-0,10.240.0.10,controller-1,… (+10)",
		"front-proxy-client", "created", "30 created", "Back it up"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The acceptance check: every leaf verifies with openssl against its CA.
	for _, name := range []string{"admin", "kube-apiserver", "kubelet-worker-1"} {
		if b, err := exec.Command("openssl", "verify", "-CAfile", st+"/pki/ca.crt", st+"/pki/"+name+".crt").CombinedOutput(); err != nil {
			t.Errorf("openssl verify %s: %v %s", name, err, b)
		}
	}
	// etcd's certificates chain to etcd's own CA, and only to it.
	for _, name := range []string{"etcd-peer-controller-2", "apiserver-etcd-client"} {
		if b, err := exec.Command("openssl", "verify", "-CAfile", st+"/pki/etcd-trust-bundle.crt", st+"/pki/"+name+".crt").CombinedOutput(); err != nil {
			t.Errorf("openssl verify %s: %v %s", name, err, b)
		}
		if b, err := exec.Command("openssl", "verify", "-CAfile", st+"/pki/ca.crt", st+"/pki/"+name+".crt").CombinedOutput(); err == nil {
			t.Errorf("%s verifies against the cluster CA: %s", name, b)
		}
	}
	if b, err := exec.Command("openssl", "verify", "-CAfile", st+"/pki/front-proxy-ca.crt", st+"/pki/front-proxy-client.crt").CombinedOutput(); err != nil {
		t.Errorf("openssl verify front-proxy-client: %v %s", err, b)
	}

	code, out, stderr = run(t, "pki", "-i", inv, "--state", st, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		State   string       `json:"state"`
		Results []pki.Result `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if doc.State != st || len(doc.Results) != 30 {
		t.Errorf("state %q, %d results", doc.State, len(doc.Results))
	}
	for _, r := range doc.Results {
		if r.Status != pki.Reused {
			t.Errorf("%s %s: %s", r.Kind, r.Name, r.Status)
		}
	}
	if strings.Contains(out, "secret") {
		t.Error("json output mentions a secret")
	}

	// Without the CA key, pki refuses and says how to get out.
	os.Remove(st + "/pki/ca.key")
	code, _, stderr = run(t, "pki", "-i", inv, "--state", st)
	if code != 1 || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, "hint:  the hosts still hold it: 'hardway state pull controller-0'") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	code, out, stderr = run(t, "pki", "-i", inv, "--state", st, "--replace-ca")
	if code != 0 || !strings.Contains(out, "replaced: --replace-ca") || !strings.Contains(out, "reissued: not signed by the current ca") {
		t.Errorf("--replace-ca: exit %d\n%s%s", code, out, stderr)
	}

	// Without the encryption config, the same: and the flag makes one on purpose.
	os.Remove(st + "/encryption-config.yaml")
	code, _, stderr = run(t, "pki", "-i", inv, "--state", st)
	if code != 1 || !strings.Contains(stderr, "refusing to make a new encryption key") || !strings.Contains(stderr, "--new-encryption-key") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(st + "/encryption-config.yaml"); err == nil {
		t.Error("a new encryption config was made")
	}
	if code, out, stderr := run(t, "pki", "-i", inv, "--state", st, "--new-encryption-key"); code != 0 || !strings.Contains(out, "1 created") {
		t.Errorf("--new-encryption-key: exit %d\n%s%s", code, out, stderr)
	}

	for _, args := range [][]string{
		{"pki", "-i", inv, "--state", st, "-o", "yaml"},
		{"pki", "-i", inv, "--state", st, "--replace-ca=intermediate"},
	} {
		if code, _, stderr := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
}

func TestCertsCheckCommand(t *testing.T) {
	inv, st := pkiSetup(t)

	code, out, _ := run(t, "certs", "check", "-i", inv, "--state", st)
	if code != 1 || !strings.Contains(out, "error: missing") {
		t.Errorf("empty state: exit %d\n%s", code, out)
	}
	if code, _, stderr := run(t, "pki", "-i", inv, "--state", st); code != 0 {
		t.Fatal(stderr)
	}
	code, out, stderr := run(t, "certs", "check", "-i", inv, "--state", st)
	if code != 0 || !strings.Contains(out, "RESIDUAL") || !strings.Contains(out, "364d") || !strings.Contains(out, "30 entries ok, 0 warnings") {
		t.Errorf("exit %d\n%s%s", code, out, stderr)
	}

	// An inventory the certificates no longer cover.
	b, _ := os.ReadFile(inv)
	os.WriteFile(inv, []byte(strings.Replace(string(b), "10.240.0.12", "10.240.0.13", 1)), 0o644)
	code, out, stderr = run(t, "certs", "check", "-i", inv, "--state", st, "-o", "json")
	if code != 1 || !strings.Contains(stderr, "3 of 30 entries failed") || !strings.Contains(stderr, "hint:  to create or reissue them, run: hardway certs generate -i ") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	var rs []pki.CheckResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	failed := map[string]bool{}
	for _, r := range rs {
		if r.State == pki.CheckFailed {
			failed[r.Name] = true
		}
	}
	for _, n := range []string{"kube-apiserver", "etcd-server-controller-2", "etcd-peer-controller-2"} {
		if !failed[n] {
			t.Errorf("%s not failed", n)
		}
	}

	// certs alone explains itself.
	if code, out, _ := run(t, "certs", "--help"); code != 0 || !strings.Contains(out, "check") {
		t.Errorf("certs --help: %d %s", code, out)
	}
	if code, out, _ := run(t, "certs", "check", "--help"); code != 0 || !strings.Contains(out, "renewal window") {
		t.Errorf("certs check --help: %d %s", code, out)
	}
}
