package lab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hardway/hardway/pkg/usererr"
)

// Result is what a started lab offers its user.
type Result struct {
	Inventory  string // path of inventory.yaml
	SSHConfig  string
	KnownHosts string
	Identity   string
	Hosts      []Host // the controllers
	Workers    []Host
	// With Config.ServeMirror: the mirror's base URL on the bridge address
	// (http://10.240.x.1:18780, the mirror's directories below it), the
	// bridge address, and the server's request log.
	MirrorURL string
	Bridge    string
	MirrorLog string
}

// Host is one lab host.
type Host struct {
	Name    string
	Address string
}

// supervisor runs systemd-nspawn again when the container reboots (exit code
// 133), as systemd-nspawn@.service would; a `stopping` file ends the loop.
// It first moves itself into the host's own cgroups: with --keep-unit every
// container would otherwise share one cgroup and their systemds collide.
const supervisor = `set -u
d=$1; shift
for c in $HARDWAY_LAB_CGROUPS; do echo $$ > "$c/cgroup.procs" || exit 97; done
while :; do
  "$@" &
  echo $! > "$d/nspawn.pid"
  wait $!; rc=$?
  if [ "$rc" != 133 ] || [ -e "$d/stopping" ]; then break; fi
  echo "=== hardway lab: $(date +%T) reboot" >&2
done
echo "=== hardway lab: $(date +%T) systemd-nspawn exited $rc" >&2
`

