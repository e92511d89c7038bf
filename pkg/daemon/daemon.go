// Package daemon is `hardway daemon`: the verify checks on an interval,
// never two runs at once, with a log line only when a check changes, a
// Prometheus /metrics endpoint, and the systemd notify protocol (READY,
// STATUS, WATCHDOG, STOPPING). With Repair, drifted hosts are converged one
// at a time by the steps of `hardway up`.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/runlog"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// Certificate is one expiry the metrics show.
type Certificate struct {
	Name     string
	Kind     string // certificate, kubeconfig, ...
	NotAfter time.Time
}

// EtcdMember is one member's status for the metrics.
type EtcdMember struct {
	Name      string
	Reachable bool
	Leader    bool
	DBSize    int64
}

// Target is what one inventory gives the daemon. Load makes a new one at
// start and on every SIGHUP; the daemon calls at most one method at a time.
type Target interface {
	Checks() []verify.Check
	Certificates(now time.Time) []Certificate
	EtcdStatus(ctx context.Context) ([]EtcdMember, error)
	// Repair converges one host with the steps of `hardway up`, printing
	// what it does to out, and returns the number of changes made.
	Repair(ctx context.Context, host string, out io.Writer) (int, error)
	// EndRun drops what a run opened (SSH connections): a host that
	// rebooted between runs must not leave a dead connection behind.
	EndRun()
	Close()
}

// Config of a daemon. Zero durations take the defaults of the CLI.
type Config struct {
	Load          func() (Target, error)
	Interval      time.Duration // between run starts; default 60s
	CheckTimeout  time.Duration // per check; default 60s
	Parallel      int           // checks at once; default 4
	Repair        bool
	RepairTimeout time.Duration // per host; default 5m
	// RepairBackoff is how long repairs pause after the first failed one
	// (default Interval); it doubles with each failure in a row, up to
	// RepairBackoffMax (default 1h).
	RepairBackoff    time.Duration
	RepairBackoffMax time.Duration
	// StopTimeout bounds how long a run in progress may go on after
	// SIGTERM before it is cancelled; default 20s.
	StopTimeout time.Duration
	// StuckAfter is how long a run may take before the watchdog pings stop
	// and systemd restarts the service; default 10m, or more with Repair.
	StuckAfter time.Duration
	Listen     string       // default 127.0.0.1:9479
	Listener   net.Listener // instead of Listen (tests)
	Log        io.Writer    // default stderr
	// Journal prefixes log lines with <N> syslog priorities, which
	// journald reads when stderr is its stream.
	Journal bool
	Now     func() time.Time
	// Backups, when set, takes scheduled backups after the checks and adds
	// the backup/last check and the hardway_backup_* metrics.
	Backups *Backups
}

// DefaultListen is loopback: the metrics name every host and certificate.
const DefaultListen = "127.0.0.1:9479"

// Daemon is one `hardway daemon` process.
type Daemon struct {
	cfg Config
	m   *metrics
	log *logger
	trk Tracker

	mu        sync.Mutex
	ready     bool
	status    string
	runSince  time.Time // zero when no run is going
	stuckSeen bool

	// Repairs back off after a failure (only runOnce, one at a time,
	// touches these).
	repairFailures int       // failed repairs in a row
	repairsAfter   time.Time // no repair before this
	pauseLogged    bool      // the current pause was logged

	bk backupState // scheduled backups (only runOnce touches it)
}

// New returns a daemon; Run starts it.
func New(cfg Config) *Daemon {
	if cfg.Interval <= 0 {
		cfg.Interval = 60 * time.Second
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 60 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.RepairTimeout <= 0 {
		cfg.RepairTimeout = 5 * time.Minute
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 20 * time.Second
	}
	if cfg.RepairBackoff <= 0 {
		cfg.RepairBackoff = cfg.Interval
	}
	if cfg.RepairBackoffMax <= 0 {
		cfg.RepairBackoffMax = time.Hour
	}
	cfg.RepairBackoffMax = max(cfg.RepairBackoffMax, cfg.RepairBackoff)
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = 10 * time.Minute
		if cfg.Repair {
			cfg.StuckAfter += 3 * cfg.RepairTimeout
		}
		if cfg.Backups != nil {
			// A backup runs inside a run: its time limit too.
			cfg.StuckAfter += cfg.Backups.withDefaults(cfg.Interval).Timeout
		}
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Daemon{cfg: cfg, m: newMetrics(cfg.Now), log: &logger{w: cfg.Log, journal: cfg.Journal}}
}

// Handler serves /metrics and /healthz.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{ErrorLog: d.log}))
	mux.HandleFunc("/healthz", d.healthz)
	return mux
}

