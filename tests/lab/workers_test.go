package lab_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/lab"
)

// The machine's global tunables a worker shows kubelet other values of;
// they must stay what they are.
var maskedSysctls = []struct{ path, want string }{
	{"/proc/sys/vm/overcommit_memory", "1"},
	{"/proc/sys/kernel/panic", "10"},
	{"/proc/sys/kernel/panic_on_oops", "1"},
}

func machineSysctls(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, s := range maskedSysctls {
		v, err := os.ReadFile(s.path)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.TrimSpace(string(v)) + " ")
	}
	return strings.TrimSpace(b.String())
}

// TestWorkers: a lab with one controller and two workers. Each worker has
// what containerd and kubelet need (and the controller none of it); `down`
// leaves nothing behind, also what a container runtime made inside a worker
// (nested cgroups in every hierarchy, mounts), and a second `down` is a no-op.
func TestWorkers(t *testing.T) {
	requireRoot(t)
	const prefix = "hwtw"
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("left from an earlier run (clean up with: hardway lab down --prefix %s):\n%s", prefix, strings.Join(left, "\n"))
	}
	sysctlsBefore := machineSysctls(t)
	dir := t.TempDir()
	cfg := lab.Config{Dir: dir, Prefix: prefix, Net: "10.240.3", Hosts: 1, Workers: 2, Log: testLog{T: t}}
	l, err := lab.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Down(context.Background())
		// A failed run must not leave the test's cgroups on the machine.
		for _, d := range markerCgroups(t) {
			_ = exec.Command("find", d, "-depth", "-type", "d", "-exec", "rmdir", "{}", ";").Run()
		}
	})
	res, err := l.Up(t.Context())
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	tl := &testLab{Lab: l, cfg: cfg, res: res}

	if len(res.Hosts) != 1 || len(res.Workers) != 2 || res.Workers[1].Name != "worker-2" || res.Workers[1].Address != "10.240.3.22" {
		t.Fatalf("hosts %+v, workers %+v", res.Hosts, res.Workers)
	}
	inv, err := os.ReadFile(res.Inventory)
	if err != nil || !strings.Contains(string(inv), "workers:\n  - name: worker-1\n    address: 10.240.3.21\n    containerHost: true\n") {
		t.Errorf("inventory.yaml = %q, %v", inv, err)
	}
	st, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, h := range st.Hosts {
		roles[h.Name] = h.Role
		if !h.Running || !h.SSH || h.Memory <= 0 {
			t.Errorf("status of %s = %+v", h.Name, h)
		}
		t.Logf("%s (%s): %.1f MiB idle", h.Name, h.Role, float64(h.Memory)/(1<<20))
	}
	if roles["worker-2"] != lab.RoleWorker || roles["controller-1"] != lab.RoleController {
		t.Errorf("status roles = %v", roles)
	}

	for _, w := range res.Workers {
		checkWorker(t, tl, w.Name)
	}
	checkController(t, tl, "controller-1", sysctlsBefore)
	// Workers reach each other and the controller by name.
	if _, err := tl.ssh(t, "worker-1", "ping -c1 -W2 worker-2 && ping -c1 -W2 controller-1"); err != nil {
		t.Error(err)
	}

	// What containerd and kubelet leave in a worker: cgroups below its own
	// in every hierarchy, and mounts in its /var/lib/containerd.
	tl.mustSSH(t, "worker-1", `set -e
for d in /sys/fs/cgroup/*; do [ -L "$d" ] || mkdir -p "$d/kubepods-hwtw.slice/kubepods-hwtw-besteffort.slice/pod1"; done
mkdir -p /var/lib/containerd/io.containerd.runtime.v2.task/x
mount -t tmpfs hwtw-probe /var/lib/containerd/io.containerd.runtime.v2.task/x
sleep infinity </dev/null >/dev/null 2>&1 &
echo $! > /sys/fs/cgroup/pids/kubepods-hwtw.slice/kubepods-hwtw-besteffort.slice/pod1/cgroup.procs`)

	// The leftovers check must see all of it while the lab runs, or its
	// silence after down proves nothing.
	left := strings.Join(leftovers(t, prefix), "\n")
	for _, h := range hierarchyMounts(t) {
		found := false
		for _, line := range strings.Split(left, "\n") {
			found = found || strings.HasPrefix(line, "cgroup "+h+"/") && strings.HasSuffix(line, "/hardway-"+prefix+"-worker-1")
		}
		if !found {
			t.Errorf("leftovers of a running lab show no worker cgroup in %s:\n%s", h, left)
		}
	}
	for _, kind := range []string{"link " + prefix + "-w2-v", "netns " + prefix + "-worker-2", "mount ", "process "} {
		if !strings.Contains(left, kind) {
			t.Errorf("leftovers of a running lab show no %q:\n%s", kind, left)
		}
	}

	for round := 1; round <= 2; round++ {
		if err := l.Down(t.Context()); err != nil {
			t.Fatalf("lab down #%d: %v", round, err)
		}
		if left := leftovers(t, prefix); len(left) > 0 {
			t.Errorf("after lab down #%d, left behind:\n%s", round, strings.Join(left, "\n"))
		}
	}
	// Nothing the workers made escaped their own cgroups (a worker whose
	// hierarchy were the machine's would have made them there).
	if m := markerCgroups(t); len(m) > 0 {
		t.Errorf("cgroups made inside the workers are left on the machine:\n%s", strings.Join(m, "\n"))
	}
	if after := machineSysctls(t); after != sysctlsBefore {
		t.Errorf("the machine's vm.overcommit_memory, kernel.panic, kernel.panic_on_oops changed: %s -> %s", sysctlsBefore, after)
	}
}

