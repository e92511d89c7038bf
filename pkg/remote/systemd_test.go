package remote_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/usererr"
)

func TestPlanRestarts(t *testing.T) {
	services := []remote.Service{
		{Unit: "etcd.service", Files: []string{"/etc/systemd/system/etcd.service", "/etc/etcd/etcd.pem", "/usr/local/bin/etcd"}},
		{Unit: "kube-apiserver.service", Files: []string{"/etc/systemd/system/kube-apiserver.service", "/var/lib/kubernetes/ca.pem", "/etc/etcd/etcd.pem"}},
		{Unit: "kube-scheduler.service", Files: []string{"/etc/systemd/system/kube-scheduler.service", "/etc/kubernetes/config/kube-scheduler.yaml"}},
	}
	tests := []struct {
		name        string
		changed     []string
		wantReload  bool
		wantRestart []string
	}{
		{name: "nothing changed"},
		{name: "a certificate", changed: []string{"/var/lib/kubernetes/ca.pem"}, wantRestart: []string{"kube-apiserver.service"}},
		{name: "shared file restarts both", changed: []string{"/etc/etcd/etcd.pem"}, wantRestart: []string{"etcd.service", "kube-apiserver.service"}},
		{name: "unit file reloads and restarts", changed: []string{"/etc/systemd/system/kube-scheduler.service"}, wantReload: true, wantRestart: []string{"kube-scheduler.service"}},
		{name: "drop-in reloads", changed: []string{"/etc/systemd/system/etcd.service.d/override.conf"}, wantReload: true},
		{name: "unrelated file", changed: []string{"/etc/hosts"}},
		{name: "binary", changed: []string{"/usr/local/bin/etcd"}, wantRestart: []string{"etcd.service"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reload, restart := remote.PlanRestarts(tt.changed, services)
			if reload != tt.wantReload || !slices.Equal(restart, tt.wantRestart) {
				t.Errorf("PlanRestarts = %v, %q; want %v, %q", reload, restart, tt.wantReload, tt.wantRestart)
			}
		})
	}
}

func TestQueries(t *testing.T) {
	ctx := context.Background()
	h := remotetest.New(t, "controller-1")
	h.Expect("systemctl is-active -- etcd.service").Returns("active\n")
	h.Expect("systemctl is-active -- etcd.service").Returns("inactive\n").Fails(3, "")
	h.Expect("systemctl is-enabled -- etcd.service").Returns("disabled\n").Fails(1, "")
	h.Expect("systemctl is-active -- nope.service").Fails(4, "Failed to connect to bus")
	ts := "systemctl show --timestamp=us+utc --property=ActiveEnterTimestamp --value -- etcd.service"
	h.Expect(ts).Returns("Sun 2026-11-29 21:05:01.123456 UTC\n")
	h.Expect(ts).Returns("\n")

	for _, want := range []string{"active", "inactive"} {
		if s, err := remote.IsActive(ctx, h, "etcd.service"); s != want || err != nil {
			t.Errorf("IsActive = %q, %v; want %q", s, err, want)
		}
	}
	if s, err := remote.IsEnabled(ctx, h, "etcd.service"); s != "disabled" || err != nil {
		t.Errorf("IsEnabled = %q, %v", s, err)
	}
	var ee *remote.ExitError
	if _, err := remote.IsActive(ctx, h, "nope.service"); !errors.As(err, &ee) || ee.Code != 4 {
		t.Errorf("IsActive without an answer: err = %v, want the ExitError", err)
	}
	got, err := remote.ActiveEnterTimestamp(ctx, h, "etcd.service")
	if want := time.Date(2026, 11, 29, 21, 5, 1, 123456000, time.UTC); err != nil || !got.Equal(want) {
		t.Errorf("ActiveEnterTimestamp = %v, %v; want %v", got, err, want)
	}
	if got, err := remote.ActiveEnterTimestamp(ctx, h, "etcd.service"); err != nil || !got.IsZero() {
		t.Errorf("never active: %v, %v", got, err)
	}
}

