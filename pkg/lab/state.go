package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hardway/hardway/pkg/fsutil"
)

// state is everything a lab created, written to disk before each thing is
// created, so that Down can undo a lab whose `up` crashed half way. Every
// entry is safe to undo when the thing it names does not exist.
type state struct {
	Prefix    string `json:"prefix"`
	Net       string `json:"net"`
	LabDir    string `json:"labDir"`
	Bridge    string `json:"bridge"`
	RunNetns  bool   `json:"createdRunNetns"` // /run/netns did not exist before this lab
	StartedAt string `json:"startedAt"`

	Hosts []hostState `json:"hosts"`

	// The release mirror's HTTP server (Config.ServeMirror), if started.
	MirrorPID   int    `json:"mirrorPid,omitempty"`
	MirrorStart uint64 `json:"mirrorStart,omitempty"` // /proc starttime: PIDs get reused

	path string
}

type hostState struct {
	Name    string   `json:"name"`    // hostname and inventory name: controller-1
	Role    string   `json:"role"`    // RoleController or RoleWorker; "" (an older state) is a controller
	Machine string   `json:"machine"` // nspawn machine name, unique across labs: hw-controller-1
	Address string   `json:"address"`
	Netns   string   `json:"netns"`
	Veth    string   `json:"veth"` // root-namespace end of the veth pair
	Dir     string   `json:"dir"`  // upper, work, root (the overlay mount), console.log, nspawn.pid
	Cgroups []string `json:"cgroups"`

	SupervisorPID   int    `json:"supervisorPid,omitempty"`
	SupervisorStart uint64 `json:"supervisorStart,omitempty"` // /proc starttime: PIDs get reused
}

func (h hostState) worker() bool          { return h.Role == RoleWorker }
func (h hostState) rootfs() string        { return filepath.Join(h.Dir, "root") }
func (h hostState) containerdDir() string { return filepath.Join(h.Dir, "containerd") }
func (h hostState) consoleLog() string    { return filepath.Join(h.Dir, "console.log") }
func (h hostState) nspawnPIDFile() string { return filepath.Join(h.Dir, "nspawn.pid") }
func (h hostState) stoppingFile() string  { return filepath.Join(h.Dir, "stopping") }

func loadState(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	s := &state{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("parse lab state %s: %w", path, err)
	}
	s.path = path
	return s, nil
}

func (s *state) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	if err := fsutil.WriteFile(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return nil
}

// procStat is what Down needs to know about a recorded PID before it sends a
// signal: whether it still exists (zombies do not count) and since when.
type procStat struct {
	state byte
	start uint64
}

func readProcStat(pid int) (procStat, bool) {
	if pid <= 0 {
		return procStat{}, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// comm may contain spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], start: start}, true
}

// alive reports whether pid runs and, when start is not 0, is the same
// process that was recorded (same start time).
func alive(pid int, start uint64) bool {
	st, ok := readProcStat(pid)
	if !ok || st.state == 'Z' || st.state == 'X' {
		return false
	}
	return start == 0 || st.start == start
}

// nspawnPID returns the PID of the host's systemd-nspawn if it still runs and
// is really this host's (comm and --machine match), else 0.
func nspawnPID(h hostState) int {
	b, err := os.ReadFile(h.nspawnPIDFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid, 0) {
		return 0
	}
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if strings.TrimSpace(string(comm)) != "systemd-nspawn" ||
		!bytes.Contains(cmdline, []byte("\x00--machine="+h.Machine+"\x00")) {
		return 0
	}
	return pid
}

// childrenOf lists the direct children of pid (the container's PID 1 for nspawn).
func childrenOf(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func signal(pid int, sig syscall.Signal) {
	if pid > 0 {
		_ = syscall.Kill(pid, sig)
	}
}