// probe runs script on host h, one ssh for many facts: every line of its
// output is key=value.
func probe(t *testing.T, tl *testLab, h, script string) map[string]string {
	t.Helper()
	out, err := tl.ssh(t, h, script)
	if err != nil {
		t.Fatalf("%s: %v", h, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	return got
}

// privileges asks a host about each thing a worker gets. The own-cgroup
// markers stay: `lab down` must remove them with the worker's cgroups.
const privileges = `
echo ipforward=$(echo 1 2>/dev/null > /proc/sys/net/ipv4/ip_forward && cat /proc/sys/net/ipv4/ip_forward)
echo kmsg=$(test -c /dev/kmsg && readlink /dev/kmsg)
n=0; for d in /sys/fs/cgroup/*; do [ -L "$d" ] && continue; mkdir "$d/hwtw-x" 2>/dev/null && rmdir "$d/hwtw-x" && n=$((n+1)); done
echo writablecgroups=$n
echo cpus=$(cat /sys/fs/cgroup/cpuset/cpuset.cpus)
mkdir /sys/fs/cgroup/cpuset/hwtw-own /sys/fs/cgroup/memory/hwtw-own 2>/dev/null
echo sysctls=$(cat /proc/sys/vm/overcommit_memory /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops)
echo fs=$(stat -f -c %T / /var/lib/containerd)
mountpoint -q /var/lib/containerd && echo containerdmount=yes
echo routes=$(ip -4 route show | tr '\n' ';')
echo tools=$(command -v iptables nft conntrack socat modprobe nsenter mountpoint | wc -l)
`

// checkWorker proves, from inside worker h, each thing a worker gets.
func checkWorker(t *testing.T, tl *testLab, h string) {
	t.Helper()
	p := probe(t, tl, h, privileges)
	want := map[string]string{
		"ipforward":       "1",            // the bridge CNI plugin turns on forwarding
		"kmsg":            "/dev/console", // kubelet opens /dev/kmsg
		"writablecgroups": fmt.Sprint(len(hierarchyMounts(t))),
		"sysctls":         "1 10 1", // kubelet's tunables, shown through read-only binds
		"containerdmount": "yes",
		"tools":           "7", // what kube-proxy, kubelet and the CNI plugins call
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s: %s = %q, want %q", h, k, p[k], v)
		}
	}
	if p["cpus"] == "" {
		t.Errorf("%s: its cpuset has no CPUs", h)
	}
	// containerd's overlayfs snapshotter needs a /var/lib/containerd that is not on an overlay.
	if f := strings.Fields(p["fs"]); len(f) != 2 || f[0] != "overlayfs" || f[1] == "overlayfs" {
		t.Errorf("%s: filesystems of / and /var/lib/containerd = %q; want overlayfs and a plain one", h, p["fs"])
	}
	// A route for the Services' range, and still no way out.
	if r := p["routes"]; !strings.Contains(r, lab.ServiceCIDR+" dev eth0") || strings.Contains(r, "default") {
		t.Errorf("%s: routes %q; want %s dev eth0 and no default", h, r, lab.ServiceCIDR)
	}
	// Each worker's hierarchies are rooted at its own cgroup: two workers'
	// kubelets never share a kubepods.slice.
	for _, ctrl := range []string{"cpuset", "memory"} {
		p := filepath.Join("/sys/fs/cgroup", ctrl, ownCgroup(t, ctrl), "hardway-hwtw-"+h, "hwtw-own")
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: its /sys/fs/cgroup/%s/hwtw-own is not %s on the machine: %v", h, ctrl, p, err)
		}
	}
}

// checkController proves that a controller has none of a worker's own
// privileges (every lab host has CAP_NET_ADMIN and writable network sysctls).
func checkController(t *testing.T, tl *testLab, h, machineSysctls string) {
	t.Helper()
	p := probe(t, tl, h, privileges)
	for k, bad := range map[string]string{"kmsg": "/dev/console", "writablecgroups": fmt.Sprint(len(hierarchyMounts(t))), "containerdmount": "yes"} {
		if p[k] == bad {
			t.Errorf("%s: %s = %q, as on a worker", h, k, p[k])
		}
	}
	if p["sysctls"] != machineSysctls {
		t.Errorf("%s shows tunables %q, the machine has %s", h, p["sysctls"], machineSysctls)
	}
	if strings.Contains(p["routes"], lab.ServiceCIDR) {
		t.Errorf("%s has a route for the Services: %q", h, p["routes"])
	}
	// its cgroups below the lab's, in cpuset, are the machine's: none of its own
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/cpuset", ownCgroup(t, "cpuset"), "hardway-hwtw-"+h)); err == nil {
		t.Errorf("%s has a cpuset cgroup of its own", h)
	}
}

// hierarchyMounts are the machine's cgroup hierarchies (v1 and v2).
func hierarchyMounts(t *testing.T) []string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 0 && (g[0] == "cgroup" || g[0] == "cgroup2") {
			out = append(out, f[4])
		}
	}
	return out
}

// ownCgroup is this process's cgroup in the v1 hierarchy of controller ctrl:
// the lab makes its hosts' cgroups below it.
func ownCgroup(t *testing.T, ctrl string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == ctrl {
			return f[2]
		}
	}
	t.Fatalf("not in a %s cgroup", ctrl)
	return ""
}

// markerCgroups finds, in every hierarchy of the machine, the cgroups this
// test makes inside a worker (kubepods-hwtw.slice, hwtw-own).
func markerCgroups(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, h := range hierarchyMounts(t) {
		_ = filepath.WalkDir(h, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && (d.Name() == "kubepods-hwtw.slice" || d.Name() == "hwtw-own") {
				out = append(out, p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}
