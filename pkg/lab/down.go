package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Down stops the lab and removes everything its state records; it is a
// no-op when the lab is not up. It keeps the cached base and the client key.
func (l *Lab) Down(ctx context.Context) error {
	if err := preflight("ip"); err != nil {
		return err
	}
	st, err := loadState(l.statePath())
	if err != nil {
		return err
	}
	if st == nil {
		l.logf("lab %q is not up", l.cfg.Prefix)
		return nil
	}
	unlock, err := flock(filepath.Join(l.cfg.Root, "lab", ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	return l.down(ctx, st)
}

// down undoes st in the reverse order of up. It goes on after an error, so
// one stuck piece does not leave the rest behind, and reports them all.
func (l *Lab) down(ctx context.Context, st *state) error {
	t0 := time.Now()
	var errs []error
	// Ask every host to power off at once (nspawn turns SIGTERM into an
	// orderly shutdown of the container's systemd), then wait for them all.
	for _, h := range st.Hosts {
		_ = os.WriteFile(h.stoppingFile(), nil, 0o600)
		signal(nspawnPID(h), syscall.SIGTERM)
	}
	for _, h := range st.Hosts {
		if err := stopHost(h); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
	}
	for _, h := range st.Hosts {
		errs = append(errs, removeHost(ctx, h))
	}
	// The mirror server listens on the bridge's address: it goes first.
	errs = append(errs, stopMirror(st))
	if linkExists(st.Bridge) {
		errs = append(errs, run(ctx, "ip", "link", "del", st.Bridge))
	}
	if st.RunNetns {
		errs = append(errs, removeRunNetns())
	}
	// nspawn's runtime directories, if no other container uses them
	for _, d := range []string{"/run/systemd/nspawn/propagate", "/run/systemd/nspawn/locks", "/run/systemd/nspawn"} {
		_ = os.Remove(d)
	}
	if err := errors.Join(errs...); err != nil {
		if serr := st.save(); serr != nil { // keep what is left for the next try
			err = errors.Join(err, serr)
		}
		return fmt.Errorf("lab down (run it again to retry): %w", err)
	}
	for _, f := range []string{InventoryFile, KnownHostsFile, SSHConfigFile} {
		_ = os.Remove(filepath.Join(st.LabDir, f))
	}
	if err := os.RemoveAll(filepath.Dir(st.path)); err != nil {
		return err
	}
	l.logf("lab %q down in %.1fs", st.Prefix, time.Since(t0).Seconds())
	return nil
}

// stopHost asks h's container to halt and waits; it kills the container if
// it does not halt in time, then makes sure its supervisor is gone. Only PIDs
// the lab recorded are signalled.
func stopHost(h hostState) error {
	supAlive := func() bool { return alive(h.SupervisorPID, h.SupervisorStart) }
	// Keep asking: a supervisor may be about to start nspawn (an up that
	// failed at once), and a systemd early in its boot has no handler yet
	// for the halt signal and drops it.
	var lastTerm time.Time
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		p := nspawnPID(h)
		if p == 0 && !supAlive() {
			return nil
		}
		if p != 0 && time.Since(lastTerm) > 3*time.Second {
			signal(p, syscall.SIGTERM)
			lastTerm = time.Now()
		}
	}
	// Killing the container's PID 1 ends its whole PID namespace.
	if p := nspawnPID(h); p != 0 {
		for _, c := range childrenOf(p) {
			signal(c, syscall.SIGKILL)
		}
		time.Sleep(time.Second)
		signal(nspawnPID(h), syscall.SIGKILL)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if nspawnPID(h) == 0 {
			break
		}
	}
	if supAlive() {
		signal(h.SupervisorPID, syscall.SIGKILL)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if nspawnPID(h) == 0 && !supAlive() {
			return nil
		}
	}
	return errors.New("its systemd-nspawn or supervisor does not end")
}

// removeHost removes h's mounts, network namespace (which takes eth0 and so
// the veth pair with it), veth, cgroups and state directory.
func removeHost(ctx context.Context, h hostState) error {
	var errs []error
	mounts, err := mountsUnder(h.Dir)
	if err != nil {
		return err
	}
	for _, m := range mounts { // deepest first
		if err := syscall.Unmount(m, 0); err != nil {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %w", m, err))
			}
		}
	}
	if _, err := os.Stat("/run/netns/" + h.Netns); err == nil {
		errs = append(errs, run(ctx, "ip", "netns", "del", h.Netns))
	}
	// Deleting the namespace removes the pair, but asynchronously: the veth
	// may vanish between the check and the delete.
	if linkExists(h.Veth) {
		if err := run(ctx, "ip", "link", "del", h.Veth); err != nil && linkExists(h.Veth) {
			errs = append(errs, err)
		}
	}
	for _, c := range h.Cgroups {
		errs = append(errs, removeCgroup(c))
	}
	_ = os.Remove("/run/systemd/nspawn/propagate/" + h.Machine)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if err := os.RemoveAll(h.Dir); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space) of /proc mount tables.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeRunNetns undoes the /run/netns mount `ip netns add` made, if this