func TestWaitActive(t *testing.T) {
	journal := func() string {
		var b strings.Builder
		for i := 1; i <= 30; i++ {
			fmt.Fprintf(&b, "2026-11-29T21:05:%02d+0000 controller-1 etcd[42]: line %d\n", i, i)
		}
		return b.String()
	}()
	const isActive = "systemctl is-active -- etcd.service"
	const journalctl = "journalctl -u etcd.service -n 30 --no-pager -o short-iso"
	tests := []struct {
		name    string
		setup   func(h *remotetest.Fake)
		timeout time.Duration
		want    string // "" ok, else the state in the UnitError
	}{
		{
			name: "active after activating",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("activating\n").Fails(3, "").Times(2)
				h.Expect(isActive).Returns("active\n")
			},
			timeout: time.Minute,
		},
		{
			name: "failed: no waiting, journal attached",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("failed\n").Fails(3, "")
				h.Expect(journalctl).Returns(journal)
			},
			timeout: time.Hour,
			want:    "failed",
		},
		{
			name: "timeout",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("activating\n").Fails(3, "").AnyTimes()
				h.Expect(journalctl).Returns(journal)
			},
			timeout: 300 * time.Millisecond,
			want:    "activating after 300ms",
		},
		{
			name: "journalctl fails too",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("failed\n").Fails(3, "")
				h.Expect(journalctl).Fails(1, "No journal files were found.")
			},
			timeout: time.Second,
			want:    "failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := remotetest.New(t, "controller-1")
			tt.setup(h)
			err := remote.WaitActive(context.Background(), h, "etcd.service", tt.timeout)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ue *remote.UnitError
			if !errors.As(err, &ue) || ue.State != tt.want || ue.Host != "controller-1" {
				t.Fatalf("err = %v, want a UnitError in state %q", err, tt.want)
			}
			if usererr.HintOf(err) == "" {
				t.Error("no hint")
			}
			if strings.Contains(tt.name, "journalctl fails") {
				if !strings.Contains(err.Error(), "No journal files") {
					t.Errorf("journalctl's failure not reported: %v", err)
				}
				return
			}
			if ue.Journal != journal || !strings.Contains(err.Error(), "line 1\n") || !strings.Contains(err.Error(), "line 30") {
				t.Errorf("journal not carried in full: %v", err)
			}
		})
	}
}

func TestApplyServices(t *testing.T) {
	services := []remote.Service{
		{Unit: "etcd.service", Files: []string{"/etc/systemd/system/etcd.service", "/etc/etcd/etcd.pem"}},
		{Unit: "kube-apiserver.service", Files: []string{"/etc/systemd/system/kube-apiserver.service", "/var/lib/kubernetes/ca.pem"}},
	}
	tests := []struct {
		name    string
		changed []string
		want    []string
	}{
		{
			name: "converged: only start (a no-op) and check",
			want: []string{
				"systemctl enable -- etcd.service kube-apiserver.service",
				"systemctl start -- etcd.service",
				"systemctl start -- kube-apiserver.service",
				"systemctl is-active -- etcd.service",
				"systemctl is-active -- kube-apiserver.service",
			},
		},
		{
			name:    "unit changed",
			changed: []string{"/etc/systemd/system/etcd.service"},
			want: []string{
				"systemctl daemon-reload",
				"systemctl enable -- etcd.service kube-apiserver.service",
				"systemctl restart -- etcd.service",
				"systemctl start -- kube-apiserver.service",
				"systemctl is-active -- etcd.service",
				"systemctl is-active -- kube-apiserver.service",
			},
		},
		{
			name:    "certificate changed: restart without reload",
			changed: []string{"/var/lib/kubernetes/ca.pem"},
			want: []string{
				"systemctl enable -- etcd.service kube-apiserver.service",
				"systemctl start -- etcd.service",
				"systemctl restart -- kube-apiserver.service",
				"systemctl is-active -- etcd.service",
				"systemctl is-active -- kube-apiserver.service",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := remotetest.New(t, "controller-1")
			for _, c := range tt.want {
				e := h.Expect(c)
				if strings.Contains(c, "is-active") {
					e.Returns("active\n")
				}
			}
			if err := remote.ApplyServices(context.Background(), h, tt.changed, services, time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := h.Commands(); !slices.Equal(got, tt.want) {
				t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// The fake must fail a test on a command nobody expected.
func TestFakeRejectsUnexpected(t *testing.T) {
	ft := &fakeT{TB: t}
	h := remotetest.New(ft, "controller-1")
	if _, err := h.Run(context.Background(), "rm -rf /", nil); err == nil {
		t.Error("unexpected command succeeded")
	}
	if !ft.failed {
		t.Error("unexpected command did not fail the test")
	}
	h.Expect("never run")
	ft.failed = false
	ft.runCleanups()
	if !ft.failed {
		t.Error("an expected command that never ran did not fail the test")
	}
}

type fakeT struct {
	testing.TB
	failed   bool
	cleanups []func()
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) runCleanups() {
	for _, fn := range slices.Backward(f.cleanups) {
		fn()
	}
}
