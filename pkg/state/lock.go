package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// LockFile is the file that `pki`, `up`, `state pull` and the daemon's
// repairs flock while they use the state directory, so that no two of them
// ever mix generations of keys (one writing a new certificate while another
// pushes the old key). It holds the holder's PID, command and start time,
// for the message of whoever has to wait.
func (d Dir) LockFile() string { return filepath.Join(string(d), "lock") }

// Lock is a held lock on a state directory.
type Lock struct {
	f    *os.File
	note bool // an exclusive holder's: its note is cleared at Unlock
}

// DefaultLockWait is how long a command waits for another to finish before
// it gives up and names it.
const DefaultLockWait = 10 * time.Second

// lockPoll is how often a waiting Lock tries again.
const lockPoll = 100 * time.Millisecond

// Lock takes the exclusive lock of the state directory, creating the
// directory (0700) and the lock file (0600) when missing. It waits up to
// wait for a holder to finish (0: try once), then fails with an error naming
// the holder. what describes this process for the next one to wait
// ("hardway up -i inventory.yaml"). The lock is released by Unlock, or by
// the kernel when the process ends: a crashed holder never leaves it stuck.
//
// A process killed while it replaced a key pair left a redo record: Lock
// finishes it (see WritePair) before the holder reads the pair. A holder
// that only plans (--dry-run) takes LockReadOnly instead.
func (d Dir) Lock(ctx context.Context, what string, wait time.Duration) (*Lock, error) {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	f, err := os.OpenFile(d.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := d.flock(ctx, f, syscall.LOCK_EX, wait); err != nil {
		return nil, err
	}
	l := &Lock{f: f, note: true}
	info := fmt.Sprintf("pid=%d\ncommand=%s\nsince=%s\n", os.Getpid(), oneLine(what), time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0) // only for messages: a failure here changes nothing
	}
	if _, err := d.FinishPairs(); err != nil {
		_ = l.Unlock()
		return nil, err
	}
	return l, nil
}

// LockReadOnly is Lock for a holder that changes nothing (a plan): a shared
// lock, so plans run beside each other but never beside a writer. It writes
// nothing at all: no directory, no lock file, no holder's note (a writer
// that has to wait for a plan says "another process (it left no note)"),
// and an unfinished pair write stays as it is (PendingPairs names them).
// Without a lock file no writer has used the directory yet and there is
// nothing to wait for: the Lock returned then holds nothing (creating the
// file would be a change).
func (d Dir) LockReadOnly(ctx context.Context, wait time.Duration) (*Lock, error) {
	f, err := os.Open(d.LockFile())
	if errors.Is(err, os.ErrNotExist) {
		return &Lock{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := d.flock(ctx, f, syscall.LOCK_SH, wait); err != nil {
		return nil, err
	}
	return &Lock{f: f}, nil
}

// flock takes how (LOCK_EX or LOCK_SH) on f, waiting up to wait; on failure
// it closes f and names the holder.
func (d Dir) flock(ctx context.Context, f *os.File, how int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return fmt.Errorf("lock %s: %w", d.LockFile(), err)
		}
		if !time.Now().Before(deadline) {
			holder := readHolder(d.LockFile())
			f.Close()
			return usererr.Errorf(
				"wait for it to finish and run this again (the lock is released when that process ends;\n"+
					"nothing needs deleting). Two hardway commands on one state directory could mix old and new keys.",
				"state directory %s is in use by %s (waited %s)", d, holder, wait.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			f.Close()
			return ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// Unlock clears the holder's note and releases the lock. It is safe to call
// on a nil Lock and more than once.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	if l.note {
		_ = l.f.Truncate(0)
	}
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// readHolder describes the lock's holder from its note: "PID 1234 (hardway
// up -i inventory.yaml, since 2026-11-30T19:00:00Z)".
func readHolder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return "another process (it left no note)"
	}
	kv := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	pid, err := strconv.Atoi(kv["pid"])
	if err != nil {
		return "another process (it left no note)"
	}
	s := fmt.Sprintf("PID %d", pid)
	var parts []string
	if c := kv["command"]; c != "" {
		parts = append(parts, c)
	}
	if t := kv["since"]; t != "" {
		parts = append(parts, "since "+t)
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
