package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
)

// TestCaptured runs captured sections in a real POSIX shell: each command's
// exit status, standard output and standard error come back apart, a
// failing one as the ExitError Run would have returned, and the output
// before the first section stays readable.
func TestCaptured(t *testing.T) {
	script := "echo '@units'; echo 'Id=a.service'\n" +
		captured("ok", "printf '{\"a\": 1}\\n@notasection\\n'; echo warning >&2") +
		captured("bad", "echo partial; echo 'no such file' >&2; exit 3") +
		captured("empty", "true")
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	s := string(out)
	if got := beforeCaptured(s); got != "@units\nId=a.service\n" {
		t.Errorf("beforeCaptured = %q", got)
	}
	if b, err := capturedResult(s, "ok", "w1", "cmd"); err != nil || string(b) != "{\"a\": 1}\n@notasection\n" {
		t.Errorf("ok = %q, %v", b, err)
	}
	_, err = capturedResult(s, "bad", "w1", "cat /x")
	var ee *remote.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Stderr != "no such file" || ee.Host != "w1" {
		t.Errorf("bad: err = %#v", err)
	}
	if !strings.Contains(err.Error(), "w1: cat /x: exit status 3: no such file") {
		t.Errorf("bad: message %q", err)
	}
	if b, err := capturedResult(s, "empty", "w1", "true"); err != nil || strings.TrimSpace(string(b)) != "" {
		t.Errorf("empty = %q, %v", b, err)
	}
	if _, err := capturedResult(s, "missing", "w1", "x"); err == nil {
		t.Error("a section that is not there: no error")
	}
}

// Callers asking for a host while it is being dialled wait for that one
// handshake; a dial cut short by its caller's context is dialled again for
// the next caller whose context is alive.
func TestHostDialsOnce(t *testing.T) {
	var mu sync.Mutex
	dials := 0
	release := make(chan struct{})
	c := New(testInventory(t), Options{Connect: func(ctx context.Context, cfg remote.Config) (remote.Host, error) {
		mu.Lock()
		dials++
		n := dials
		mu.Unlock()
		if n == 1 {
			// The first dial's caller gives up while it is under way.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("ssh %s: %w", cfg.Name, ctx.Err())
			case <-time.After(5 * time.Second):
				return nil, errors.New("the first caller's context was not cancelled")
			}
		}
		<-release
		return remotetest.New(t, cfg.Name), nil
	}})
	cut, cancel := context.WithCancel(t.Context())
	firstDone := make(chan error, 1)
	go func() { _, err := c.Host(cut, "c1"); firstDone <- err }()
	for { // until the first dial is under way
		mu.Lock()
		n := dials
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	hosts := make([]remote.Host, 8)
	for i := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Host(t.Context(), "c1")
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			hosts[i] = h
		}()
	}
	time.Sleep(20 * time.Millisecond) // the callers are waiting for the first dial
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("first caller: %v, want its context's end", err)
	}
	close(release)
	wg.Wait()
	if dials != 2 {
		t.Errorf("%d dials, want 2 (the cut one and one more for all the waiting callers)", dials)
	}
	for i, h := range hosts {
		if h == nil || h != hosts[0] {
			t.Errorf("caller %d got %v, want the one connection %v", i, h, hosts[0])
		}
	}
}
