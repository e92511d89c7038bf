package lab_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/lab"
)

const crashHelperEnv = "HARDWAY_LAB_CRASH_HELPER"

// TestMain doubles as the process that crashes: with crashHelperEnv set, the
// test binary only runs `lab up` and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) != "" {
		l, err := lab.New(crashConfig(os.Getenv(crashHelperEnv)))
		if err == nil {
			_, err = l.Up(context.Background())
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		for {
			time.Sleep(time.Hour) // until the test kills us
		}
	}
	os.Exit(m.Run())
}

func crashConfig(dir string) lab.Config {
	return lab.Config{Dir: dir, Prefix: "hwt5", Net: "10.240.13", Hosts: 1, Workers: 2, Log: os.Stderr}
}

// TestDownAfterCrash kills `lab up` with SIGKILL half way (the controller and
// worker-1 started, worker-2 maybe half made) and checks that `lab down` still
// removes everything, from the state up recorded on disk: a worker's cgroups
// in every hierarchy too.
func TestDownAfterCrash(t *testing.T) {
	requireRoot(t)
	const prefix = "hwt5"
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("left from an earlier run (clean up with: hardway lab down --prefix %s):\n%s", prefix, strings.Join(left, "\n"))
	}
	dir := t.TempDir()
	l, err := lab.New(crashConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(lab.DefaultRoot, "lab", prefix, "state.json")
	deadline := time.Now().Add(2 * time.Minute)
	for startedHosts(statePath) < 2 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("lab up did not start two hosts in 2m:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("killed lab up:\n%s", out.String())

	left := strings.Join(leftovers(t, prefix), "\n")
	if !strings.Contains(left, "process ") || !strings.Contains(left, "netns ") ||
		!strings.Contains(left, "/sys/fs/cgroup/cpuset/") || !strings.Contains(left, "hardway-"+prefix+"-worker-1") {
		t.Fatalf("after the crash, expected running hosts, found:\n%s", left)
	}
	if err := l.Down(t.Context()); err != nil {
		t.Fatalf("lab down after a crash: %v", err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Errorf("lab down after a crash left behind:\n%s", strings.Join(left, "\n"))
	}
}

// startedHosts counts hosts whose supervisor the state records.
func startedHosts(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var st struct {
		Hosts []struct {
			SupervisorPID int `json:"supervisorPid"`
		} `json:"hosts"`
	}
	if json.Unmarshal(b, &st) != nil {
		return 0
	}
	n := 0
	for _, h := range st.Hosts {
		if h.SupervisorPID > 0 {
			n++
		}
	}
	return n
}

// TestFailedUpUndoesItself: when the hosts do not come up in time, `lab up`
// says so and removes what it created, without a `lab down`.
func TestFailedUpUndoesItself(t *testing.T) {
	requireRoot(t)
	const prefix = "hwt6"
	l, err := lab.New(lab.Config{Dir: t.TempDir(), Prefix: prefix, Net: "10.240.14", Hosts: 1,
		BootTimeout: time.Millisecond, Log: testLog{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })
	_, err = l.Up(t.Context())
	if err == nil || !strings.Contains(err.Error(), "sshd did not answer") {
		t.Fatalf("lab up with a 1ms boot timeout: err = %v, want 'sshd did not answer'", err)
	}
	if strings.Contains(err.Error(), "undoing it") {
		t.Errorf("lab up could not undo itself: %v", err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Errorf("failed lab up left behind:\n%s", strings.Join(left, "\n"))
	}
}
