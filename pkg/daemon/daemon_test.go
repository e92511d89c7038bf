package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// fakeTarget returns whatever results the test sets; a check of it blocks
// while block is set, until its context ends.
type fakeTarget struct {
	name string
	mu   sync.Mutex
	rs   []verify.Result
	runs int
	// block makes the next run's check wait for its context.
	block   bool
	blocked chan struct{} // closed when a blocking check started
	sawCtx  error
	repairs []string
	closed  bool
	// failRepair makes the repair of these hosts fail.
	failRepair map[string]bool
}

func (f *fakeTarget) set(rs ...verify.Result) {
	f.mu.Lock()
	f.rs = rs
	f.mu.Unlock()
}

func (f *fakeTarget) Checks() []verify.Check {
	return []verify.Check{{Name: "fake", Run: func(ctx context.Context) []verify.Result {
		f.mu.Lock()
		f.runs++
		rs, block := append([]verify.Result{}, f.rs...), f.block
		f.mu.Unlock()
		if block {
			close(f.blocked)
			<-ctx.Done()
			f.mu.Lock()
			f.sawCtx = ctx.Err()
			f.mu.Unlock()
		}
		return rs
	}}}
}

func (f *fakeTarget) Certificates(now time.Time) []Certificate {
	return []Certificate{{Name: "ca", Kind: "certificate", NotAfter: now.Add(100 * 24 * time.Hour)}}
}

func (f *fakeTarget) EtcdStatus(context.Context) ([]EtcdMember, error) {
	return []EtcdMember{{Name: "c1", Reachable: true, Leader: true, DBSize: 4096}, {Name: "c2", Reachable: true}}, nil
}

func (f *fakeTarget) Repair(_ context.Context, host string, out io.Writer) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repairs = append(f.repairs, host)
	fmt.Fprintf(out, "[push] %s: write /etc/systemd/system/etcd.service (0644, content)\n", host)
	if f.failRepair[host] {
		return 0, errors.New("kube-apiserver did not become healthy")
	}
	for i := range f.rs {
		if f.rs[i].Host == host {
			f.rs[i].Status = verify.Pass
		}
	}
	return 1, nil
}

func (f *fakeTarget) EndRun() {}

func (f *fakeTarget) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// syncBuffer is the daemon's log, read by the test while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// notifySocket listens where sd_notify writes, as systemd does.
func notifySocket(t *testing.T) <-chan string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", p)
	ch := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return ch
}

// waitNotify returns the first message with prefix, dropping the others.
func waitNotify(t *testing.T, ch <-chan string, prefix string) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("notify socket closed before %q", prefix)
			}
			if strings.HasPrefix(m, prefix) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q on the notify socket", prefix)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value is the sample of family with exactly these labels; ok false if absent.
func value(mfs map[string]*dto.MetricFamily, family string, labels ...string) (float64, bool) {
	mf := mfs[family]
	if mf == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range mf.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

type started struct {
	d      *Daemon
	addr   string
	log    *syncBuffer
	errc   chan error
	cancel context.CancelFunc
}

func start(t *testing.T, cfg Config) *started {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cfg.Listener, cfg.Log = ln, log
	d := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{d: d, addr: ln.Addr().String(), log: log, errc: make(chan error, 1), cancel: cancel}
	go func() { s.errc <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.errc:
		case <-time.After(30 * time.Second):
			t.Errorf("daemon did not stop")
		}
	})
	return s
}

func (s *started) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.errc:
		s.errc <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// TestDaemonLifecycle drives one daemon through the protocol systemd
