// Package remote runs commands and writes files on the cluster's hosts.
//
// Everything goes through the two-method Host interface so that callers can be
// unit-tested against remotetest.Fake, while SSHHost talks to real machines
// with verified host keys. File writes are atomic and idempotent (WriteFile),
// and systemd is driven through systemctl (see systemd.go).
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/hardway/hardway/pkg/usererr"
)

// Host runs shell commands on one machine.
type Host interface {
	// Name is the host's name in the inventory, used in messages.
	Name() string
	// Run runs cmd with sh on the host, feeding it stdin (nil: no input), and
	// returns its standard output. A command that exits non-zero returns its
	// output so far and an *ExitError.
	Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error)
}

// Dialer opens connections from a host's side, like `ssh -L`: the etcd and
// apiserver clients reach the cluster's loopback and addresses through it.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Closer is a Host holding a connection to close.
type Closer interface {
	Close() error
}

// ExitError is a command that ran on a host and failed. It keeps everything
// needed to debug it; its message only shows the first lines.
type ExitError struct {
	Host   string
	Cmd    string
	Code   int // exit status; -1 when the command ended without one (killed by a signal)
	Stderr string
}

// stderrLines is how much of stderr an error message shows; the rest stays in
// the ExitError for the log.
const stderrLines = 5

func (e *ExitError) Error() string {
	cmd := firstLine(e.Cmd, 80)
	msg := fmt.Sprintf("%s: %s: exit status %d", e.Host, cmd, e.Code)
	if s := headLines(e.Stderr, stderrLines); s != "" {
		msg += ": " + s
	}
	return msg
}

// firstLine shortens a (possibly multi-line script) command for a message.
func firstLine(s string, max int) string {
	s = strings.TrimSpace(s)
	short := s
	if i := strings.IndexByte(short, '\n'); i >= 0 {
		short = short[:i]
	}
	if len(short) > max {
		short = short[:max]
	}
	if short != s {
		short += " …"
	}
	return short
}

func headLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("(%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// Quote quotes s for a POSIX shell (usererr.Quote: the same quoting for
// the commands hardway runs and the ones its hints print).
func Quote(s string) string { return usererr.Quote(s) }

// ForEach calls fn for every item with at most limit calls running at once
// (limit <= 0: no limit). A failure on one host does not stop the others: an
// operator fixing three hosts wants to hear about all three. The errors are
// joined in the order of items.
func ForEach[T any](ctx context.Context, items []T, limit int, fn func(context.Context, T) error) error {
	var g errgroup.Group
	if limit > 0 {
		g.SetLimit(limit)
	}
	errs := make([]error, len(items))
	for i, it := range items {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				errs[i] = err
				return nil
			}
			errs[i] = fn(ctx, it)
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}