// lab's was the first and no namespace is left in it.
func removeRunNetns() error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || len(entries) > 0 {
		return nil // someone else's namespaces: leave it
	}
	for range 5 {
		ms, _ := mountsUnder("/run/netns")
		if len(ms) == 0 {
			break
		}
		if err := syscall.Unmount("/run/netns", 0); err != nil {
			break
		}
	}
	if err := os.Remove("/run/netns"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Status is one host's state as `lab status` shows it.
type Status struct {
	Name    string `json:"name"`
	Role    string `json:"role"` // RoleController or RoleWorker
	Address string `json:"address"`
	Running bool   `json:"running"` // its systemd-nspawn runs
	SSH     bool   `json:"ssh"`     // port 22 accepts connections
	Memory  int64  `json:"memoryBytes"`
}

// LabStatus is the whole lab's status; Up is false when no state is recorded.
type LabStatus struct {
	Up        bool     `json:"up"`
	Prefix    string   `json:"prefix"`
	Net       string   `json:"net"`
	Inventory string   `json:"inventory,omitempty"`
	Hosts     []Status `json:"hosts"`
}

// Status reports the recorded hosts; it changes nothing.
func (l *Lab) Status(ctx context.Context) (*LabStatus, error) {
	if err := preflight(); err != nil {
		return nil, err
	}
	st, err := loadState(l.statePath())
	if err != nil {
		return nil, err
	}
	ls := &LabStatus{Prefix: l.cfg.Prefix, Net: l.net.String(), Hosts: []Status{}}
	if st == nil {
		return ls, nil
	}
	ls.Up, ls.Net, ls.Inventory = true, st.Net, filepath.Join(st.LabDir, InventoryFile)
	for _, h := range st.Hosts {
		role := h.Role
		if role == "" {
			role = RoleController
		}
		s := Status{Name: h.Name, Role: role, Address: h.Address, Running: nspawnPID(h) != 0}
		if s.Running {
			s.SSH = tcpOpen(ctx, h.Address+":22")
			s.Memory = cgroupMemory(h.Cgroups)
		}
		ls.Hosts = append(ls.Hosts, s)
	}
	return ls, nil
}

// cgroupMemory is the memory the host's cgroup charges (v1 usage without page
// cache where it can tell, else v2 memory.current); 0 if unknown.
func cgroupMemory(cgs []string) int64 {
	for _, c := range cgs {
		if b, err := os.ReadFile(filepath.Join(c, "memory.stat")); err == nil && strings.Contains(c, "/memory/") {
			var rss, mapped int64
			for _, line := range strings.Split(string(b), "\n") {
				var k string
				var v int64
				if n, _ := fmt.Sscanf(line, "%s %d", &k, &v); n == 2 {
					switch k {
					case "total_rss":
						rss = v
					case "total_mapped_file":
						mapped = v
					}
				}
			}
			return rss + mapped
		}
		if b, err := os.ReadFile(filepath.Join(c, "memory.current")); err == nil {
			var v int64
			if _, err := fmt.Sscanf(string(b), "%d", &v); err == nil {
				return v
			}
		}
	}
	return 0
}

func tcpOpen(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