// sees: READY with STATUS after the first run, WATCHDOG pings, a failing
// check in /metrics and one transition in the log, a refused and an
// accepted SIGHUP reload, STOPPING on SIGTERM.
func TestDaemonLifecycle(t *testing.T) {
	notes := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", "") // any pid: sd_watchdog_enabled then does not compare

	good := &fakeTarget{name: "good"}
	good.set(pass("etcd/health", "c1"), pass("etcd/health", "c2"), pass("pki", ""))
	next := &fakeTarget{name: "next"}
	next.set(pass("etcd/health", "c1"), pass("pki", ""))
	var mu sync.Mutex
	loads := []func() (Target, error){
		func() (Target, error) { return good, nil },
		func() (Target, error) {
			return nil, usererr.New(errors.New("inventory.yaml:7:3: controlPlane[1].address: \"10.0.0.300\" is not an IP"), "fix the inventory")
		},
		func() (Target, error) { return next, nil },
	}
	load := func() (Target, error) {
		mu.Lock()
		defer mu.Unlock()
		f := loads[0]
		loads = loads[1:]
		return f()
	}
	s := start(t, Config{Load: load, Interval: 50 * time.Millisecond})

	ready := waitNotify(t, notes, "READY=1")
	if !strings.Contains(ready, "\nSTATUS=3 pass, 0 warn, 0 fail") {
		t.Errorf("READY without the status line: %q", ready)
	}
	waitNotify(t, notes, "WATCHDOG=1")
	if resp, err := http.Get("http://" + s.addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz after READY: %v %v", resp, err)
	}

	mfs := scrape(t, s.addr)
	for _, tc := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"hardway_check_status", []string{"check", "etcd/health", "host", "c2"}, 0},
		{"hardway_check_status", []string{"check", "pki", "host", ""}, 0},
		{"hardway_etcd_member_healthy", []string{"member", "c2"}, 1},
		{"hardway_etcd_member_leader", []string{"member", "c1"}, 1},
		{"hardway_etcd_member_leader", []string{"member", "c2"}, 0},
		{"hardway_check_results", []string{"status", "fail"}, 0},
	} {
		if got, ok := value(mfs, tc.family, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.labels, got, ok, tc.want)
		}
	}
	if v, ok := value(mfs, "hardway_certificate_expiry_seconds", "name", "ca"); !ok || v < 99*24*3600 || v > 100*24*3600 {
		t.Errorf("ca expiry %v s", v)
	}
	if _, ok := value(mfs, "hardway_run_duration_seconds"); !ok {
		t.Errorf("no hardway_run_duration_seconds")
	}
	if _, ok := value(mfs, "process_resident_memory_bytes"); !ok {
		t.Errorf("no process metrics")
	}

	// A member stops: exactly its gauge flips, one line is logged.
	good.set(pass("etcd/health", "c1"), fail("etcd/health", "c2", "context deadline exceeded", "see 'journalctl -u etcd' on c2"), pass("pki", ""))
	waitFor(t, "etcd/health c2 to fail in /metrics", func() bool {
		v, _ := value(scrape(t, s.addr), "hardway_check_status", "check", "etcd/health", "host", "c2")
		return v == 2
	})
	mfs = scrape(t, s.addr)
	if v, _ := value(mfs, "hardway_check_status", "check", "etcd/health", "host", "c1"); v != 0 {
		t.Errorf("c1 flipped too")
	}
	if v, _ := value(mfs, "hardway_etcd_member_healthy", "member", "c2"); v != 0 {
		t.Errorf("hardway_etcd_member_healthy c2 = %v", v)
	}
	waitNotify(t, notes, "STATUS=2 pass, 0 warn, 1 fail")
	before := good.runCount()
	waitFor(t, "two more runs", func() bool { return good.runCount() >= before+2 })
	if n := strings.Count(s.log.String(), "->"); n != 1 || !strings.Contains(s.log.String(), "etcd/health c2: pass -> fail: context deadline exceeded (hint: see 'journalctl -u etcd' on c2)") {
		t.Errorf("want exactly one transition logged, got %d:\n%s", n, s.log.String())
	}

	// A bad inventory on SIGHUP is refused; the old target keeps running.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refusal", func() bool { return strings.Contains(s.log.String(), "reload refused") })
	if !strings.Contains(s.log.String(), `controlPlane[1].address: "10.0.0.300" is not an IP (hint: fix the inventory)`) {
		t.Errorf("refusal without the error and hint:\n%s", s.log.String())
	}
	before = good.runCount()
	waitFor(t, "runs on the old target", func() bool { return good.runCount() >= before+2 })
	if v, _ := value(scrape(t, s.addr), "hardway_reloads_total", "result", "refused"); v != 1 {
		t.Errorf("hardway_reloads_total{refused} = %v", v)
	}

	// A good one replaces it: c2's gauge goes away, the old target is closed.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new target to run", func() bool { return next.runCount() > 0 && good.isClosed() })
	waitFor(t, "c2 to leave /metrics", func() bool {
		_, ok := value(scrape(t, s.addr), "hardway_check_status", "check", "etcd/health", "host", "c2")
		return !ok
	})

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitNotify(t, notes, "STOPPING=1")
	if err := s.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !next.isClosed() {
		t.Errorf("target not closed on exit")
	}
}

func (f *fakeTarget) runCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

func (f *fakeTarget) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// TestStopCancelsAHungRun: a check that never returns on its own is
// cancelled after StopTimeout, and Run returns.
func TestStopCancelsAHungRun(t *testing.T) {
	notes := notifySocket(t)
	f := &fakeTarget{block: true, blocked: make(chan struct{})}
	f.set(pass("pki", ""))
	s := start(t, Config{Load: func() (Target, error) { return f, nil }, Interval: time.Hour, CheckTimeout: time.Hour, StopTimeout: 100 * time.Millisecond})
	<-f.blocked
	if resp, err := http.Get("http://" + s.addr + "/healthz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz before the first run: %v %v", resp, err)
	}
	s.cancel()
	waitNotify(t, notes, "STOPPING=1")
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !errors.Is(f.sawCtx, context.Canceled) {
		t.Errorf("the check saw %v, want cancellation", f.sawCtx)
	}
	if !strings.Contains(s.log.String(), "run cancelled") {
		t.Errorf("log:\n%s", s.log.String())
	}
}

