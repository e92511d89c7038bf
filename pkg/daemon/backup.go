package daemon

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// CheckBackup is the daemon's own check: the last scheduled backup
// succeeded and is not older than its interval allows.
const CheckBackup = "backup/last"

// BackupInfo is one backup file written.
type BackupInfo struct {
	Path     string
	Size     int64
	Time     time.Time // when it was finished
	Duration time.Duration
}

// Backups schedules backups inside the daemon's runs: after the checks of
// a run, when the newest backup is Interval old, one is taken (never two
// runs at once, so never two backups at once).
type Backups struct {
	Interval time.Duration
	// Grace is how much later than Interval the newest backup may be
	// before the check calls it overdue; default a quarter of Interval, at
	// least two daemon intervals.
	Grace time.Duration
	// RetryAfter is the pause after a failed backup; default the daemon's
	// interval, at least 5 minutes, at most Interval.
	RetryAfter time.Duration
	Timeout    time.Duration // per backup; default 10m
	// Take writes one backup of t's cluster (it takes the state
	// directory's lock itself), printing progress to log.
	Take func(ctx context.Context, t Target, log io.Writer) (BackupInfo, error)
	// Newest finds the newest backup of t's cluster already on disk, so
	// that a restarted daemon waits out the interval instead of taking one
	// at once.
	Newest func(t Target) (BackupInfo, bool, error)
	// Describe says where backups go, for hints ("backups/ next to the
	// inventory, keep 7").
	Describe string
}

// backupState is what the daemon knows about its backups; only runOnce
// touches it (runs never overlap), the metrics get a copy.
type backupState struct {
	init    bool
	since   time.Time  // daemon start: with no backup yet, overdue counts from here
	last    BackupInfo // the newest successful backup (zero: none)
	attempt time.Time  // the last attempt
	lastErr error      // of the last attempt; nil when it succeeded
	ok      int        // counters for /metrics
	failed  int
}

func (b *Backups) withDefaults(interval time.Duration) Backups {
	o := *b
	if o.Grace <= 0 {
		o.Grace = max(o.Interval/4, 2*interval)
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = min(max(interval, 5*time.Minute), o.Interval)
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	return o
}

// backupRound takes a backup when one is due and returns the check's
// result for this run.
func (d *Daemon) backupRound(ctx context.Context, t Target) verify.Result {
	b := d.cfg.Backups.withDefaults(d.cfg.Interval)
	st := &d.bk
	now := d.cfg.Now()
	if !st.init {
		st.init, st.since = true, now
		if b.Newest != nil {
			if info, ok, err := b.Newest(t); err != nil {
				d.log.printf(prioWarning, "backup: cannot list earlier backups: %v", err)
			} else if ok {
				st.last = info
				d.log.printf(prioInfo, "backup: the newest is %s from %s; the next is due %s", info.Path, info.Time.Format(time.RFC3339), info.Time.Add(b.Interval).Format(time.RFC3339))
			}
		}
	}
	due := st.last.Time.IsZero() || now.Sub(st.last.Time) >= b.Interval
	retryWait := st.lastErr != nil && now.Sub(st.attempt) < b.RetryAfter
	if due && !retryWait && ctx.Err() == nil {
		st.attempt = now
		bctx, cancel := context.WithTimeout(ctx, b.Timeout)
		lw := &lineWriter{log: d.log, prefix: "backup: "}
		info, err := b.Take(bctx, t, lw)
		lw.Flush()
		cancel()
		if err != nil {
			st.lastErr = err
			st.failed++
			d.m.backups.WithLabelValues("failed").Inc()
			msg := "backup failed: " + err.Error()
			if h := usererr.HintOf(err); h != "" {
				msg += " (hint: " + h + ")"
			}
			d.log.printf(prioErr, "%s", strings.ReplaceAll(msg, "\n", " "))
		} else {
			if info.Time.IsZero() {
				info.Time = d.cfg.Now()
			}
			st.last, st.lastErr = info, nil
			st.ok++
			d.m.backups.WithLabelValues("ok").Inc()
			d.log.printf(prioNotice, "backup: wrote %s (%d bytes) in %s", info.Path, info.Size, info.Duration.Round(time.Millisecond))
		}
	}
	return backupResult(b, *st, d.cfg.Now())
}

// backupResult judges the backups: the last attempt failed, or the newest
// backup is older than the interval and its grace (overdue), is a failure.
func backupResult(b Backups, st backupState, now time.Time) verify.Result {
	r := verify.Result{Check: CheckBackup}
	where := ""
	if b.Describe != "" {
		where = " (" + b.Describe + ")"
	}
	age := "none taken yet"
	if !st.last.Time.IsZero() {
		age = fmt.Sprintf("the newest is %s from %s, %s ago", st.last.Path, st.last.Time.UTC().Format(time.RFC3339), now.Sub(st.last.Time).Round(time.Second))
	}
	overdueSince := st.since
	if !st.last.Time.IsZero() {
		overdueSince = st.last.Time
	}
	overdue := now.Sub(overdueSince) > b.Interval+b.Grace
	switch {
	case st.lastErr != nil:
		r.Status = verify.Fail
		r.Message = fmt.Sprintf("the backup at %s failed: %v; %s", st.attempt.UTC().Format(time.RFC3339), st.lastErr, age)
		r.Hint = usererr.HintOf(st.lastErr)
		if r.Hint == "" {
			r.Hint = "the daemon's log has the whole error"
		}
		r.Hint += fmt.Sprintf("; the daemon tries again in %s; 'hardway backup' by hand shows the same error%s", b.RetryAfter, where)
	case overdue:
		r.Status = verify.Fail
		r.Message = fmt.Sprintf("overdue: %s; one is due every %s", age, b.Interval)
		r.Hint = "the daemon takes one after a run when the newest is --backup-interval old: see its log for why none was taken (runs stuck or skipped?)" + where
	case st.last.Time.IsZero():
		r.Status, r.Message = verify.Pass, "none taken yet; the first is due now"
	default:
		r.Status, r.Message = verify.Pass, fmt.Sprintf("%s, %d bytes; the next is due %s", age, st.last.Size, st.last.Time.Add(b.Interval).UTC().Format(time.RFC3339))
	}
	return r
}
