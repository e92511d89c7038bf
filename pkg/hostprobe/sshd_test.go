package hostprobe_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/hostprobe"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/sshdtest"
	"github.com/hardway/hardway/pkg/usererr"
)

// sshd is a real OpenSSH sshd on loopback with a key authorized for a uid-0
// account: the probe reads this machine through it.
func sshd(t *testing.T) (remote.Config, *sshdtest.Server) {
	t.Helper()
	srv := sshdtest.Start(t, sshdtest.Options{})
	dir := t.TempDir()
	key, pub := sshdtest.ClientKey(t, dir)
	root := sshdtest.AddRootAlias(t, srv.Dir)
	srv.Authorize(t, root.Name, pub)
	return remote.Config{
		Name: srv.Host, Address: srv.Host, Port: srv.Port, User: root.Name,
		IdentityFiles: []string{key}, NoAgent: true, KnownHostsFile: filepath.Join(dir, "known_hosts"),
		ConnectTimeout: 5 * time.Second, Retries: -1,
	}, srv
}

func TestProbeRealSSHD(t *testing.T) {
	sshdtest.RequireRoot(t)
	cfg, srv := sshd(t)
	if err := os.WriteFile(cfg.KnownHostsFile, []byte(srv.KnownHostsLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var done []int
	facts, err := hostprobe.ProbeAll(context.Background(), []remote.Config{cfg}, hostprobe.Options{
		Done: func(i int, _ hostprobe.Facts, err error) {
			if err != nil {
				t.Errorf("host %d: %v", i, err)
			}
			done = append(done, i)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 {
		t.Fatalf("progress calls %v", done)
	}
	f := facts[0]
	t.Logf("%+v", f)

	// The facts are this machine's.
	if want := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]; f.Arch != want {
		t.Errorf("arch %q (uname -m %q), want %q", f.Arch, f.Machine, want)
	}
	host, _ := os.Hostname()
	if short, _, _ := strings.Cut(host, "."); f.Hostname != short {
		t.Errorf("hostname %q, want %q", f.Hostname, short)
	}
	osr, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(osr), "\n") {
		if v, ok := strings.CutPrefix(l, "ID="); ok && strings.Trim(v, `"`) != f.OS.ID {
			t.Errorf("os-release ID %q, want %s", f.OS.ID, v)
		}
	}
	if f.ReachedAt != "127.0.0.1" {
		t.Errorf("reached at %q, want the loopback address the test dialled", f.ReachedAt)
	}
	loopback := false
	for _, a := range f.Addresses {
		loopback = loopback || a.Prefix.String() == "127.0.0.1/8"
	}
	if !loopback {
		t.Errorf("addresses %v lack 127.0.0.1/8", f.Addresses)
	}
	if f.CPUs != runtime.NumCPU() {
		t.Errorf("cpus %d, want %d", f.CPUs, runtime.NumCPU())
	}
	if f.MemoryKiB <= 0 {
		t.Errorf("memory %d KiB", f.MemoryKiB)
	}
	// The container answer is systemd-detect-virt's here, whatever it is
	// (none without a container; nothing when it is not installed).
	out, _ := exec.Command("systemd-detect-virt", "--container").Output()
	if want := strings.TrimSpace(string(out)); f.Container != strings.TrimPrefix(want, "none") {
		t.Errorf("container %q, systemd-detect-virt says %q", f.Container, want)
	}
}

func TestProbeRefusesUnknownHostKey(t *testing.T) {
	sshdtest.RequireRoot(t)
	cfg, _ := sshd(t)
	ran := false
	_, err := hostprobe.ProbeAll(context.Background(), []remote.Config{cfg}, hostprobe.Options{
		Done: func(int, hostprobe.Facts, error) { ran = true },
	})
	if !errors.Is(err, remote.ErrHostKeyUnknown) {
		t.Fatalf("err %v, want the host key refused", err)
	}
	if h := usererr.HintOf(err); !strings.Contains(h, "--accept-new-host-keys") {
		t.Errorf("hint %q", h)
	}
	if !ran {
		t.Error("no progress for the failed host")
	}
	if _, err := os.Stat(cfg.KnownHostsFile); !os.IsNotExist(err) {
		t.Errorf("known_hosts written: %v", err)
	}
}
