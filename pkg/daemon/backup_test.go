package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// fakeBackups records the backups taken and fails on demand.
type fakeBackups struct {
	taken []time.Time
	fail  error
	now   *time.Time
}

func (f *fakeBackups) take(_ context.Context, _ Target, log io.Writer) (BackupInfo, error) {
	f.taken = append(f.taken, *f.now)
	fmt.Fprintln(log, "[backup] snapshot from c1")
	if f.fail != nil {
		return BackupInfo{}, f.fail
	}
	return BackupInfo{Path: fmt.Sprintf("/b/lab-%d.hwbackup", len(f.taken)), Size: 4096 + int64(len(f.taken)), Time: *f.now, Duration: 1500 * time.Millisecond}, nil
}

func checkOf(t *testing.T, d *Daemon, key string) Entry {
	t.Helper()
	d.m.mu.RLock()
	defer d.m.mu.RUnlock()
	for _, e := range d.m.last.entries {
		if e.Key.String() == key {
			return e
		}
	}
	t.Fatalf("no %s in the last run", key)
	return Entry{}
}

// serve serves d's metrics on loopback for scrape.
func serve(t *testing.T, d *Daemon) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: d.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Scheduled backups: a restarted daemon waits out the interval from the
// newest backup on disk; a due backup is taken after the checks; a failed
// one fails backup/last with its hint and is retried after RetryAfter, not
// every run; time, size and result are in /metrics.
func TestScheduledBackups(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	now := t0
	fb := &fakeBackups{now: &now}
	log := &syncBuffer{}
	d := New(Config{Interval: time.Minute, Log: log, Now: func() time.Time { return now },
		Backups: &Backups{Interval: 24 * time.Hour, Take: fb.take, Describe: "/b, keep 7",
			Newest: func(Target) (BackupInfo, bool, error) {
				return BackupInfo{Path: "/b/lab-0.hwbackup", Size: 4000, Time: t0.Add(-2 * time.Hour)}, true, nil
			}}})
	addr := serve(t, d)
	f := &fakeTarget{}
	f.set(pass("pki", ""))
	run := func(at time.Duration) Entry {
		t.Helper()
		now = t0.Add(at)
		d.runOnce(context.Background(), f)
		return checkOf(t, d, CheckBackup)
	}

	e := run(0)
	if len(fb.taken) != 0 || e.Status != verify.Pass || !strings.Contains(e.Message, "the newest is /b/lab-0.hwbackup from 2026-11-30T19:00:00Z, 2h0m0s ago, 4000 bytes") {
		t.Fatalf("at start: taken %v, %+v", fb.taken, e)
	}
	mfs := scrape(t, addr)
	if v, ok := value(mfs, "hardway_backup_last_success_timestamp_seconds"); !ok || v != float64(t0.Add(-2*time.Hour).Unix()) {
		t.Errorf("last success %v %v", v, ok)
	}
	if _, ok := value(mfs, "hardway_backup_last_attempt_timestamp_seconds"); ok {
		t.Errorf("an attempt reported before any")
	}

	// Due 22 h later: taken after the checks, once.
	e = run(22 * time.Hour)
	if len(fb.taken) != 1 || e.Status != verify.Pass || !strings.Contains(e.Message, "/b/lab-1.hwbackup") {
		t.Fatalf("due: taken %v, %+v", fb.taken, e)
	}
	run(22*time.Hour + time.Minute)
	if len(fb.taken) != 1 {
		t.Fatalf("taken again a minute later: %v", fb.taken)
	}
	mfs = scrape(t, addr)
	for name, want := range map[string]float64{
		"hardway_backup_last_success_timestamp_seconds": float64(t0.Add(22 * time.Hour).Unix()),
		"hardway_backup_last_size_bytes":                4097,
		"hardway_backup_last_duration_seconds":          1.5,
		"hardway_backup_last_result":                    1,
		"hardway_backup_last_attempt_timestamp_seconds": float64(t0.Add(22 * time.Hour).Unix()),
	} {
		if v, ok := value(mfs, name); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v, _ := value(mfs, "hardway_backups_total", "result", "ok"); v != 1 {
		t.Errorf("hardway_backups_total{ok} %v", v)
	}
	if v, _ := value(mfs, "hardway_check_status", "check", CheckBackup, "host", ""); v != 0 {
		t.Errorf("check status %v", v)
	}

	// The next one fails: backup/last fails with the error's hint, logged
	// once as a transition; the retry waits RetryAfter (5 min), then works.
	fb.fail = usererr.New(errors.New("no etcd member says it leads"), "a snapshot needs a healthy cluster with a leader: 'hardway verify' says what is wrong")
	e = run(46 * time.Hour)
	if len(fb.taken) != 2 || e.Status != verify.Fail || !strings.Contains(e.Message, "the backup at 2026-12-02T19:00:00Z failed: no etcd member says it leads") ||
		!strings.Contains(e.Hint, "a snapshot needs a healthy cluster") || !strings.Contains(e.Hint, "tries again in 5m0s") || !strings.Contains(e.Hint, "(/b, keep 7)") {
		t.Fatalf("failed: %+v", e)
	}
	mfs = scrape(t, addr)
	if v, _ := value(mfs, "hardway_backup_last_result"); v != 0 {
		t.Errorf("last result %v after a failure", v)
	}
	if v, _ := value(mfs, "hardway_check_status", "check", CheckBackup, "host", ""); v != 2 {
		t.Errorf("check status %v after a failure", v)
	}
	if v, _ := value(mfs, "hardway_backup_last_success_timestamp_seconds"); v != float64(t0.Add(22*time.Hour).Unix()) {
		t.Errorf("a failure moved the last success: %v", v)
	}
	run(46*time.Hour + 2*time.Minute)
	if len(fb.taken) != 2 {
		t.Fatalf("retried before RetryAfter: %v", fb.taken)
	}
	fb.fail = nil
	if e = run(46*time.Hour + 6*time.Minute); len(fb.taken) != 3 || e.Status != verify.Pass {
		t.Fatalf("retry: taken %v, %+v", fb.taken, e)
	}
	for _, want := range []string{
		"backup failed: no etcd member says it leads (hint: a snapshot needs",
		"backup/last: pass -> fail: the backup at",
		"backup/last: fail -> pass",
		"backup: [backup] snapshot from c1",
		"backup: wrote /b/lab-3.hwbackup (4099 bytes)",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// Overdue: no successful backup for longer than Interval and its grace is a
// failure even when no attempt failed (a stuck or skipped run).
func TestBackupOverdue(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	b := (&Backups{Interval: time.Hour}).withDefaults(time.Minute)
	if b.Grace != 15*time.Minute || b.RetryAfter != 5*time.Minute {
		t.Fatalf("defaults %+v", b)
	}
	st := backupState{init: true, since: t0, last: BackupInfo{Path: "/b/x", Size: 1, Time: t0}}
	if r := backupResult(b, st, t0.Add(74*time.Minute)); r.Status != verify.Pass {
		t.Fatalf("%+v", r)
	}
	r := backupResult(b, st, t0.Add(76*time.Minute))
	if r.Status != verify.Fail || !strings.Contains(r.Message, "overdue: the newest is /b/x from 2026-11-30T21:00:00Z, 1h16m0s ago; one is due every 1h0m0s") || r.Hint == "" {
		t.Fatalf("%+v", r)
	}
	// None ever taken: overdue counts from the daemon's start.
	st = backupState{init: true, since: t0}
	if r := backupResult(b, st, t0.Add(2*time.Hour)); r.Status != verify.Fail || !strings.Contains(r.Message, "none taken yet") {
		t.Fatalf("%+v", r)
	}
}

// With scheduled backups the unit makes the backup directory writable too,
// and only then.
func TestUnitBackupDir(t *testing.T) {
	u, err := Unit(UnitConfig{Binary: "/usr/local/bin/hardway", StateDir: "/srv/lab/.hardway", BackupDir: "/srv/lab backups"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u, "ReadWritePaths=/srv/lab/.hardway\nReadWritePaths=\"/srv/lab backups\"\n") {
		t.Fatalf("%s", u)
	}
	if u, _ := Unit(UnitConfig{Binary: "/usr/local/bin/hardway", StateDir: "/srv/lab/.hardway"}); strings.Count(u, "ReadWritePaths=") != 1 {
		t.Fatalf("%s", u)
	}
	if _, err := Unit(UnitConfig{Binary: "/usr/local/bin/hardway", StateDir: "/x", BackupDir: "backups"}); err == nil {
		t.Fatal("a relative backup directory was accepted")
	}
}

// A restarted daemon finds the newest backup of its cluster among the
// files 'hardway backup' names (other clusters' and other files ignored);
// none, or no directory, is no error.
func TestNewestBackup(t *testing.T) {
	dir := t.TempDir()
	inv := &inventory.Inventory{Cluster: "lab", Path: filepath.Join(dir, "inventory.yaml")}
	ct := &ClusterTarget{inv: inv}
	o := BackupOptions{Dir: filepath.Join(dir, "b")}
	if _, ok, err := ct.NewestBackup(o); ok || err != nil {
		t.Fatalf("no directory: %v %v", ok, err)
	}
	os.Mkdir(o.Dir, 0o700)
	t0 := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	for i, name := range []string{
		backup.FileName("lab", t0, true),
		backup.FileName("lab", t0.Add(2*time.Hour), true),
		backup.FileName("other", t0.Add(5*time.Hour), true),
		backup.FileName("lab", t0.Add(time.Hour), false),
		"notes.txt",
	} {
		os.WriteFile(filepath.Join(o.Dir, name), make([]byte, 100+i), 0o600)
	}
	info, ok, err := ct.NewestBackup(o)
	if err != nil || !ok || info.Path != filepath.Join(o.Dir, backup.FileName("lab", t0.Add(2*time.Hour), true)) || info.Size != 101 || info.Time.IsZero() {
		t.Fatalf("%+v %v %v", info, ok, err)
	}
	if got := ct.BackupDir(BackupOptions{}); got != filepath.Join(dir, "backups") {
		t.Errorf("default directory %s", got)
	}
}

// A backup runs inside a run, so the watchdog waits for its time limit too.
func TestStuckAfterCountsBackups(t *testing.T) {
	plain := New(Config{Interval: time.Minute})
	with := New(Config{Interval: time.Minute, Backups: &Backups{Interval: time.Hour, Timeout: 7 * time.Minute}})
	if with.cfg.StuckAfter-plain.cfg.StuckAfter != 7*time.Minute {
		t.Fatalf("StuckAfter %s without backups, %s with", plain.cfg.StuckAfter, with.cfg.StuckAfter)
	}
}
