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

func TestQueries(t *testing.T) {
	ctx := context.Background()
	h := remotetest.New(t, "controller-1")
	show := remote.ShowCommand("etcd.service")
	h.Expect(show).Returns("ActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\nActiveEnterTimestamp=Sun 2026-11-29 21:05:01 UTC\n")
	h.Expect(show).Returns("ActiveState=inactive\nUnitFileState=disabled\nNeedDaemonReload=yes\nActiveEnterTimestamp=\n")
	h.Expect(remote.ShowCommand("nope.service")).Fails(1, "Failed to connect to bus")
	ts := "systemctl show --timestamp=us+utc --property=ActiveEnterTimestamp --value -- etcd.service"
	h.Expect(ts).Returns("Sun 2026-11-29 21:05:01.123456 UTC\n")
	h.Expect(ts).Returns("\n")

	for _, want := range []remote.UnitState{
		{Active: true, State: "active", Enabled: true, ActiveEnter: "Sun 2026-11-29 21:05:01 UTC"},
		{State: "inactive", NeedReload: true},
	} {
		if st, err := remote.QueryUnit(ctx, h, "etcd.service"); st != want || err != nil {
			t.Errorf("QueryUnit = %+v, %v; want %+v", st, err, want)
		}
	}
	var ee *remote.ExitError
	if _, err := remote.QueryUnit(ctx, h, "nope.service"); !errors.As(err, &ee) || ee.Code != 1 {
		t.Errorf("QueryUnit without an answer: err = %v, want the ExitError", err)
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
	isActive := remote.ShowCommand("etcd.service")
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
				h.Expect(isActive).Returns("ActiveState=activating\n").Times(2)
				h.Expect(isActive).Returns("ActiveState=active\n")
			},
			timeout: time.Minute,
		},
		{
			name: "failed: no waiting, journal attached",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("ActiveState=failed\n")
				h.Expect(journalctl).Returns(journal)
			},
			timeout: time.Hour,
			want:    "failed",
		},
		{
			name: "timeout",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("ActiveState=activating\n").AnyTimes()
				h.Expect(journalctl).Returns(journal)
			},
			timeout: 300 * time.Millisecond,
			want:    "activating after 300ms",
		},
		{
			name: "journalctl fails too",
			setup: func(h *remotetest.Fake) {
				h.Expect(isActive).Returns("ActiveState=failed\n")
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

// TestParseShowUnits reads one systemctl show of several units: a block
// per unit, split by an empty line, each named by its Id wherever systemd
// lists it in the block.
func TestParseShowUnits(t *testing.T) {
	cmd := remote.ShowUnitsCommand("etcd.service", "kube-apiserver.service", "nope.service")
	if want := "systemctl show -p Id -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp -- etcd.service kube-apiserver.service nope.service"; cmd != want {
		t.Errorf("command = %q", cmd)
	}
	out := "Id=etcd.service\nActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\nActiveEnterTimestamp=Sun 2026-11-29 21:05:01 UTC\n" +
		"\n" +
		"ActiveState=failed\nNeedDaemonReload=yes\nId=kube-apiserver.service\nUnitFileState=disabled\nActiveEnterTimestamp=\n" +
		"\n" +
		"Id=nope.service\nActiveState=inactive\nNeedDaemonReload=no\nActiveEnterTimestamp=\n"
	got := remote.ParseShowUnits(out)
	want := map[string]remote.UnitState{
		"etcd.service":           {Active: true, State: "active", Enabled: true, ActiveEnter: "Sun 2026-11-29 21:05:01 UTC"},
		"kube-apiserver.service": {State: "failed", NeedReload: true},
		"nope.service":           {State: "inactive"},
	}
	if len(got) != len(want) {
		t.Errorf("got %d units, want %d: %+v", len(got), len(want), got)
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s = %+v, want %+v", u, got[u], w)
		}
	}
}
