// Package lab_test runs `hardway lab` for real: containers booting systemd,
// network namespaces, a bridge, OpenSSH. It needs root and Linux; a missing
// tool fails the test. Each test uses its own prefix and /24 so it never
// touches a demo lab (hw, 10.240.0.0/24) or another test.
package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/pkg/lab"
)

func requireRoot(t *testing.T) { labtest.RequireRoot(t) }

type testLab struct {
	*lab.Lab
	cfg lab.Config
	res *lab.Result
}

// startLab brings a lab up and takes it down when the test ends, also when
// it fails.
func startLab(t *testing.T, prefix, net string, hosts int) *testLab {
	t.Helper()
	cfg := lab.Config{Dir: t.TempDir(), Prefix: prefix, Net: net, Hosts: hosts, Log: testLog{T: t}}
	l, res := labtest.Start(t, cfg)
	return &testLab{Lab: l, cfg: cfg, res: res}
}

// ssh runs cmd on host with plain OpenSSH, through the lab's ssh_config: it
// proves the key, known_hosts and config the lab writes work for a learner.
func (tl *testLab) ssh(t *testing.T, host, cmd string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	c := exec.CommandContext(ctx, "ssh", "-F", tl.res.SSHConfig, host, cmd)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("ssh %s %q: %w: %s", host, cmd, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func (tl *testLab) mustSSH(t *testing.T, host, cmd string) string {
	t.Helper()
	out, err := tl.ssh(t, host, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type testLog = labtest.Log

// leftovers lists everything of lab `prefix` still on the machine.
func leftovers(t *testing.T, prefix string) []string {
	t.Helper()
	var left []string
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], prefix+"-") {
			left = append(left, "link "+strings.TrimSuffix(f[1], ":"))
		}
	}
	out, err = exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, prefix+"-") {
			left = append(left, "netns "+line)
		}
	}
	stateDir := filepath.Join(lab.DefaultRoot, "lab", prefix)
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		// a mount at or from the state dir (an overlay names it in its options)
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(line, stateDir+"/") {
			left = append(left, "mount "+f[4])
		}
	}
	if _, err := os.Stat(stateDir); err == nil {
		left = append(left, "state dir "+stateDir)
	}
	// cgroups: hardway-<prefix>-* anywhere in any hierarchy (a worker has one in every hierarchy)
	for _, h := range hierarchyMounts(t) {
		_ = filepath.WalkDir(h, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), "hardway-"+prefix+"-") {
				left = append(left, "cgroup "+p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	// processes: any systemd-nspawn of this lab's machines, any supervisor of its hosts
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("--machine="+prefix+"-")) || bytes.Contains(b, []byte(stateDir+"/")) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return uniq(left)
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// TestUpDownTwice: a lab comes up with working SSH and peers that reach each
// other, refuses to come up twice, and `down` leaves nothing behind — twice,
// so a second round finds a clean machine.
func TestUpDownTwice(t *testing.T) {
	requireRoot(t)
	const prefix = "hwt1"
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("left from an earlier run (clean up with: hardway lab down --prefix %s):\n%s", prefix, strings.Join(left, "\n"))
	}
	_, err := os.Stat("/run/netns")
	runNetnsBefore := err == nil
	for round := 1; round <= 2; round++ {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			dir := t.TempDir()
			cfg := lab.Config{Dir: dir, Prefix: prefix, Net: "10.240.9", Hosts: 2, Log: testLog{T: t}}
			l, err := lab.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.Up(t.Context())
			if err != nil {
				_ = l.Down(context.Background())
				t.Fatalf("lab up: %v", err)
			}
			tl := &testLab{Lab: l, cfg: cfg, res: res}
			func() {
				defer func() {
					if err := l.Down(context.Background()); err != nil {
						t.Errorf("lab down: %v", err)
					}
				}()
				checkRunningLab(t, tl, dir)
				if _, err := l.Up(t.Context()); err == nil || !strings.Contains(err.Error(), "already up") {
					t.Errorf("second up: err = %v, want 'already up'", err)
				}
			}()
			if left := leftovers(t, prefix); len(left) > 0 {
				t.Errorf("after lab down, left behind:\n%s", strings.Join(left, "\n"))
			}
			for _, f := range []string{"inventory.yaml", "known_hosts", "ssh_config"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("lab down left %s", f)
				}
			}
			if _, err := os.Stat("/run/netns"); !runNetnsBefore && err == nil {
				if ns, _ := os.ReadDir("/run/netns"); len(ns) == 0 {
					t.Errorf("lab down left an empty /run/netns it created")
				}
			}
			if err := l.Down(context.Background()); err != nil {
				t.Errorf("second lab down (nothing to do): %v", err)
			}
		})
	}
}

