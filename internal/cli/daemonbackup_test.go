package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The daemon's backup flags: no passphrase or recipient is refused at start
// (not at the first backup), backup flags without --backup-interval are a
// usage error, and a unit never takes the passphrase from the environment:
// it names the file, and the secret appears nowhere in it.
func TestDaemonBackupFlags(t *testing.T) {
	t.Setenv("HARDWAY_BACKUP_PASSPHRASE", "")
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	os.WriteFile(inv, []byte("cluster: lab\ncontrolPlane:\n  - {name: c1, address: 10.240.0.11}\n"), 0o644)
	os.Mkdir(filepath.Join(dir, ".hardway"), 0o700)

	code, _, stderr := run(t, "daemon", "-i", inv, "--backup-interval", "24h")
	if code != 2 || !strings.Contains(stderr, "no passphrase or recipient") || !strings.Contains(stderr, "--backup-passphrase-file") {
		t.Fatalf("no keys: %d %s", code, stderr)
	}
	code, _, stderr = run(t, "daemon", "-i", inv, "--backup-dir", dir)
	if code != 2 || !strings.Contains(stderr, "need --backup-interval") {
		t.Fatalf("dir without interval: %d %s", code, stderr)
	}

	t.Setenv("HARDWAY_BACKUP_PASSPHRASE", "from the environment")
	code, _, stderr = run(t, "daemon", "unit", "-i", inv, "--backup-interval", "24h", "--binary", "/usr/local/bin/hardway")
	if code != 2 || !strings.Contains(stderr, "a unit never carries HARDWAY_BACKUP_PASSPHRASE") {
		t.Fatalf("unit with the environment's passphrase: %d %s", code, stderr)
	}
	pass := filepath.Join(dir, "backup.pass")
	os.WriteFile(pass, []byte("the passphrase\n"), 0o600)
	code, out, stderr := run(t, "daemon", "unit", "-i", inv, "--backup-interval", "24h", "--backup-passphrase-file", pass, "--binary", "/usr/local/bin/hardway")
	if code != 0 {
		t.Fatalf("unit: %d %s", code, stderr)
	}
	want := filepath.Join(dir, "backups")
	if !strings.Contains(out, "--backup-interval 24h0m0s --backup-dir "+want+" --backup-keep 7 --backup-passphrase-file "+pass) ||
		!strings.Contains(out, "ReadWritePaths="+want+"\n") || strings.Contains(out, "the passphrase\n") || strings.Contains(out, "from the environment") {
		t.Fatalf("unit:\n%s", out)
	}
	if !strings.Contains(stderr, "mkdir -m 0700 "+want) {
		t.Errorf("no warning about the missing backup directory: %s", stderr)
	}
}
