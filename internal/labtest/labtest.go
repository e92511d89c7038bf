// Package labtest starts a `hardway lab` for a test and always takes it
// down: the one setup the lab, e2e and daemon suites share.
package labtest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/lab"
)

// RequireRoot is the one allowed skip: without root there is nothing to
// test. A missing tool is a failure (hack/setup.sh installs them).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, mounts, systemd-nspawn): run as root, as CI does")
	}
	for _, tool := range []string{"ip", "systemd-nspawn", "debootstrap", "ssh", "scp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run hack/setup.sh", tool)
		}
	}
}

// Start brings up the lab cfg describes (Dir defaults to a temporary
// directory, Log to the test log) and takes it down when the test ends,
// also when it fails. A lab of the same prefix left by a run that crashed
// or was killed is taken down first, or Up would refuse.
func Start(t *testing.T, cfg lab.Config) (*lab.Lab, *lab.Result) {
	t.Helper()
	RequireRoot(t)
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = Log{t}
	}
	cfg = Slot(t, cfg)
	l, err := lab.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Down(t.Context()); err != nil {
		t.Fatalf("lab down of a leftover lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	res, err := l.Up(t.Context())
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	return l, res
}

// Slot lets a second run of the same suite share this machine with the
// first (developers iterating in parallel): HARDWAY_LAB_SLOT=2 appends "b"
// to the prefix and moves the /24 up by 100 (10.240.7 becomes 10.240.107).
// Unset or 1 changes nothing, as in CI. Tests must take every address from
// the lab's Result, never write one.
func Slot(t testing.TB, cfg lab.Config) lab.Config {
	t.Helper()
	switch s := os.Getenv("HARDWAY_LAB_SLOT"); s {
	case "", "1":
		return cfg
	case "2":
		if cfg.Prefix == "" {
			cfg.Prefix = lab.DefaultPrefix
		}
		cfg.Prefix += "b"
		if cfg.Net == "" {
			cfg.Net = lab.DefaultNet
		}
		parts := strings.Split(strings.TrimSuffix(cfg.Net, ".0/24"), ".")
		if len(parts) != 3 {
			t.Fatalf("HARDWAY_LAB_SLOT=2: cannot shift net %q", cfg.Net)
		}
		n, err := strconv.Atoi(parts[2])
		if err != nil || n+100 > 255 {
			t.Fatalf("HARDWAY_LAB_SLOT=2: cannot shift net %q", cfg.Net)
		}
		cfg.Net = parts[0] + "." + parts[1] + "." + strconv.Itoa(n+100)
		return cfg
	default:
		t.Fatalf("HARDWAY_LAB_SLOT=%q: want 1 or 2", s)
		return cfg
	}
}

// Log writes the lab's progress lines to the test log.
type Log struct{ T testing.TB }

func (l Log) Write(p []byte) (int, error) {
	l.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
