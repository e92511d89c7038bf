package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The daemon refuses a non-loopback --listen before it reads anything;
// the unit passes --allow-remote-listen on when asked.
func TestDaemonListenLoopbackOnly(t *testing.T) {
	for _, args := range [][]string{
		{"daemon", "--listen", "0.0.0.0:9479", "-i", "/nonexistent.yaml"},
		{"daemon", "unit", "--listen", ":9479", "-i", "/nonexistent.yaml"},
	} {
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.Contains(stderr, "is not a loopback address") || !strings.Contains(stderr, "--allow-remote-listen") {
			t.Errorf("%v: exit %d\n%s", args, code, stderr)
		}
	}
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte("controlPlane:\n  - {name: c1, address: 10.240.0.11}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "daemon", "unit", "-i", inv, "--binary", "/usr/local/bin/hardway", "--listen", "10.240.0.1:9479", "--allow-remote-listen")
	if code != 0 || !strings.Contains(out, "--listen 10.240.0.1:9479 ") || !strings.Contains(out, "--allow-remote-listen") {
		t.Errorf("unit: exit %d\n%s\n%s", code, out, stderr)
	}
}

// A value printed into a command hint is one shell word: an inventory path
// with a space comes out quoted.
func TestHintQuotesPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte("controlPlane:\n  - {name: c1, address: 10.240.0.11}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "pki", "-i", inv); code != 0 {
		t.Fatalf("pki: %d %s", code, stderr)
	}
	if err := os.Remove(filepath.Join(dir, ".hardway/pki/admin.crt")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, "certs", "check", "-i", inv)
	if code != 1 || !strings.Contains(stderr, "hardway certs generate -i '"+inv+"'") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}
