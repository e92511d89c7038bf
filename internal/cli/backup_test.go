package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/backup"
)

// Refusals that need no host: no passphrase, no --from, a file that is not
// a backup. None dials a host or writes a backup.
func TestBackupAndRestoreUsage(t *testing.T) {
	t.Setenv(backup.PassphraseEnv, "")
	inv, st := pkiSetup(t)
	dir := filepath.Join(t.TempDir(), "out")
	code, _, stderr := run(t, "backup", "-i", inv, "--state", st, "--dir", dir)
	if code != 2 || !strings.Contains(stderr, "no passphrase or recipient") || !strings.Contains(stderr, backup.PassphraseEnv) {
		t.Errorf("backup without a passphrase: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the refused backup made its directory")
	}
	if code, _, stderr := run(t, "backup", "-i", inv, "--unencrypted", "--recipient", "age1x"); code != 2 {
		t.Errorf("--unencrypted with --recipient: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, "restore", "-i", inv, "--state", st); code != 2 || !strings.Contains(stderr, "--from") {
		t.Errorf("restore without --from: exit %d: %s", code, stderr)
	}
	junk := filepath.Join(t.TempDir(), "junk.age")
	os.WriteFile(junk, []byte("age-encryption.org/v1\n-> X25519 nothing\n--- broken\n"), 0o600)
	t.Setenv(backup.PassphraseEnv, "pw")
	code, _, stderr = run(t, "restore", "-i", inv, "--state", st, "--from", junk)
	if code != 1 || !strings.Contains(stderr, "hint:") {
		t.Errorf("restore of junk: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(st); err == nil {
		t.Error("a refused restore touched the state directory")
	}
	if code, _, stderr := run(t, "backup", "verify", junk); code != 1 || !strings.Contains(stderr, "error:") {
		t.Errorf("backup verify of junk: exit %d: %s", code, stderr)
	}
	code, out, _ := run(t, "restore", "--help")
	if code != 0 || !strings.Contains(out, "restore-etcd") || !strings.Contains(out, "--replace-etcd-data") {
		t.Errorf("restore --help: %s", out)
	}
}
