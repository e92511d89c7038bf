// Package daemon runs `hardway daemon` for real: three lab hosts with the
// control plane built by `hardway up`, and the hardway binary installed on
// controller-1 as the Type=notify unit that `hardway daemon unit` prints,
// sandbox and all. It needs root and the release mirror (make mirror).
package daemon

import (
	"bytes"
	"context"
	"fmt"
	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hardway/hardway/internal/cli"
	"github.com/hardway/hardway/pkg/lab"
)

const (
	home     = "/var/lib/hardway-daemon" // on controller-1
	interval = 10 * time.Second
	unitName = "hardway-daemon.service"
)

type env struct {
	t        *testing.T
	dir      string
	inv      string
	cacheDir string
	res      *lab.Result
}

func setup(t *testing.T) *env {
	t.Helper()
	labtest.RequireRoot(t)
	mirror := mirrortest.Dir()
	if _, err := os.Stat(filepath.Join(mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kube-apiserver")); err != nil {
		t.Fatalf("the release mirror is missing: run 'make mirror' (%v)", err)
	}
	dir := t.TempDir()
	_, res := labtest.Start(t, lab.Config{Dir: filepath.Join(dir, "lab"), Prefix: "hwm", Net: "10.240.8", Mirror: mirror})
	return &env{t: t, dir: dir, inv: res.Inventory, cacheDir: filepath.Join(dir, "cache"), res: res}
}

// up builds the control plane. It is not what this suite tests, and a
// loaded machine drops an SSH connection now and then: a failed up is run
// once more (it is idempotent) before the test gives up.
func (e *env) up() {
	e.t.Helper()
	args := []string{"up", "-i", e.inv, "--cache-dir", e.cacheDir}
	for try := 1; ; try++ {
		var out, errb bytes.Buffer
		start := time.Now()
		code := cli.Main(e.t.Context(), args, &out, &errb)
		if code == 0 {
			e.t.Logf("hardway up: %s", time.Since(start).Round(time.Second))
			return
		}
		if try == 2 {
			e.t.Fatalf("hardway up: exit %d\n%s\n%s", code, out.String(), errb.String())
		}
		e.t.Logf("hardway up failed, once more: %s", strings.TrimSpace(errb.String()))
	}
}

// ssh runs cmd on a lab host, bounded so a hung command fails the test.
func (e *env) ssh(host, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(e.t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-F", e.res.SSHConfig, host, cmd).CombinedOutput()
	return string(out), err
}

func (e *env) mustSSH(host, cmd string) string {
	e.t.Helper()
	out, err := e.ssh(host, cmd)
	if err != nil {
		e.t.Fatalf("%s: %s: %v\n%s", host, cmd, err, out)
	}
	return out
}

// install builds hardway and copies it, the lab's inventory, key, lock,
// state directory and release cache to controller-1 in one tar stream.
func (e *env) install() {
	e.t.Helper()
	stage := filepath.Join(e.dir, "stage")
	bin := filepath.Join(stage, "hardway")
	// Built like every other test binary, so the build cache serves it; the
	// lab hosts run the same Debian as this machine.
	build := exec.Command("go", "build", "-o", bin, "github.com/hardway/hardway/cmd/hardway")
	if out, err := build.CombinedOutput(); err != nil {
		e.t.Fatalf("go build: %v\n%s", err, out)
	}
	labDir := filepath.Dir(e.inv)
	for _, p := range []string{"lab", "cache"} {
		if err := os.Symlink(map[string]string{"lab": labDir, "cache": e.cacheDir}[p], filepath.Join(stage, p)); err != nil {
			e.t.Fatal(err)
		}
	}
	tar := exec.Command("tar", "-C", stage, "-chf", "-", "hardway", "lab", "cache")
	ssh := exec.Command("ssh", "-F", e.res.SSHConfig, "controller-1", "mkdir -p "+home+" && tar -C "+home+" -xf -")
	var err error
	if ssh.Stdin, err = tar.StdoutPipe(); err != nil {
		e.t.Fatal(err)
	}
	var sshOut bytes.Buffer
	ssh.Stdout, ssh.Stderr = &sshOut, &sshOut
	start := time.Now()
	if err := tar.Start(); err != nil {
		e.t.Fatal(err)
	}
	if err := ssh.Run(); err != nil {
		e.t.Fatalf("copy to controller-1: %v\n%s", err, sshOut.String())
	}
	if err := tar.Wait(); err != nil {
		e.t.Fatalf("tar: %v", err)
	}
	e.t.Logf("installed hardway, state and cache on controller-1 in %s", time.Since(start).Round(100*time.Millisecond))
}

// unit writes the unit `hardway daemon unit` prints on controller-1 and
// (re)starts it; systemctl start returns once the daemon sent READY=1.
func (e *env) startUnit(extra string) {
	e.t.Helper()
	e.mustSSH("controller-1", fmt.Sprintf("%s/hardway daemon unit -i %s/lab/inventory.yaml --cache-dir %s/cache --interval %s --watchdog 30s %s > /etc/systemd/system/%s",
		home, home, home, interval, extra, unitName))
	out, err := e.ssh("controller-1", "systemd-analyze verify /etc/systemd/system/"+unitName)
	if err != nil || strings.TrimSpace(out) != "" {
		e.t.Fatalf("systemd-analyze verify on controller-1: %v\n%s", err, out)
	}
	start := time.Now()
	if out, err := e.ssh("controller-1", "systemctl daemon-reload && timeout 150 systemctl restart "+unitName); err != nil {
		j, _ := e.ssh("controller-1", "journalctl -u "+unitName+" -n 50 --no-pager")
		e.t.Fatalf("start %s: %v\n%s\n%s", unitName, err, out, j)
	}
	e.t.Logf("%s active (READY=1) %s after start", unitName, time.Since(start).Round(100*time.Millisecond))
}

func (e *env) show(props ...string) map[string]string {
	e.t.Helper()
	out := e.mustSSH("controller-1", "systemctl show "+unitName+" -p "+strings.Join(props, ","))
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	out := e.mustSSH("controller-1", "curl -sf --max-time 5 http://127.0.0.1:9479/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// statuses is hardway_check_status as "check host" → value.
func statuses(mfs map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if mf := mfs["hardway_check_status"]; mf != nil {
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			out[strings.TrimSpace(l["check"]+" "+l["host"])] = m.Gauge.GetValue()
		}
	}
	return out
}

// gauge is the value of the sample of family with label=value, or of its
// only unlabelled sample when label is "".
func gauge(mfs map[string]*dto.MetricFamily, family, label, value string) (float64, bool) {
	for _, m := range mfs[family].GetMetric() {
		match := label == "" && len(m.Label) == 0
		for _, p := range m.Label {
			match = match || (p.GetName() == label && p.GetValue() == value)
		}
		if !match {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

func notPassing(st map[string]float64) []string {
	var out []string
	for k, v := range st {
		if v != 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) journal(since string) string {
	e.t.Helper()
	return e.mustSSH("controller-1", "journalctl -u "+unitName+" -o cat --no-pager --since '"+since+"'")
}

func (e *env) waitFor(what string, within time.Duration, cond func() bool) time.Duration {
	e.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			j, _ := e.ssh("controller-1", "journalctl -u "+unitName+" -n 40 -o cat --no-pager")
			e.t.Fatalf("no %s within %s; daemon journal:\n%s", what, within, j)
		}
		time.Sleep(time.Second)
	}
	return time.Since(start)
}

func TestDaemonOnALabHost(t *testing.T) {
	e := setup(t)
	e.up()
	e.install()

	t.Run("the unit reaches active and every check passes", func(t *testing.T) {
		e.t = t
		e.startUnit("")
		p := e.show("ActiveState", "SubState", "StatusText", "Type", "WatchdogUSec")
		if p["ActiveState"] != "active" || p["Type"] != "notify" || !regexp.MustCompile(`^\d+ pass, 0 warn, 0 fail in `).MatchString(p["StatusText"]) {
			j, _ := e.ssh("controller-1", "journalctl -u "+unitName+" -n 40 -o cat --no-pager")
			t.Fatalf("unit: %v\ndaemon journal:\n%s", p, j)
		}
		t.Logf("STATUS=%s, WatchdogUSec=%s", p["StatusText"], p["WatchdogUSec"])
		sec, _ := e.ssh("controller-1", "systemd-analyze security "+unitName+" | tail -1")
		t.Logf("systemd-analyze security on controller-1: %s", strings.TrimSpace(sec))
		mfs := e.scrape()
		st := statuses(mfs)
		if len(st) < 20 {
			t.Fatalf("only %d check gauges: %v", len(st), st)
		}
		if bad := notPassing(st); len(bad) > 0 {
			t.Fatalf("not passing: %v", bad)
		}
		leaders := 0
		for _, h := range e.res.Hosts {
			if v, ok := gauge(mfs, "hardway_etcd_member_healthy", "member", h.Name); !ok || v != 1 {
				t.Errorf("hardway_etcd_member_healthy{%s} = %v %v", h.Name, v, ok)
			}
			v, _ := gauge(mfs, "hardway_etcd_member_leader", "member", h.Name)
			leaders += int(v)
		}
		if leaders != 1 {
			t.Errorf("%d etcd leaders in the metrics", leaders)
		}
		if v, ok := gauge(mfs, "hardway_certificate_expiry_seconds", "name", "ca"); !ok || v < 300*24*3600 {
			t.Errorf("ca expiry %v %v", v, ok)
		}
		d, _ := gauge(mfs, "hardway_run_duration_seconds", "", "")
		rss, _ := gauge(mfs, "process_resident_memory_bytes", "", "")
		t.Logf("figures: run %.2fs, daemon RSS %.1f MiB", d, rss/(1<<20))
	})

	e.backupScenarios(t)

	t.Run("a stopped etcd member flips its gauge and logs one transition within one interval", func(t *testing.T) {
		e.t = t
		since := strings.TrimSpace(e.mustSSH("controller-1", "date '+%Y-%m-%d %H:%M:%S'"))
		e.mustSSH("controller-2", "systemctl stop etcd")
		d, _ := gauge(e.scrape(), "hardway_run_duration_seconds", "", "")
		bound := interval + 2*time.Duration(d*float64(time.Second)) + 5*time.Second
		took := e.waitFor("etcd/health controller-2 failing in /metrics", bound, func() bool {
			return statuses(e.scrape())["etcd/health controller-2"] == 2
		})
		t.Logf("etcd/health controller-2 failed in /metrics %s after the stop (interval %s, run %.1fs)", took.Round(100*time.Millisecond), interval, d)
		// Let one more run pass: nothing more may be logged.
		runs := func() float64 { v, _ := gauge(e.scrape(), "hardway_runs_total", "", ""); return v }
		r0 := runs()
		e.waitFor("one more run", 2*interval+30*time.Second, func() bool { return runs() > r0 })
		mfs := e.scrape()
		bad := notPassing(statuses(mfs))
		for _, k := range bad {
			if !strings.HasSuffix(k, " controller-2") {
				t.Errorf("%s fails too: only controller-2's checks may", k)
			}
		}
		if v, _ := gauge(mfs, "hardway_etcd_member_healthy", "member", "controller-2"); v != 0 {
			t.Errorf("hardway_etcd_member_healthy{controller-2} = %v", v)
		}
		j := e.journal(since)
		var trans []string
		for _, l := range strings.Split(j, "\n") {
			if strings.Contains(l, " -> ") {
				trans = append(trans, l)
			}
		}
		t.Logf("failing: %v\ntransitions:\n  %s", bad, strings.Join(trans, "\n  "))
		if len(trans) != len(bad) {
			t.Errorf("%d transitions logged for %d failing gauges: one line each, once", len(trans), len(bad))
		}
		if n := strings.Count(j, "etcd/health controller-2: pass -> fail: "); n != 1 {
			t.Errorf("etcd/health controller-2 logged %d times:\n%s", n, j)
		}
		if !strings.Contains(j, "(hint: see 'journalctl -u etcd' on controller-2") {
			t.Errorf("the transition lacks its hint:\n%s", j)
		}

		e.mustSSH("controller-2", "systemctl start etcd")
		e.waitFor("every check passing again", 2*interval+30*time.Second, func() bool { return len(notPassing(statuses(e.scrape()))) == 0 })
		if j := e.journal(since); !strings.Contains(j, "etcd/health controller-2: fail -> pass") {
			t.Errorf("no recovery line:\n%s", j)
		}
	})

	t.Run("--repair restores a hand-edited unit file", func(t *testing.T) {
		e.t = t
		e.startUnit("--repair")
		since := strings.TrimSpace(e.mustSSH("controller-1", "date '+%Y-%m-%d %H:%M:%S'"))
		const f = "/etc/systemd/system/kube-scheduler.service"
		sum := func() string { return strings.Fields(e.mustSSH("controller-3", "sha256sum "+f))[0] }
		want := sum()
		e.mustSSH("controller-3", "sed -i 's/^Restart=.*/Restart=no/' "+f+" && systemctl daemon-reload")
		if sum() == want {
			t.Fatal("the edit changed nothing")
		}
		took := e.waitFor("the file restored", 3*interval+2*time.Minute, func() bool { return sum() == want })
		t.Logf("restored %s after %s", f, took.Round(time.Second))
		e.waitFor("hardway_repairs_total{controller-3,ok}", 30*time.Second, func() bool {
			mfs := e.scrape()
			for _, m := range mfs["hardway_repairs_total"].GetMetric() {
				l := map[string]string{}
				for _, p := range m.Label {
					l[p.GetName()] = p.GetValue()
				}
				if l["host"] == "controller-3" && l["result"] == "ok" && m.Counter.GetValue() >= 1 {
					return true
				}
			}
			return false
		})
		e.waitFor("every check passing again", 2*interval+time.Minute, func() bool { return len(notPassing(statuses(e.scrape()))) == 0 })
		j := e.journal(since)
		for _, w := range []string{"host/files controller-3: pass -> fail: drifted: " + f, "repair controller-3: host/files: drifted", "repair controller-3: [push] controller-3: write " + f, "repair controller-3: done"} {
			if !strings.Contains(j, w) {
				t.Errorf("journal lacks %q:\n%s", w, j)
			}
		}
		if strings.Contains(j, "repair controller-1") || strings.Contains(j, "repair controller-2") {
			t.Errorf("healthy hosts were repaired:\n%s", j)
		}
		if out := e.mustSSH("controller-3", "systemctl show -p Restart --value kube-scheduler"); strings.TrimSpace(out) == "no" {
			t.Errorf("systemd still has the hand-edited unit loaded")
		}
	})

	t.Run("SIGTERM stops it cleanly", func(t *testing.T) {
		e.t = t
		pid := e.show("MainPID")["MainPID"]
		hwm := strings.TrimSpace(e.mustSSH("controller-1", "grep VmHWM /proc/"+pid+"/status"))
		start := time.Now()
		e.mustSSH("controller-1", "systemctl stop "+unitName)
		p := e.show("ActiveState", "Result")
		if p["ActiveState"] != "inactive" || p["Result"] != "success" {
			t.Errorf("stopped with %v", p)
		}
		t.Logf("stopped in %s; daemon peak memory %s", time.Since(start).Round(100*time.Millisecond), hwm)
	})
}