// healthz is about the daemon, not the cluster (that is /metrics): 200
// once a run finished and none is stuck.
func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	ready, status, since := d.ready, d.status, d.runSince
	d.mu.Unlock()
	switch {
	case !ready:
		http.Error(w, "starting: the first run has not finished", http.StatusServiceUnavailable)
	case !since.IsZero() && d.cfg.Now().Sub(since) > d.cfg.StuckAfter:
		http.Error(w, fmt.Sprintf("stuck: a run has been going since %s", since.Format(time.RFC3339)), http.StatusServiceUnavailable)
	default:
		fmt.Fprintf(w, "ok: %s\n", status)
	}
}

type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Run loads the target, serves the metrics, runs the checks until ctx ends
// or SIGTERM/SIGINT arrives, and reloads on SIGHUP. It returns an error only
// when it cannot start (bad inventory, port in use) or the server fails.
func (d *Daemon) Run(ctx context.Context) error {
	tgt, err := d.cfg.Load()
	if err != nil {
		return err
	}
	var pending Target // a reloaded target waiting for the run in progress
	defer func() {
		tgt.Close()
		if pending != nil {
			pending.Close()
		}
	}()
	ln := d.cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", d.cfg.Listen); err != nil {
			return usererr.New(fmt.Errorf("daemon: %w", err), "is another hardway daemon running? pick a free address with --listen")
		}
	}
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)

	var wdC <-chan time.Time
	if every, err := sd.SdWatchdogEnabled(false); err != nil {
		d.log.printf(prioWarning, "watchdog: %v", err)
	} else if every > 0 {
		t := time.NewTicker(every / 2)
		defer t.Stop()
		wdC = t.C
	}
	d.log.printf(prioInfo, "serving /metrics and /healthz on http://%s; checks every %s%s", ln.Addr(), d.cfg.Interval, map[bool]string{true: ", repair on", false: ""}[d.cfg.Repair])

	tick := time.NewTicker(d.cfg.Interval)
	defer tick.Stop()
	var cur *running
	done := make(chan struct{}, 1)
	start := func() {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		cur = &running{cancel: cancel, done: make(chan struct{})}
		d.mu.Lock()
		d.runSince, d.stuckSeen = d.cfg.Now(), false
		d.mu.Unlock()
		r, t := cur, tgt
		go func() {
			defer close(r.done)
			defer cancel()
			d.runOnce(rctx, t)
			done <- struct{}{}
		}()
	}
	start()
	for {
		select {
		case <-ctx.Done():
			return d.stop(cur)
		case s := <-sigs:
			if s != syscall.SIGHUP {
				return d.stop(cur)
			}
			nt, err := d.cfg.Load()
			if err != nil {
				d.m.reloads.WithLabelValues("refused").Inc()
				msg := "reload refused, keeping the previous inventory: " + err.Error()
				if h := usererr.HintOf(err); h != "" {
					msg += " (hint: " + h + ")"
				}
				d.log.printf(prioErr, "%s", strings.ReplaceAll(msg, "\n", " "))
				continue
			}
			d.m.reloads.WithLabelValues("ok").Inc()
			d.log.printf(prioInfo, "inventory reloaded")
			if pending != nil {
				pending.Close()
			}
			pending = nt
			if cur == nil {
				tgt.Close()
				tgt, pending = pending, nil
				start()
			}
		case <-tick.C:
			if cur != nil {
				d.m.skipped.Inc()
				continue
			}
			start()
		case <-done:
			<-cur.done
			cur = nil
			d.mu.Lock()
			d.runSince = time.Time{}
			d.mu.Unlock()
			if pending != nil {
				tgt.Close()
				tgt, pending = pending, nil
				start()
			}
		case <-wdC:
			d.mu.Lock()
			since := d.runSince
			stuck := !since.IsZero() && d.cfg.Now().Sub(since) > d.cfg.StuckAfter
			logIt := stuck && !d.stuckSeen
			d.stuckSeen = d.stuckSeen || stuck
			d.mu.Unlock()
			if logIt {
				d.log.printf(prioErr, "a run has been going since %s: no more watchdog pings, systemd will restart the daemon", since.Format(time.RFC3339))
			}
			if !stuck {
				d.notify("WATCHDOG=1")
			}
		case err := <-srvErr:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("daemon: serve metrics: %w", err)
		}
	}
}

