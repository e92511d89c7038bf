package daemon

import (
	"strings"
	"testing"
	"time"
)

// Scheduled backups by the daemon's own unit, sandbox and all: the first
// run writes a backup into the directory the unit made writable, /metrics
// shows its time, size and result, backup/last passes, and the file opens
// with the passphrase ('hardway backup verify' checks every byte). The
// unit stays for the next subtests (the backup is an hour away). Failed and
// overdue backups, and a restart that finds the newest file, are
// unit-tested (pkg/daemon): a real cluster adds nothing there.
func (e *env) backupScenarios(t *testing.T) {
	t.Run("scheduled backups: one written by the sandboxed unit, in /metrics, opened with the passphrase", func(t *testing.T) {
		e.t = t
		dir, pass := home+"/backups", home+"/backup.pass"
		e.mustSSH("controller-1", "mkdir -m 0700 -p "+dir+" && (umask 077 && echo 'daemon test passphrase' > "+pass+")")
		start := time.Now()
		e.startUnit("--backup-interval 1h --backup-keep 2 --backup-dir " + dir + " --backup-passphrase-file " + pass)
		unit := e.mustSSH("controller-1", "cat /etc/systemd/system/"+unitName)
		if !strings.Contains(unit, "ReadWritePaths="+dir+"\n") || !strings.Contains(unit, "--backup-passphrase-file "+pass) || strings.Contains(unit, "daemon test passphrase") {
			t.Fatalf("unit:\n%s", unit)
		}
		// READY=1 comes after the first run, and the backup is part of it.
		mfs := e.scrape()
		size, okSize := gauge(mfs, "hardway_backup_last_size_bytes", "", "")
		res, _ := gauge(mfs, "hardway_backup_last_result", "", "")
		when, _ := gauge(mfs, "hardway_backup_last_success_timestamp_seconds", "", "")
		took, _ := gauge(mfs, "hardway_backup_last_duration_seconds", "", "")
		if !okSize || size < 10<<10 || res != 1 || time.Since(time.Unix(int64(when), 0)) > time.Since(start)+time.Minute {
			t.Fatalf("backup metrics: size %v (%v), result %v, time %v", size, okSize, res, when)
		}
		if st := statuses(mfs)["backup/last"]; st != 0 {
			t.Fatalf("backup/last = %v", st)
		}
		files := strings.Fields(e.mustSSH("controller-1", "ls "+dir))
		if len(files) != 1 || !strings.HasSuffix(files[0], ".tar.gz.age") {
			t.Fatalf("backup directory: %v", files)
		}
		out := e.mustSSH("controller-1", home+"/hardway backup verify "+dir+"/"+files[0]+" --passphrase-file "+pass)
		t.Logf("backup %s: %.0f bytes in %.1fs; verify: %s", files[0], size, took, strings.TrimSpace(out))
	})
}