// Up creates and boots the lab, waits until every host's systemd is running
// and writes the files to reach it. On failure it undoes what it created.
func (l *Lab) Up(ctx context.Context) (*Result, error) {
	if err := preflight("ip", "systemd-nspawn"); err != nil {
		return nil, err
	}
	start := time.Now()
	// Refuse a busy network before a first run spends minutes on debootstrap;
	// checked again under the lock below.
	if err := l.checkFree(); err != nil {
		return nil, err
	}
	suites, err := l.suites()
	if err != nil {
		return nil, err
	}
	bases := map[string]string{}
	for _, suite := range suites {
		if bases[suite], err = l.ensureSuiteBase(ctx, suite); err != nil {
			return nil, err
		}
	}
	baseOf := func(host string) string {
		if s, ok := l.cfg.HostSuites[host]; ok {
			return bases[s]
		}
		return bases[suites[0]]
	}
	if err := l.raiseInotifyLimit(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.stateDir(), 0o700); err != nil {
		return nil, err
	}
	// One lab at a time changes the machine's network: two concurrent ups must
	// not both find a subnet free, and a down must not remove /run/netns under
	// an up.
	unlock, err := flock(filepath.Join(l.cfg.Root, "lab", ".lock"))
	if err != nil {
		return nil, err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	if err := l.checkFree(); err != nil {
		return nil, err
	}
	key, err := l.clientKey()
	if err != nil {
		return nil, err
	}

	st := &state{
		Prefix: l.cfg.Prefix, Net: l.net.String(), LabDir: l.cfg.Dir, Bridge: l.bridge(),
		StartedAt: start.UTC().Format(time.RFC3339), path: l.statePath(),
	}
	_, err = os.Stat("/run/netns")
	st.RunNetns = errors.Is(err, fs.ErrNotExist)
	if err := st.save(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Result, error) {
		if !locked {
			u, lerr := flock(filepath.Join(l.cfg.Root, "lab", ".lock"))
			if lerr != nil {
				return nil, errors.Join(err, lerr)
			}
			unlock, locked = u, true
		}
		l.logf("failed, undoing: %v", err)
		if derr := l.down(context.WithoutCancel(ctx), st); derr != nil {
			err = fmt.Errorf("%w (and undoing it: %v)", err, derr)
		}
		return nil, err
	}

	l.logf("bridge %s %s/%d", st.Bridge, bridgeAddr(l.net), l.net.Bits())
	for _, args := range [][]string{
		{"link", "add", st.Bridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", bridgeAddr(l.net), l.net.Bits()), "dev", st.Bridge},
		{"link", "set", st.Bridge, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return fail(err)
		}
	}

	if l.cfg.ServeMirror {
		if err := l.startMirror(st); err != nil {
			return fail(err)
		}
	}

	planned := l.plannedHosts()
	hostKeys := map[string]ssh.PublicKey{}
	for _, h := range planned {
		st.Hosts = append(st.Hosts, h)
		if err := st.save(); err != nil {
			return fail(err)
		}
		hk, err := l.createHost(ctx, baseOf(h.Name), h, planned, key.Public().(ed25519.PublicKey))
		if err != nil {
			return fail(fmt.Errorf("%s: %w", h.Name, err))
		}
		hostKeys[h.Name] = hk
		if err := l.startHost(st, len(st.Hosts)-1); err != nil {
			return fail(fmt.Errorf("%s: %w", h.Name, err))
		}
	}
	unlock()
	locked = false

	res, err := l.writeClientFiles(st, key, hostKeys)
	if err != nil {
		return fail(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return fail(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(st.Hosts))
	for i, h := range st.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			state, err := waitHost(ctx, h, signer, hostKeys[h.Name], l.cfg.BootTimeout)
			if err != nil {
				errs[i] = fmt.Errorf("%s (%s): %w", h.Name, h.Address, err)
				return
			}
			l.logf("%s %s: %s after %.1fs", h.Name, h.Address, state, time.Since(t0).Seconds())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		hint := "the console of each host is in " + l.stateDir() + "/<host>/console.log"
		for i, e := range errs {
			if e != nil {
				hint += "\n" + st.Hosts[i].Name + " console (last lines):\n" + tail(st.Hosts[i].consoleLog(), 15)
			}
		}
		return fail(usererr.New(err, hint))
	}
	l.logf("%d hosts up in %.1fs", len(st.Hosts), time.Since(start).Seconds())
	return res, nil
}

// checkFree refuses a lab that is already up, and a bridge, network namespace or subnet someone already uses.
func (l *Lab) checkFree() error {
	if s, err := loadState(l.statePath()); err != nil {
		return err
	} else if s != nil {
		return usererr.Errorf("stop it first: hardway lab down --prefix "+usererr.Quote(l.cfg.Prefix),
			"lab %q is already up (or crashed): state in %s", l.cfg.Prefix, l.statePath())
	}
	hint := "pick another with --net and --prefix, or stop the lab that uses it: hardway lab down --prefix " + usererr.Quote(l.cfg.Prefix)
	if linkExists(l.bridge()) {
		return usererr.Errorf(hint, "bridge %s already exists", l.bridge())
	}
	for _, h := range l.plannedHosts() {
		if _, err := os.Stat("/run/netns/" + h.Netns); err == nil {
			return usererr.Errorf(hint, "network namespace %s already exists", h.Netns)
		}
		if linkExists(h.Veth) {
			return usererr.Errorf(hint, "link %s already exists", h.Veth)
		}
	}
	why, err := subnetInUse(l.net)
	if err != nil {
		return err
	}
	if why != "" {
		return usererr.Errorf(hint, "%s is already in use on this machine: %s", l.net, why)
	}
	return nil
}

// clientKey loads the lab's SSH client key, creating it on the first run:
// keeping it across runs keeps a learner's ssh commands working.
func (l *Lab) clientKey() (ed25519.PrivateKey, error) {
	path := filepath.Join(l.cfg.Dir, "id_ed25519")
	if b, err := os.ReadFile(path); err == nil {
		k, err := ssh.ParseRawPrivateKey(b)
		if err != nil {
			return nil, usererr.Errorf("remove it to get a new one: rm "+usererr.Quote(path), "lab key %s: %w", path, err)
		}
		if ek, ok := k.(*ed25519.PrivateKey); ok {
			return *ek, nil
		}
		return nil, usererr.Errorf("remove it to get a new one: rm "+usererr.Quote(path), "lab key %s is not an ed25519 key", path)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := writeKeyPair(path, priv, "hardway-lab"); err != nil {
		return nil, err
	}
	return priv, nil
}

// createHost gives host h its overlay rootfs, identity and network.
func (l *Lab) createHost(ctx context.Context, base string, h hostState, all []hostState, client ed25519.PublicKey) (ssh.PublicKey, error) {
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", base, filepath.Join(h.Dir, "upper"), filepath.Join(h.Dir, "work"))
	if err := syscall.Mount("hardway-"+h.Machine, h.rootfs(), "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("mount overlay on %s: %w", h.rootfs(), err)
	}
	hostKey, err := writeIdentity(h, all, client)
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"netns", "add", h.Netns},
		{"link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
		{"link", "set", h.Veth, "master", l.bridge(), "up"},
		{"-n", h.Netns, "link", "set", "lo", "up"},
		{"-n", h.Netns, "addr", "add", fmt.Sprintf("%s/%d", h.Address, l.net.Bits()), "dev", "eth0"},
		{"-n", h.Netns, "link", "set", "eth0", "up"},
	}
	if h.worker() {
		if err := writeWorkerFiles(h); err != nil {
			return nil, err
		}
		for _, r := range workerNetnsRoutes {
			cmds = append(cmds, append([]string{"-n", h.Netns}, r...))
		}
	}
	for _, args := range cmds {
		if err := run(ctx, "ip", args...); err != nil {
			return nil, err
		}
	}
	return hostKey, nil
}

// writeIdentity makes the overlay a host of its own: hostname, machine-id,
// host key, /etc/hosts naming its peers, and the lab's client key for root.
func writeIdentity(h hostState, all []hostState, client ed25519.PublicKey) (ssh.PublicKey, error) {
	r := h.rootfs()
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
	for _, o := range all {
		fmt.Fprintf(&hosts, "%s %s\n", o.Address, o.Name)
	}
	mid := make([]byte, 16)
	if _, err := rand.Read(mid); err != nil {
		return nil, err
	}
	clientPub, err := ssh.NewPublicKey(client)
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data string
		mode os.FileMode
	}{
		{"etc/hostname", h.Name + "\n", 0o644},
		{"etc/hosts", hosts.String(), 0o644},
		{"etc/machine-id", fmt.Sprintf("%x\n", mid), 0o444},
		{"root/.ssh/authorized_keys", string(ssh.MarshalAuthorizedKey(clientPub)), 0o600},
	}
	for _, f := range files {
		p := filepath.Join(r, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		_ = os.Remove(p) // machine-id may be read-only in the lower layer's copy
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return nil, err
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(filepath.Join(r, "etc/ssh/ssh_host_ed25519_key"), priv, "root@"+h.Name); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(priv.Public())
}

// startHost starts host i's supervisor detached from us (own session, so it
// outlives `hardway lab up`) and records its PID.
func (l *Lab) startHost(st *state, i int) error {
	h := &st.Hosts[i]
	// A worker gets a cgroup of its own in every hierarchy, not only in the
	// ones its systemd uses: its cgroup namespace is rooted at the cgroup it
	// starts in, and without one of its own in cpu, cpuset, ... that root
	// is the machine's (or the caller's), so two workers would share one
	// /kubepods.slice there and each kubelet would manage the other's pods.
	cgs, err := cgroupDirs("hardway-"+h.Machine, h.worker())
	if err != nil {
		return err
	}
	h.Cgroups = cgs // recorded before they exist: Down tolerates missing ones
	if err := st.save(); err != nil {
		return err
	}
	for _, c := range cgs {
		if err := os.MkdirAll(c, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
		if err := inheritCpuset(c); err != nil {
			return err
		}
	}

	console, err := os.OpenFile(h.consoleLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer console.Close()
	args := []string{"-c", supervisor, "hardway-lab-supervisor", h.Dir,
		"systemd-nspawn", "--quiet", "--directory=" + h.rootfs(), "--machine=" + h.Machine,
		"--hostname=" + h.Name, "--boot", "--register=no", "--keep-unit",
		// CAP_NET_ADMIN: the host's own routes (pod routes) and, on a worker,
		// the CNI plugins that set up pod interfaces
		"--network-namespace-path=/run/netns/" + h.Netns, "--capability=CAP_NET_ADMIN",
		"--console=read-only", "--resolv-conf=off", "--timezone=off", "--link-journal=no"}
	if h.worker() {
		args = append(args, workerNspawnArgs(*h)...)
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = append(os.Environ(),
		"HARDWAY_LAB_CGROUPS="+strings.Join(cgs, " "),
		// with --network-namespace-path nspawn keeps /proc/sys/net read-only
		// (the bridge CNI plugin of a worker writes ip_forward there)
		"SYSTEMD_NSPAWN_API_VFS_WRITABLE=network")
	cmd.Dir = "/" // pin no directory of the caller's
	cmd.Stdout, cmd.Stderr = console, console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	closeInheritedOnExec()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start systemd-nspawn: %w", err)
	}
	// Reap it if it ends while we still run (tests), so it leaves no zombie.
	go func() { _ = cmd.Wait() }()
	ps, _ := readProcStat(cmd.Process.Pid)
	h.SupervisorPID, h.SupervisorStart = cmd.Process.Pid, ps.start // start time: PIDs get reused
	return st.save()
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
// Go opens its own files that way, but descriptors hardway inherited do not
// get it: a `flock FILE hardway lab up` passes its lock to us, and without
// this the long-lived host supervisors would hold that lock until the lab
// goes down.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// minInotifyInstances is enough for about 60 lab hosts. Without user
// namespaces every container's systemd counts against root's limit of
// inotify instances (128 by default, about 10 per host): at the limit, path
// units fail at boot and hosts come up degraded.
const minInotifyInstances = 1024

const inotifyInstances = "/proc/sys/fs/inotify/max_user_instances"

func (l *Lab) raiseInotifyLimit() error {
	b, err := os.ReadFile(inotifyInstances)
	if err != nil {
		return fmt.Errorf("read inotify limit: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n >= minInotifyInstances {
		return nil
	}
	if err := os.WriteFile(inotifyInstances, []byte(strconv.Itoa(minInotifyInstances)), 0o644); err != nil {
		return usererr.Errorf(fmt.Sprintf("raise it: sysctl fs.inotify.max_user_instances=%d", minInotifyInstances),
			"fs.inotify.max_user_instances is %d, too few for the lab hosts' systemd: %w", n, err)
	}
	l.logf("raised fs.inotify.max_user_instances from %d to %d (each host's systemd needs about 10)", n, minInotifyInstances)
	return nil
}