// stop tells systemd, lets the run in progress finish within StopTimeout,
// then cancels it and waits as long again for the checks to notice.
func (d *Daemon) stop(cur *running) error {
	d.notify("STOPPING=1")
	if cur == nil {
		d.log.printf(prioInfo, "stopping")
		return nil
	}
	d.log.printf(prioInfo, "stopping: waiting up to %s for the run in progress", d.cfg.StopTimeout)
	select {
	case <-cur.done:
		return nil
	case <-time.After(d.cfg.StopTimeout):
	}
	cur.cancel()
	select {
	case <-cur.done:
		d.log.printf(prioInfo, "run cancelled")
	case <-time.After(d.cfg.StopTimeout):
		d.log.printf(prioWarning, "run did not end %s after it was cancelled; exiting anyway", d.cfg.StopTimeout)
	}
	return nil
}

func (d *Daemon) notify(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		d.log.printf(prioWarning, "sd_notify: %v", err)
	}
}

// repairChecks are the failures a push and a restart can fix.
var repairChecks = map[string]bool{cluster.CheckHostFiles: true, cluster.CheckHostBinaries: true, cluster.CheckHostUnits: true, cluster.CheckWorkerUnits: true}

// RepairHosts are the hosts with a failure that `up` fixes, in check order.
func RepairHosts(es []Entry) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range es {
		if e.Status == verify.Fail && repairChecks[e.Check] && e.Host != "" && !seen[e.Host] {
			seen[e.Host] = true
			out = append(out, e.Host)
		}
	}
	return out
}

// runOnce is one run: checks, transitions logged, certificates, etcd
// status, repairs; then the metrics snapshot and the status line. Runs
// never overlap, so the tracker needs no lock.
func (d *Daemon) runOnce(ctx context.Context, t Target) {
	defer t.EndRun()
	rep := verify.Run(ctx, t.Checks(), d.cfg.Parallel, d.cfg.CheckTimeout)
	if d.cfg.Backups != nil {
		r := d.backupRound(ctx, t)
		rep.Results = append(rep.Results, r)
		switch r.Status {
		case verify.Pass:
			rep.Pass++
		case verify.Warn:
			rep.Warn++
		default:
			rep.Fail++
		}
	}
	es := Summarize(rep.Results)
	for _, tr := range d.trk.Update(es) {
		p := prioNotice
		switch tr.Status {
		case verify.Fail:
			p = prioErr
		case verify.Warn:
			p = prioWarning
		}
		d.log.printf(p, "%s", tr.Line())
	}
	s := &snapshot{entries: es, duration: rep.Duration}
	if d.cfg.Backups != nil {
		bk := d.bk
		s.backup = &bk
	}
	s.certs = t.Certificates(d.cfg.Now())
	ectx, cancel := context.WithTimeout(ctx, d.cfg.CheckTimeout)
	ms, err := t.EtcdStatus(ectx)
	cancel()
	if err == nil {
		s.etcd = ms
	}
	s.finished = d.cfg.Now()
	d.m.set(s)
	d.m.runs.Inc()
	// READY as soon as the first checks are in: repairs can take minutes,
	// and the metrics already say what is wrong.
	d.setStatus(statusLine(rep, es, 0))

	repaired := 0
	if d.cfg.Repair {
		repaired = d.repair(ctx, t, es)
	}
	if repaired > 0 {
		d.setStatus(statusLine(rep, es, repaired))
	}
}

