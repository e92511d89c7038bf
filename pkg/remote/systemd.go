package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/poll"
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

// UnitState is what systemd says about one unit.
type UnitState struct {
	Active      bool   // ActiveState=active
	State       string // ActiveState: "active", "inactive", "activating", "failed", ...
	Enabled     bool   // UnitFileState=enabled
	NeedReload  bool   // NeedDaemonReload=yes: its file changed since systemd read it
	ActiveEnter string // ActiveEnterTimestamp as systemctl prints it
}

// ShowCommand is the `systemctl show` that ParseShow reads, for one unit.
func ShowCommand(unit string) string {
	return "systemctl show -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp " + Quote(unit)
}

// ShowUnitsCommand is one `systemctl show` for several units, which
// ParseShowUnits reads: one process and one query of systemd for all of
// them, where a command per unit cost a fork, an exec and a bus connection
// each (on a busy host, tens of milliseconds apiece).
func ShowUnitsCommand(units ...string) string {
	q := make([]string, len(units))
	for i, u := range units {
		q[i] = Quote(u)
	}
	return "systemctl show -p Id -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp -- " + strings.Join(q, " ")
}

// ParseShowUnits reads ShowUnitsCommand's output: systemctl prints one
// block of properties per unit, blocks separated by an empty line, each
// naming its unit in Id= (in whatever order systemd lists the properties).
func ParseShowUnits(out string) map[string]UnitState {
	m := map[string]UnitState{}
	var st UnitState
	id := ""
	flush := func() {
		if id != "" {
			m[id] = st
		}
		st, id = UnitState{}, ""
	}
	for _, l := range strings.Split(out, "\n") {
		if l == "" {
			flush()
			continue
		}
		if v, ok := strings.CutPrefix(l, "Id="); ok {
			id = v
			continue
		}
		st.Set(l)
	}
	flush()
	return m
}

// Set takes one "Key=value" line of ShowCommand's output; other lines are
// ignored, so the output of several commands can be fed line by line.
func (st *UnitState) Set(line string) {
	k, v, _ := strings.Cut(line, "=")
	switch k {
	case "ActiveState":
		st.State, st.Active = v, v == "active"
	case "UnitFileState":
		st.Enabled = v == "enabled"
	case "NeedDaemonReload":
		st.NeedReload = v == "yes"
	case "ActiveEnterTimestamp":
		st.ActiveEnter = v
	}
}

// ParseShow reads ShowCommand's output.
func ParseShow(out string) UnitState {
	var st UnitState
	for _, l := range strings.Split(out, "\n") {
		st.Set(l)
	}
	return st
}

// QueryUnit asks systemd on h about unit.
func QueryUnit(ctx context.Context, h Host, unit string) (UnitState, error) {
	out, err := h.Run(ctx, ShowCommand(unit), nil)
	if err != nil {
		return UnitState{}, err
	}
	return ParseShow(string(out)), nil
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
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last UnitState
	// 500ms at most between asks: a start's wait ends soon after the unit
	// is active (one systemctl over the open connection costs little).
	err := poll.Until(wctx, poll.Options{Interval: 100 * time.Millisecond, Max: 500 * time.Millisecond}, func(ctx context.Context) error {
		st, err := QueryUnit(ctx, h, unit)
		if err != nil {
			return poll.Stop(err)
		}
		last = st
		switch st.State {
		case "active":
			return nil
		case "failed":
			return poll.Stop(errUnitFailed)
		}
		return errors.New(st.State)
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errUnitFailed):
		return unitFailed(ctx, h, unit, "failed")
	case ctx.Err() == nil && wctx.Err() != nil && last.State != "":
		return unitFailed(ctx, h, unit, fmt.Sprintf("%s after %v", last.State, timeout))
	}
	return err
}

var errUnitFailed = errors.New("unit failed")

func unitFailed(ctx context.Context, h Host, unit, state string) error {
	j, err := Journal(ctx, h, unit, journalLines)
	if err != nil {
		j = fmt.Sprintf("(journalctl failed: %v)", err)
	}
	return usererr.New(&UnitError{Host: h.Name(), Unit: unit, State: state, Journal: j},
		fmt.Sprintf("the journal above says why; for more, on %s run: journalctl -u %s", h.Name(), unit))
}
