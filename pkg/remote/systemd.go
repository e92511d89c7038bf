package remote

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// journalLines is how much of a failed unit's journal an error carries.
const journalLines = 30

func systemctl(ctx context.Context, h Host, args ...string) ([]byte, error) {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return h.Run(ctx, "systemctl "+strings.Join(q, " "), nil)
}

// DaemonReload makes systemd read changed unit files.
func DaemonReload(ctx context.Context, h Host) error {
	_, err := systemctl(ctx, h, "daemon-reload")
	return err
}

// Enable enables units to start at boot (a no-op for enabled ones).
func Enable(ctx context.Context, h Host, units ...string) error {
	_, err := systemctl(ctx, h, append([]string{"enable", "--"}, units...)...)
	return err
}

// Start starts units; running ones are left alone (not restarted).
func Start(ctx context.Context, h Host, units ...string) error {
	_, err := systemctl(ctx, h, append([]string{"start", "--"}, units...)...)
	return err
}

// Restart restarts units, starting stopped ones.
func Restart(ctx context.Context, h Host, units ...string) error {
	_, err := systemctl(ctx, h, append([]string{"restart", "--"}, units...)...)
	return err
}

// state runs an is-* query; those exit non-zero for every answer but the
// positive one, with the answer still on stdout.
func state(ctx context.Context, h Host, query, unit string) (string, error) {
	out, err := systemctl(ctx, h, query, "--", unit)
	s := strings.TrimSpace(string(out))
	var ee *ExitError
	if err != nil && !(errors.As(err, &ee) && s != "") {
		return "", err
	}
	return s, nil
}

// IsActive returns the unit's active state: "active", "inactive",
// "activating", "failed", ...
func IsActive(ctx context.Context, h Host, unit string) (string, error) {
	return state(ctx, h, "is-active", unit)
}

// IsEnabled returns the unit's enablement: "enabled", "disabled", "static", ...
func IsEnabled(ctx context.Context, h Host, unit string) (string, error) {
	return state(ctx, h, "is-enabled", unit)
}

// ActiveEnterTimestamp is when the unit last became active, to the
// microsecond; zero if it never did. Equal values before and after a run
// prove the run did not restart it.
func ActiveEnterTimestamp(ctx context.Context, h Host, unit string) (time.Time, error) {
	out, err := systemctl(ctx, h, "show", "--timestamp=us+utc", "--property=ActiveEnterTimestamp", "--value", "--", unit)
	if err != nil {
		return time.Time{}, err
	}
	s := strings.TrimSpace(string(out))
	if s == "" || s == "n/a" {
		return time.Time{}, nil
	}
	t, err := time.Parse("Mon 2006-01-02 15:04:05.000000 UTC", s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %s ActiveEnterTimestamp: %w", h.Name(), unit, err)
	}
	return t, nil
}

// Journal returns the last n lines of the unit's journal.
func Journal(ctx context.Context, h Host, unit string, n int) (string, error) {
	out, err := h.Run(ctx, fmt.Sprintf("journalctl -u %s -n %d --no-pager -o short-iso", Quote(unit), n), nil)
	return string(out), err
}

// UnitError is a unit that did not become active, with its journal.
type UnitError struct {
	Host    string
	Unit    string
	State   string
	Journal string // the last lines of `journalctl -u Unit`
}

func (e *UnitError) Error() string {
	msg := fmt.Sprintf("%s: %s is %s, not active", e.Host, e.Unit, e.State)
	if j := strings.TrimRight(e.Journal, "\n"); j != "" {
		msg += "; its journal ends with:\n" + indent(j, "    ")
	}
	return msg
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// WaitActive waits until unit is active. It gives up when the unit fails or
// timeout passes, returning a *UnitError (inside a *usererr.Error) with the
// last 30 lines of the unit's journal from that host.
func WaitActive(ctx context.Context, h Host, unit string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	poll := 100 * time.Millisecond
	for {
		s, err := IsActive(ctx, h, unit)
		if err != nil {
			return err
		}
		if s == "active" {
			return nil
		}
		if s == "failed" || !time.Now().Before(deadline) {
			if s != "failed" {
				s += fmt.Sprintf(" after %v", timeout)
			}
			return unitFailed(ctx, h, unit, s)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(poll, time.Until(deadline))):
		}
		poll = min(2*poll, time.Second)
	}
}

func unitFailed(ctx context.Context, h Host, unit, state string) error {
	j, err := Journal(ctx, h, unit, journalLines)
	if err != nil {
		j = fmt.Sprintf("(journalctl failed: %v)", err)
	}
	return usererr.New(&UnitError{Host: h.Name(), Unit: unit, State: state, Journal: j},
		fmt.Sprintf("the journal above says why; for more, on %s run: journalctl -u %s", h.Name(), unit))
}

// Service is a systemd service with the files it reads: its unit file
// (and drop-ins), configs, certificates, binaries.
type Service struct {
	Unit  string   // "etcd.service"
	Files []string // paths on the host
}

// PlanRestarts decides, from the files a push changed, whether systemd must
// re-read its units (only if a unit file changed) and which services must
// restart (those that read a changed file), in the order of services.
func PlanRestarts(changed []string, services []Service) (daemonReload bool, restart []string) {
	for _, p := range changed {
		if isUnitFile(p) {
			daemonReload = true
		}
	}
	for _, s := range services {
		for _, f := range s.Files {
			if slices.Contains(changed, f) {
				restart = append(restart, s.Unit)
				break
			}
		}
	}
	return daemonReload, restart
}

// isUnitFile reports whether systemd reads p as a unit or a unit drop-in.
func isUnitFile(p string) bool {
	for _, dir := range []string{"/etc/systemd/system/", "/run/systemd/system/", "/lib/systemd/system/", "/usr/lib/systemd/system/"} {
		if strings.HasPrefix(p, dir) {
			return true
		}
	}
	switch path.Ext(p) {
	case ".service", ".socket", ".timer", ".target", ".mount", ".path", ".slice":
		return true
	}
	return false
}

// ApplyServices converges services on h after a push that changed the
// files in changed: daemon-reload if a unit changed, enable all, restart
// those whose files changed, start the others (a no-op for running ones,
// which keep their ActiveEnterTimestamp), then wait for each to be active.
func ApplyServices(ctx context.Context, h Host, changed []string, services []Service, timeout time.Duration) error {
	reload, restart := PlanRestarts(changed, services)
	if reload {
		if err := DaemonReload(ctx, h); err != nil {
			return err
		}
	}
	var units []string
	for _, s := range services {
		units = append(units, s.Unit)
	}
	if len(units) == 0 {
		return nil
	}
	if err := Enable(ctx, h, units...); err != nil {
		return err
	}
	for _, u := range units {
		var err error
		if slices.Contains(restart, u) {
			err = Restart(ctx, h, u)
		} else {
			err = Start(ctx, h, u)
		}
		if err != nil {
			// systemctl's own message only says to look at the journal:
			// put the journal in the error.
			return errors.Join(err, unitFailed(ctx, h, u, "not started"))
		}
	}
	for _, u := range units {
		if err := WaitActive(ctx, h, u, timeout); err != nil {
			return err
		}
	}
	return nil
}
