// Package runlog writes one log file per run of `hardway up`, `verify` or a
// daemon repair in the state directory: every line of progress, and every
// command run on a host with its timing, exit status and whole standard
// error — what an error message on the terminal only shows the start of.
package runlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hardway/hardway/pkg/remote"
)

// Keep is how many logs stay in the directory; the oldest go first.
const Keep = 100

// cmdLines is how much of a command (a script, often) the log shows.
const cmdLines = 40

// Log is one run's log file. Its methods may be called concurrently.
type Log struct {
	mu      sync.Mutex
	f       io.Writer
	closer  io.Closer // nil for Discard
	partial []byte    // the start of a line not yet ended (see Write)
	path    string
	start   time.Time
	now     func() time.Time
}

// Open creates dir (0700) and in it <kind>-YYYYMMDD-HHMM.log (0600), with a
// -2, -3, ... suffix when a run of the same kind started in the same minute.
// The oldest logs beyond Keep are removed.
func Open(dir, kind string, now time.Time) (*Log, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("run log: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("run log: %w", err)
	}
	base := filepath.Join(dir, kind+"-"+now.UTC().Format("20060102-1504"))
	for i := 1; ; i++ {
		p := base + ".log"
		if i > 1 {
			p = fmt.Sprintf("%s-%d.log", base, i)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) && i < 1000 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("run log: %w", err)
		}
		prune(dir, Keep)
		l := &Log{f: f, closer: f, path: p, start: now, now: time.Now}
		l.Printf("hardway %s, started %s", kind, now.UTC().Format(time.RFC3339))
		return l, nil
	}
}

// Discard is the log of a run that changes nothing (a --dry-run): it
// writes no file, so that the state directory, logs/ included, is left as
// it was, and prunes nothing. Its Path is "", and WithPath leaves an error
// as it is.
func Discard() *Log {
	return &Log{f: io.Discard, start: time.Now(), now: time.Now}
}

// OpenUnless is Open, or Discard when dryRun.
func OpenUnless(dryRun bool, dir, kind string, now time.Time) (*Log, error) {
	if dryRun {
		return Discard(), nil
	}
	return Open(dir, kind, now)
}

// prune removes the oldest *.log files beyond keep.
func prune(dir string, keep int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type logFile struct {
		name string
		mod  time.Time
	}
	var logs []logFile
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			logs = append(logs, logFile{e.Name(), fi.ModTime()})
		}
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].mod.After(logs[j].mod) })
	for _, l := range logs[min(keep, len(logs)):] {
		os.Remove(filepath.Join(dir, l.name))
	}
}

// Path is the log file.
func (l *Log) Path() string { return l.path }

func (l *Log) stamp() string { return l.now().UTC().Format("15:04:05.000") }

// Write logs p, a line or more of progress, each line stamped. A line
// written in pieces (a table's cells, from a tabwriter) is held until its
// end, so that it is logged as one stamped line, not one per piece.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(l.f, "%s %s\n", l.stamp(), l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// flushPartial logs a held piece of a line; the caller holds mu.
func (l *Log) flushPartial() {
	if len(l.partial) > 0 {
		fmt.Fprintf(l.f, "%s %s\n", l.stamp(), l.partial)
		l.partial = nil
	}
}

// Printf logs one line, on a line of its own.
func (l *Log) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushPartial()
	for _, line := range strings.Split(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
		fmt.Fprintf(l.f, "%s %s\n", l.stamp(), line)
	}
}

// Command logs a command run on a host: when, how long, its exit status,
// the command itself and all of its standard error. Standard input is
// never logged (it carries keys).
func (l *Log) Command(t remote.Trace) {
	var b strings.Builder
	status := "ok"
	switch {
	case t.Err != nil && t.Code >= 0:
		status = fmt.Sprintf("exit %d", t.Code)
	case t.Err != nil:
		status = "error: " + t.Err.Error()
	}
	fmt.Fprintf(&b, "%s %s: %s in %s\n", t.Start.UTC().Format("15:04:05.000"), t.Host, status, t.Duration.Round(time.Millisecond))
	lines := strings.Split(strings.TrimRight(t.Cmd, "\n"), "\n")
	if len(lines) > cmdLines {
		lines = append(lines[:cmdLines], fmt.Sprintf("… %d more lines", len(lines)-cmdLines))
	}
	for _, s := range lines {
		fmt.Fprintf(&b, "    $ %s\n", s)
	}
	if s := strings.TrimRight(t.Stderr, "\n"); s != "" {
		for _, line := range strings.Split(s, "\n") {
			fmt.Fprintf(&b, "    ! %s\n", line)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushPartial()
	io.WriteString(l.f, b.String())
}

// End logs how the run ended and closes the file.
func (l *Log) End(err error) error {
	if err != nil {
		l.Printf("failed after %s: %v", l.now().Sub(l.start).Round(time.Millisecond), err)
	} else {
		l.Printf("done in %s", l.now().Sub(l.start).Round(time.Millisecond))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushPartial()
	if l.closer == nil {
		return nil
	}
	return l.closer.Close()
}

// Error is a run's error with the path of its log, which the CLI prints
// last (`log: PATH`).
type Error struct {
	Err  error
	Path string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// WithPath wraps a failed run's error with its log's path; nil stays nil.
func WithPath(err error, l *Log) error {
	if err == nil || l == nil || l.path == "" {
		return err
	}
	return &Error{Err: err, Path: l.Path()}
}