func checkRunningLab(t *testing.T, tl *testLab, dir string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "id_ed25519"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("id_ed25519: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	kh, err := os.ReadFile(filepath.Join(dir, "known_hosts"))
	if err != nil || strings.Count(string(kh), "ssh-ed25519 ") != 2 {
		t.Errorf("known_hosts = %q, %v; want two ed25519 keys", kh, err)
	}
	inv, err := os.ReadFile(filepath.Join(dir, "inventory.yaml"))
	if err != nil || !strings.Contains(string(inv), "address: 10.240.9.12") {
		t.Errorf("inventory.yaml = %q, %v", inv, err)
	}
	ids := map[string]string{}
	for _, h := range tl.res.Hosts {
		if got := tl.mustSSH(t, h.Name, "systemctl is-system-running"); got != "running" {
			t.Errorf("%s: systemctl is-system-running = %q", h.Name, got)
		}
		if got := tl.mustSSH(t, h.Name, "hostname"); got != h.Name {
			t.Errorf("%s: hostname = %q", h.Name, got)
		}
		id := tl.mustSSH(t, h.Name, "cat /etc/machine-id; cat /etc/ssh/ssh_host_ed25519_key.pub")
		for other, oid := range ids {
			if oid == id {
				t.Errorf("%s and %s share machine-id and host key", h.Name, other)
			}
		}
		ids[h.Name] = id
		for _, p := range tl.res.Hosts {
			if _, err := tl.ssh(t, h.Name, "ping -c1 -W2 "+p.Name); err != nil {
				t.Errorf("%s cannot reach %s: %v", h.Name, p.Name, err)
			}
		}
		// the timers that would reach for the network are masked
		if got, _ := tl.ssh(t, h.Name, "systemctl is-enabled apt-daily.timer"); got != "masked" {
			t.Errorf("%s: apt-daily.timer is %q, want masked", h.Name, got)
		}
	}
	// The leftovers check must see a running lab, or its silence after down proves nothing.
	left := strings.Join(leftovers(t, tl.cfg.Prefix), "\n")
	for _, kind := range []string{"link " + tl.cfg.Prefix + "-br0", "netns ", "mount ", "cgroup ", "process ", "state dir "} {
		if !strings.Contains(left, kind) {
			t.Errorf("leftovers of a running lab show no %q:\n%s", kind, left)
		}
	}
	st, err := tl.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Up || len(st.Hosts) != 2 {
		t.Fatalf("status = %+v", st)
	}
	for _, h := range st.Hosts {
		if !h.Running || !h.SSH || h.Memory <= 0 {
			t.Errorf("status of %s = %+v; want running, ssh open, memory > 0", h.Name, h)
		}
		t.Logf("%s: %.1f MiB", h.Name, float64(h.Memory)/(1<<20))
	}
}

// TestRefusesBusyNetwork: a bridge or subnet already in use stops `lab up`
// before it creates anything.
func TestRefusesBusyNetwork(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name    string
		setup   [][]string // ip commands; the links they add are removed at the end
		links   []string
		net     string
		wantErr string
	}{
		{
			name:    "bridge exists",
			setup:   [][]string{{"link", "add", "hwt2-br0", "type", "bridge"}},
			links:   []string{"hwt2-br0"},
			net:     "10.240.12",
			wantErr: "bridge hwt2-br0 already exists",
		},
		{
			name:    "subnet has an address",
			setup:   [][]string{{"link", "add", "hwt2x", "type", "bridge"}, {"addr", "add", "10.240.17.5/24", "dev", "hwt2x"}},
			links:   []string{"hwt2x"},
			net:     "10.240.17",
			wantErr: "10.240.17.0/24 is already in use",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range tt.links {
				t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l).Run() })
			}
			for _, args := range tt.setup {
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					t.Fatalf("ip %v: %v: %s", args, err, out)
				}
			}
			l, err := lab.New(lab.Config{Dir: t.TempDir(), Prefix: "hwt2", Net: tt.net, Hosts: 1, Log: testLog{T: t}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Up(t.Context())
			if err == nil {
				_ = l.Down(context.Background())
				t.Fatal("lab up on a busy network succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			for _, x := range leftovers(t, "hwt2") {
				if !strings.HasPrefix(x, "link hwt2-br0") { // the test's own bridge
					t.Errorf("refused lab up left %s", x)
				}
			}
		})
	}
}

// TestBase: `hardway lab base` (Lab.Base) gives the rootfs every lab boots
// from, and a second call builds nothing (make test calls it ahead, in the
// background, and the labs then find it).
func TestBase(t *testing.T) {
	requireRoot(t)
	l, err := lab.New(lab.Config{Dir: t.TempDir(), Prefix: "hwt9", Log: testLog{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := l.Base(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "etc/hardway-lab-base")
	before, err := os.Stat(stamp)
	if err != nil {
		t.Fatalf("the base %s has no stamp: %v", dir, err)
	}
	for _, f := range []string{"usr/lib/systemd/systemd", "usr/sbin/sshd"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the base lacks %s: %v", f, err)
		}
	}
	again, err := l.Base(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(stamp)
	if err != nil {
		t.Fatal(err)
	}
	if again != dir || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the second Base rebuilt: %s (stamp %v) after %s (stamp %v)", again, after.ModTime(), dir, before.ModTime())
	}
}
