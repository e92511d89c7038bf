package daemon

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hardway/hardway/pkg/verify"
)

// statusValue is hardway_check_status: 0 pass, 1 warn, 2 fail, so that
// alerts read "> 1" for failures and "> 0" for anything not passing.
func statusValue(s verify.Status) float64 {
	return float64(rank(s))
}

// snapshot is what the last finished run found. It is replaced whole, so
// that a scrape never sees half of one run and half of the next.
type snapshot struct {
	entries  []Entry
	certs    []Certificate
	etcd     []EtcdMember
	backup   *backupState // nil: no scheduled backups
	duration time.Duration
	finished time.Time
}

// metrics is the daemon's own registry: no prometheus globals, so two
// daemons in one test process do not collide.
type metrics struct {
	reg *prometheus.Registry
	now func() time.Time

	mu   sync.RWMutex
	last *snapshot

	runs    prometheus.Counter
	skipped prometheus.Counter
	repairs *prometheus.CounterVec
	reloads *prometheus.CounterVec
	backups *prometheus.CounterVec

	backupLastOK, backupLastSize, backupLastDuration, backupLastAttempt, backupLastResult *prometheus.Desc

	checkStatus, checkCount, certExpiry, etcdHealthy, etcdLeader, etcdDB, duration, lastRun *prometheus.Desc
}

func newMetrics(now func() time.Time) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), now: now}
	m.runs = prometheus.NewCounter(prometheus.CounterOpts{Name: "hardway_runs_total", Help: "Verify runs finished."})
	m.skipped = prometheus.NewCounter(prometheus.CounterOpts{Name: "hardway_runs_skipped_total", Help: "Intervals skipped because the previous run was still going."})
	m.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hardway_repairs_total", Help: "Repairs attempted with --repair, by host and result (ok, failed)."}, []string{"host", "result"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hardway_reloads_total", Help: "Inventory reloads on SIGHUP, by result (ok, refused)."}, []string{"result"})
	m.checkStatus = prometheus.NewDesc("hardway_check_status", "Last status of a verify check on a host: 0 pass, 1 warn, 2 fail. host is empty for cluster-wide checks.", []string{"check", "host"}, nil)
	m.checkCount = prometheus.NewDesc("hardway_check_results", "Check results of the last run by status.", []string{"status"}, nil)
	m.certExpiry = prometheus.NewDesc("hardway_certificate_expiry_seconds", "Seconds until the certificate expires (negative: expired).", []string{"name", "kind"}, nil)
	m.etcdHealthy = prometheus.NewDesc("hardway_etcd_member_healthy", "1 when the member served a linearizable read in the last run (etcd/health).", []string{"member"}, nil)
	m.etcdLeader = prometheus.NewDesc("hardway_etcd_member_leader", "1 for the member that most members name as leader.", []string{"member"}, nil)
	m.etcdDB = prometheus.NewDesc("hardway_etcd_member_db_size_bytes", "Size of the member's database.", []string{"member"}, nil)
	m.duration = prometheus.NewDesc("hardway_run_duration_seconds", "Duration of the last verify run (repairs not included).", nil, nil)
	m.lastRun = prometheus.NewDesc("hardway_last_run_timestamp_seconds", "When the last verify run finished (Unix time).", nil, nil)
	m.backups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hardway_backups_total", Help: "Scheduled backups attempted, by result (ok, failed)."}, []string{"result"})
	m.backupLastOK = prometheus.NewDesc("hardway_backup_last_success_timestamp_seconds", "When the newest successful backup was finished (Unix time); absent before the first.", nil, nil)
	m.backupLastSize = prometheus.NewDesc("hardway_backup_last_size_bytes", "Size of the newest successful backup file.", nil, nil)
	m.backupLastDuration = prometheus.NewDesc("hardway_backup_last_duration_seconds", "How long the newest successful backup took.", nil, nil)
	m.backupLastAttempt = prometheus.NewDesc("hardway_backup_last_attempt_timestamp_seconds", "When the daemon last tried a backup (Unix time).", nil, nil)
	m.backupLastResult = prometheus.NewDesc("hardway_backup_last_result", "1 when the last backup attempt succeeded, 0 when it failed.", nil, nil)
	m.reg.MustRegister(m, m.runs, m.skipped, m.repairs, m.reloads, m.backups,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) set(s *snapshot) {
	m.mu.Lock()
	m.last = s
	m.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.checkStatus, m.checkCount, m.certExpiry, m.etcdHealthy, m.etcdLeader, m.etcdDB, m.duration, m.lastRun,
		m.backupLastOK, m.backupLastSize, m.backupLastDuration, m.backupLastAttempt, m.backupLastResult} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from the last snapshot; nothing
// before the first run, so a scrape never reports a check it has not seen.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.RLock()
	s := m.last
	m.mu.RUnlock()
	if s == nil {
		return
	}
	counts := map[verify.Status]int{verify.Pass: 0, verify.Warn: 0, verify.Fail: 0}
	for _, e := range s.entries {
		counts[e.Status]++
		ch <- prometheus.MustNewConstMetric(m.checkStatus, prometheus.GaugeValue, statusValue(e.Status), e.Check, e.Host)
		if e.Check == "etcd/health" && e.Host != "" {
			ch <- prometheus.MustNewConstMetric(m.etcdHealthy, prometheus.GaugeValue, b2f(e.Status == verify.Pass), e.Host)
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(m.checkCount, prometheus.GaugeValue, float64(n), string(st))
	}
	now := m.now()
	for _, c := range s.certs {
		ch <- prometheus.MustNewConstMetric(m.certExpiry, prometheus.GaugeValue, c.NotAfter.Sub(now).Seconds(), c.Name, c.Kind)
	}
	for _, e := range s.etcd {
		ch <- prometheus.MustNewConstMetric(m.etcdLeader, prometheus.GaugeValue, b2f(e.Leader), e.Name)
		if e.Reachable {
			ch <- prometheus.MustNewConstMetric(m.etcdDB, prometheus.GaugeValue, float64(e.DBSize), e.Name)
		}
	}
	if b := s.backup; b != nil {
		if !b.last.Time.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.backupLastOK, prometheus.GaugeValue, float64(b.last.Time.UnixNano())/1e9)
			ch <- prometheus.MustNewConstMetric(m.backupLastSize, prometheus.GaugeValue, float64(b.last.Size))
			ch <- prometheus.MustNewConstMetric(m.backupLastDuration, prometheus.GaugeValue, b.last.Duration.Seconds())
		}
		if !b.attempt.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.backupLastAttempt, prometheus.GaugeValue, float64(b.attempt.UnixNano())/1e9)
			ch <- prometheus.MustNewConstMetric(m.backupLastResult, prometheus.GaugeValue, b2f(b.lastErr == nil))
		}
	}
	ch <- prometheus.MustNewConstMetric(m.duration, prometheus.GaugeValue, s.duration.Seconds())
	ch <- prometheus.MustNewConstMetric(m.lastRun, prometheus.GaugeValue, float64(s.finished.UnixNano())/1e9)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
