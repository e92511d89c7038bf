// Package remotetest has a recording fake remote.Host for unit tests of
// code that drives hosts. It fails the test on any command it was not told
// to expect, so a test states exactly what its code runs on a host.
package remotetest

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hardway/hardway/pkg/remote"
)

// Fake is a remote.Host that answers expected commands and records calls.
type Fake struct {
	name string
	t    testing.TB

	mu      sync.Mutex
	expects []*Expectation
	calls   []Call
}

var _ remote.Host = (*Fake)(nil)

// Call is one command the code under test ran.
type Call struct {
	Cmd   string
	Stdin []byte
}

// Expectation is one expected command and its answer.
type Expectation struct {
	desc   string
	match  func(string) bool
	stdout string
	stderr string
	code   int
	err    error
	fn     func(cmd string, stdin []byte) (string, error)
	times  int // -1: any number
	used   int
}

// New returns a Fake named name that, when t ends, fails t if an expected
// command was never run.
func New(t testing.TB, name string) *Fake {
	f := &Fake{name: name, t: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.expects {
			if e.times > 0 && e.used < e.times {
				t.Errorf("%s: expected command not run (%d of %d times): %s", name, e.used, e.times, e.desc)
			}
		}
	})
	return f
}

// Expect expects cmd, exactly, once; it succeeds with no output unless told
// otherwise. Expectations for the same command are used in the order given.
func (f *Fake) Expect(cmd string) *Expectation {
	return f.add(&Expectation{desc: fmt.Sprintf("%q", cmd), match: func(s string) bool { return s == cmd }, times: 1})
}

// ExpectMatch expects a command matching the regular expression re, once.
func (f *Fake) ExpectMatch(re string) *Expectation {
	rx := regexp.MustCompile(re)
	return f.add(&Expectation{desc: "/" + re + "/", match: rx.MatchString, times: 1})
}

func (f *Fake) add(e *Expectation) *Expectation {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expects = append(f.expects, e)
	return e
}

// Returns sets the command's standard output.
func (e *Expectation) Returns(stdout string) *Expectation { e.stdout = stdout; return e }

// Fails makes the command exit with code and stderr (a *remote.ExitError).
func (e *Expectation) Fails(code int, stderr string) *Expectation {
	e.code, e.stderr = code, stderr
	return e
}

// RespondWith answers the command with fn's output and error, for fakes
// that model a host's state rather than list each command.
func (e *Expectation) RespondWith(fn func(cmd string, stdin []byte) (string, error)) *Expectation {
	e.fn = fn
	return e
}

// Errors makes Run return err as is (a lost connection, say).
func (e *Expectation) Errors(err error) *Expectation { e.err = err; return e }

// Times expects the command n times; AnyTimes allows any number, zero too.
func (e *Expectation) Times(n int) *Expectation { e.times = n; return e }

// AnyTimes lets the command run any number of times, including never.
func (e *Expectation) AnyTimes() *Expectation { e.times = -1; return e }

// Name implements remote.Host.
func (f *Fake) Name() string { return f.name }

// Run implements remote.Host.
func (f *Fake) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	var in []byte
	if stdin != nil {
		var err error
		if in, err = io.ReadAll(stdin); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, Call{Cmd: cmd, Stdin: in})
	var e *Expectation
	for _, x := range f.expects {
		if (x.times < 0 || x.used < x.times) && x.match(cmd) {
			e = x
			break
		}
	}
	if e != nil {
		e.used++
	}
	f.mu.Unlock()
	if e == nil {
		f.t.Errorf("%s: unexpected command: %q", f.name, cmd)
		return nil, fmt.Errorf("remotetest: %s: unexpected command %q", f.name, firstLine(cmd))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.fn != nil {
		out, err := e.fn(cmd, in)
		return []byte(out), err
	}
	if e.err != nil {
		return []byte(e.stdout), e.err
	}
	if e.code != 0 {
		return []byte(e.stdout), &remote.ExitError{Host: f.name, Cmd: cmd, Code: e.code, Stderr: e.stderr}
	}
	return []byte(e.stdout), nil
}

// Calls returns the commands run so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Commands returns just the command lines of Calls.
func (f *Fake) Commands() []string {
	var out []string
	for _, c := range f.Calls() {
		out = append(out, c.Cmd)
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
