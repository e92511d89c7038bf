package lab

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// An inherited descriptor (opened without O_CLOEXEC, as a flock(1) parent
// leaves its lock) must not reach the processes the lab starts.
func TestCloseInheritedOnExec(t *testing.T) {
	fd, err := syscall.Open(t.TempDir(), syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	childFDs := func() []string {
		out, err := exec.Command("ls", "/proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(out))
	}
	if !slices.Contains(childFDs(), strconv.Itoa(fd)) {
		t.Fatalf("precondition: fd %d should reach a child before the fix", fd)
	}
	closeInheritedOnExec()
	if got := childFDs(); slices.Contains(got, strconv.Itoa(fd)) {
		t.Fatalf("fd %d still reaches a child: %v", fd, got)
	}
}
