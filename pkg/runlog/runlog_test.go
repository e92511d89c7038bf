package runlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hardway/hardway/pkg/remote"
)

func TestOpenNamesModesAndCollisions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "logs")
	now := time.Date(2026, 11, 30, 21, 5, 7, 0, time.UTC)
	a, err := Open(dir, "up", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, "up", now)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a.Path()) != "up-20261130-2105.log" || filepath.Base(b.Path()) != "up-20261130-2105-2.log" {
		t.Fatalf("names %s, %s", a.Path(), b.Path())
	}
	fi, _ := os.Stat(dir)
	fa, _ := os.Stat(a.Path())
	if fi.Mode().Perm() != 0o700 || fa.Mode().Perm() != 0o600 {
		t.Fatalf("modes: dir %v, file %v", fi.Mode().Perm(), fa.Mode().Perm())
	}
	a.End(nil)
	b.End(nil)
}

// A command's whole stderr is in the log, also beyond what an error
// message shows; its standard input never is.
func TestCommandKeepsAllOfStderr(t *testing.T) {
	l, err := Open(t.TempDir(), "up", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&stderr, "etcd: line %d\n", i)
	}
	ee := &remote.ExitError{Host: "c1", Cmd: "systemctl start etcd.service", Code: 1, Stderr: stderr.String()}
	l.Command(remote.Trace{Host: "c1", Cmd: "systemctl start etcd.service", Start: time.Now(), Duration: 1500 * time.Millisecond, Code: 1, Stderr: stderr.String(), Err: ee})
	l.Command(remote.Trace{Host: "c2", Cmd: "echo '@etcd'\nls /", Start: time.Now(), Duration: time.Millisecond})
	l.Printf("[etcd] c1: etcd: start")
	err = WithPath(ee, l)
	l.End(err)
	b, _ := os.ReadFile(l.Path())
	for _, want := range []string{"c1: exit 1 in 1.5s", "$ systemctl start etcd.service", "! etcd: line 1\n", "! etcd: line 40\n", "c2: ok in 1ms", "    $ ls /", "[etcd] c1: etcd: start", "failed after"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(ee.Error(), "line 40") {
		t.Error("the error message shows all of stderr: the log adds nothing")
	}
	var le *Error
	if !errors.As(err, &le) || le.Path != l.Path() || !errors.Is(err, ee) {
		t.Fatalf("WithPath: %v", err)
	}
	if WithPath(nil, l) != nil {
		t.Fatal("nil error got a path")
	}
}

func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		p := filepath.Join(dir, fmt.Sprintf("up-%d.log", i))
		os.WriteFile(p, nil, 0o600)
		mt := time.Now().Add(time.Duration(i-10) * time.Hour)
		os.Chtimes(p, mt, mt)
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600)
	prune(dir, 2)
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "notes.txt up-3.log up-4.log" {
		t.Fatalf("left %v", names)
	}
}

// A table written cell by cell (a tabwriter flushes in pieces) is logged
// one stamped line per row, not one per cell; a piece left at the end is
// logged by End.
func TestWriteJoinsPiecesOfALine(t *testing.T) {
	l, err := Open(t.TempDir(), "verify", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tw := tabwriter.NewWriter(l, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tHOST\tSTATUS")
	fmt.Fprintln(tw, "etcd/health\tcontroller-1\tpass")
	tw.Flush()
	for _, piece := range []string{"sta", "rt of a ", "line\nand a tail"} {
		l.Write([]byte(piece))
	}
	l.End(nil)
	b, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		got = append(got, strings.TrimRight(line[len("15:04:05.000 "):], " "))
	}
	want := []string{"hardway verify, started", "CHECK        HOST          STATUS", "etcd/health  controller-1  pass",
		"start of a line", "and a tail", "done in"}
	if len(got) != len(want) {
		t.Fatalf("log lines:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// A dry run's log writes no file, creates no directory and prunes none; a
// failed dry run's error carries no log path.
func TestOpenUnlessDryRunWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	l, err := OpenUnless(true, dir, "up", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l.Printf("plan %d", 1)
	fmt.Fprintln(l, "[pki] would generate ca")
	l.Command(remote.Trace{Host: "controller-1", Cmd: "true", Start: time.Now()})
	if err := l.End(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a dry run's log touched %s: %v", dir, err)
	}
	base := errors.New("boom")
	if got := WithPath(base, l); got != base {
		t.Errorf("WithPath of a dry run: %v", got)
	}
	// Not a dry run: a file.
	l, err = OpenUnless(false, dir, "up", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l.End(nil)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("logs: %v %v", ents, err)
	}
}