// TestRepairOneHostAtATime: --repair converges each drifted host in turn,
// logs it and counts it; hosts that pass are left alone.
func TestRepairOneHostAtATime(t *testing.T) {
	notifySocket(t)
	f := &fakeTarget{}
	f.set(fail("host/files", "c3", "drifted: /etc/systemd/system/kube-scheduler.service (content)", ""), pass("host/files", "c2"),
		fail("host/units", "c1", "etcd is not active", ""))
	s := start(t, Config{Load: func() (Target, error) { return f, nil }, Interval: 50 * time.Millisecond, Repair: true})
	waitFor(t, "repairs counted", func() bool {
		mfs := scrape(t, s.addr)
		a, _ := value(mfs, "hardway_repairs_total", "host", "c3", "result", "ok")
		b, _ := value(mfs, "hardway_repairs_total", "host", "c1", "result", "ok")
		return a == 1 && b == 1
	})
	waitFor(t, "the fail -> pass lines", func() bool { return strings.Count(s.log.String(), "fail -> pass") == 2 })
	f.mu.Lock()
	repairs := strings.Join(f.repairs, ",")
	f.mu.Unlock()
	if repairs != "c3,c1" {
		t.Errorf("repaired %s, want c3,c1 once each", repairs)
	}
	for _, want := range []string{
		"repair c3: host/files: drifted: /etc/systemd/system/kube-scheduler.service (content)",
		"repair c3: [push] c3: write /etc/systemd/system/etcd.service (0644, content)",
		"repair c3: done, 1 change(s)",
	} {
		if !strings.Contains(s.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, s.log.String())
		}
	}
}

func TestJournalPriorities(t *testing.T) {
	var b bytes.Buffer
	l := &logger{w: &b, journal: true}
	l.printf(prioErr, "etcd/health c2: pass -> fail: x\n")
	lw := &lineWriter{log: l, prefix: "repair c2: "}
	fmt.Fprint(lw, "[push] one\n[push] tw")
	fmt.Fprint(lw, "o\n[etcd] three")
	lw.Flush()
	want := "<3>etcd/health c2: pass -> fail: x\n<6>repair c2: [push] one\n<6>repair c2: [push] two\n<6>repair c2: [etcd] three\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// After the first host whose repair fails, no other host is repaired, and
// repairs pause: Interval, then twice as long after each failure in a row,
// never longer than RepairBackoffMax; a round that succeeds resets it.
func TestRepairStopsAndBacksOff(t *testing.T) {
	now := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)
	log := &syncBuffer{}
	d := New(Config{Repair: true, Interval: time.Minute, RepairBackoffMax: 3 * time.Minute, Log: log, Now: func() time.Time { return now }})
	f := &fakeTarget{failRepair: map[string]bool{"c1": true}}
	drift := func() {
		f.set(fail("host/files", "c1", "drifted", ""), fail("host/files", "c2", "drifted", ""), fail("host/units", "c3", "etcd is not active", ""))
	}
	round := func(at time.Duration) string {
		now = time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC).Add(at)
		f.mu.Lock()
		f.repairs = nil
		f.mu.Unlock()
		drift()
		d.runOnce(context.Background(), f)
		f.mu.Lock()
		defer f.mu.Unlock()
		return strings.Join(f.repairs, ",")
	}
	for _, step := range []struct {
		at   time.Duration
		want string
	}{
		{0, "c1"},                // fails: pause 1m, c2 and c3 untouched
		{30 * time.Second, ""},   // paused
		{61 * time.Second, "c1"}, // fails again: pause 2m
		{61*time.Second + 119*time.Second, ""},
		{61*time.Second + 121*time.Second, "c1"}, // third: 4m, bounded to 3m
		{182*time.Second + 179*time.Second, ""},
		{182*time.Second + 181*time.Second, "c1"},
	} {
		if got := round(step.at); got != step.want {
			t.Fatalf("at %s: repaired %q, want %q\n%s", step.at, got, step.want, log.String())
		}
	}
	for _, want := range []string{"repairs paused for 1m0s (1 failed in a row)", "repairs paused for 2m0s", "repairs paused for 3m0s (3 failed", "repairs paused for 3m0s (4 failed"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	// Fixed: the next round after the pause repairs every host in turn.
	f.failRepair = nil
	if got := round(20 * time.Minute); got != "c1,c2,c3" {
		t.Fatalf("after the fix: %q", got)
	}
	if d.repairFailures != 0 {
		t.Fatalf("failures not reset: %d", d.repairFailures)
	}
}
