package state

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// Two Lock calls open two file descriptions, which flock treats as two
// holders even inside one process: the second waits, then names the first.
func TestLockTwoHolders(t *testing.T) {
	d := Dir(filepath.Join(t.TempDir(), "state"))
	l1, err := d.Lock(t.Context(), "hardway up -i a.yaml", 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(string(d)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(d.LockFile()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v %v", fi.Mode(), err)
	}

	start := time.Now()
	_, err = d.Lock(t.Context(), "hardway certs generate", 300*time.Millisecond)
	waited := time.Since(start)
	if err == nil {
		t.Fatal("second lock taken while the first is held")
	}
	for _, want := range []string{"in use by PID " + strconv.Itoa(os.Getpid()), "hardway up -i a.yaml", "since 20"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if h := usererr.HintOf(err); !strings.Contains(h, "wait for it to finish") {
		t.Errorf("hint %q", h)
	}
	if waited < 300*time.Millisecond {
		t.Errorf("gave up after %s, before the wait", waited)
	}

	// A waiter gets the lock as soon as the holder lets go.
	go func() {
		time.Sleep(200 * time.Millisecond)
		l1.Unlock()
	}()
	l2, err := d.Lock(t.Context(), "hardway certs generate", 5*time.Second)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	b, _ := os.ReadFile(d.LockFile())
	if !strings.Contains(string(b), "command=hardway certs generate\n") || strings.Contains(string(b), "a.yaml") {
		t.Errorf("lock note %q", b)
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(); err != nil {
		t.Errorf("second Unlock: %v", err)
	}
	if b, _ := os.ReadFile(d.LockFile()); len(b) != 0 {
		t.Errorf("note left after unlock: %q", b)
	}
}

func TestLockCancelledWhileWaiting(t *testing.T) {
	d := Dir(t.TempDir())
	l, err := d.Lock(t.Context(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := d.Lock(ctx, "y", time.Minute); err != context.DeadlineExceeded {
		t.Errorf("err %v", err)
	}
}

// The helper process of TestLockOtherProcess: it takes the lock, says so,
// and holds it until its stdin closes (or it is killed).
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("HARDWAY_LOCK_HELPER")
	if dir == "" {
		t.Skip("helper process only")
	}
	l, err := Dir(dir).Lock(context.Background(), "hardway state pull controller-1", 0)
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	l.Unlock()
	os.Exit(0)
}

// A real second process: its lock is seen with its PID and command, and a
// killed holder frees the lock (the kernel drops it; nothing to clean up).
func TestLockOtherProcess(t *testing.T) {
	d := Dir(t.TempDir())
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "HARDWAY_LOCK_HELPER="+string(d))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q", line)
	}
	_, err = d.Lock(t.Context(), "hardway up", 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "PID "+strconv.Itoa(cmd.Process.Pid)+" (hardway state pull controller-1") {
		t.Errorf("lock held by the helper: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := d.Lock(t.Context(), "hardway up", 2*time.Second)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	l.Unlock()
}

// A plan's lock writes nothing: on a directory that does not exist it
// creates none; on a used one it leaves the lock file as it was (content,
// size, mtime). It is shared: plans run beside each other, a writer waits
// for them, and they wait for a writer, whose note names it.
func TestLockReadOnlyWritesNothing(t *testing.T) {
	d := Dir(filepath.Join(t.TempDir(), "state"))
	l, err := d.LockReadOnly(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(string(d)); !os.IsNotExist(err) {
		t.Fatalf("a plan's lock created the state directory: %v", err)
	}

	w, err := d.Lock(t.Context(), "hardway up -i a.yaml", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.LockReadOnly(t.Context(), 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "hardway up -i a.yaml") {
		t.Errorf("a plan beside a writer: %v", err)
	}
	w.Unlock()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(d.LockFile(), old, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(d.LockFile())

	r1, err := d.LockReadOnly(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := d.LockReadOnly(t.Context(), 0)
	if err != nil {
		t.Fatalf("two plans at once: %v", err)
	}
	if _, err := d.Lock(t.Context(), "hardway certs generate", 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("a writer beside plans: %v", err)
	}
	r1.Unlock()
	r2.Unlock()
	after, _ := os.Stat(d.LockFile())
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || after.Mode() != before.Mode() {
		t.Errorf("a plan's lock changed the lock file: %v %d %v -> %v %d %v",
			before.Mode(), before.Size(), before.ModTime(), after.Mode(), after.Size(), after.ModTime())
	}
	w, err = d.Lock(t.Context(), "hardway certs generate", 0)
	if err != nil {
		t.Fatalf("the writer after the plans: %v", err)
	}
	w.Unlock()
}