// repair converges the failing hosts one at a time and returns how many it
// repaired. The first repair that fails ends the round and pauses repairs,
// twice as long after each failure in a row (up to RepairBackoffMax): a fix
// that breaks one host must not be carried to the next, every interval.
func (d *Daemon) repair(ctx context.Context, t Target, es []Entry) int {
	hosts := RepairHosts(es)
	if len(hosts) == 0 {
		return 0
	}
	if now := d.cfg.Now(); now.Before(d.repairsAfter) {
		if !d.pauseLogged {
			d.pauseLogged = true
			d.log.printf(prioWarning, "repairs paused until %s after %d failed repair(s) in a row; %s still need one",
				d.repairsAfter.Format(time.RFC3339), d.repairFailures, strings.Join(hosts, ", "))
		}
		return 0
	}
	repaired := 0
	for _, h := range hosts {
		if ctx.Err() != nil {
			break
		}
		var why []string
		for _, e := range es {
			if e.Host == h && e.Status == verify.Fail && repairChecks[e.Check] {
				why = append(why, e.Check+": "+e.Message)
			}
		}
		d.log.printf(prioNotice, "repair %s: %s", h, strings.Join(why, "; "))
		rctx, cancel := context.WithTimeout(ctx, d.cfg.RepairTimeout)
		lw := &lineWriter{log: d.log, prefix: "repair " + h + ": "}
		n, err := t.Repair(rctx, h, lw)
		lw.Flush()
		cancel()
		if err != nil {
			d.m.repairs.WithLabelValues(h, "failed").Inc()
			msg := fmt.Sprintf("repair %s failed: %v", h, err)
			if hint := usererr.HintOf(err); hint != "" {
				msg += " (hint: " + hint + ")"
			}
			var le *runlog.Error
			if errors.As(err, &le) {
				msg += " (log: " + le.Path + ")"
			}
			d.log.printf(prioErr, "%s", strings.ReplaceAll(msg, "\n", " "))
			d.repairFailures++
			pause := d.cfg.RepairBackoff
			for i := 1; i < d.repairFailures && pause < d.cfg.RepairBackoffMax; i++ {
				pause *= 2
			}
			pause = min(pause, d.cfg.RepairBackoffMax)
			d.repairsAfter, d.pauseLogged = d.cfg.Now().Add(pause), true
			d.log.printf(prioWarning, "repairs paused for %s (%d failed in a row); no other host is repaired until then", pause, d.repairFailures)
			return repaired
		}
		d.m.repairs.WithLabelValues(h, "ok").Inc()
		repaired++
		d.log.printf(prioNotice, "repair %s: done, %d change(s); the next run checks it", h, n)
	}
	d.repairFailures, d.pauseLogged = 0, false
	return repaired
}

// setStatus records the status line and tells systemd; the first time,
// with READY=1.
func (d *Daemon) setStatus(status string) {
	d.mu.Lock()
	first := !d.ready
	d.ready, d.status = true, status
	d.mu.Unlock()
	if first {
		d.notify("READY=1\nSTATUS=" + status)
	} else {
		d.notify("STATUS=" + status)
	}
}

// statusLine is systemd's STATUS=: counts, the failing keys, repairs.
func statusLine(rep *verify.Report, es []Entry, repaired int) string {
	var failing []string
	for _, e := range es {
		if e.Status == verify.Fail {
			failing = append(failing, e.Key.String())
		}
	}
	sort.Strings(failing)
	s := fmt.Sprintf("%d pass, %d warn, %d fail in %s", rep.Pass, rep.Warn, rep.Fail, rep.Duration.Round(100*time.Millisecond))
	if len(failing) > 0 {
		f := strings.Join(failing, ", ")
		if len(f) > 160 {
			f = f[:157] + "..."
		}
		s += "; failing: " + f
	}
	if repaired > 0 {
		s += fmt.Sprintf("; repaired %d host(s)", repaired)
	}
	return s
}
