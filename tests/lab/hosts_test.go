package lab_test

import (
	"github.com/hardway/hardway/internal/mirrortest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRebootKeepsIdentityAndUnits: `systemctl reboot` inside a host restarts
// its container (exit code 133, the supervisor starts it again) with the same
// host key and machine-id, and a unit enabled before comes back.
func TestRebootKeepsIdentityAndUnits(t *testing.T) {
	t.Parallel()
	tl := startLab(t, "hwt3", "10.240.10", 1)
	const h = "controller-1"
	before := tl.mustSSH(t, h, "cat /etc/ssh/ssh_host_ed25519_key.pub /etc/machine-id")
	tl.mustSSH(t, h, `printf '[Unit]\nDescription=hardway reboot probe\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n' > /etc/systemd/system/hwt-probe.service &&
		systemctl daemon-reload && systemctl enable --now hwt-probe.service && touch /run/hwt-booted-before`)
	// The connection may drop before ssh sees an exit status: that is fine.
	_, _ = tl.ssh(t, h, "systemctl reboot")

	deadline := time.Now().Add(2 * time.Minute)
	for {
		// /run is a tmpfs of the container: the marker is gone once it booted again
		out, err := tl.ssh(t, h, "test -e /run/hwt-booted-before && echo old || systemctl is-system-running --wait")
		if err == nil && out != "old" {
			if out != "running" {
				t.Fatalf("after reboot: systemctl is-system-running = %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host did not come back from reboot in 2m (last: %q, %v); console:\n%s", out, err,
				tail(filepath.Join("/var/tmp/hardway/lab/hwt3", h, "console.log")))
		}
		time.Sleep(time.Second)
	}
	// ssh with StrictHostKeyChecking against the lab's known_hosts already
	// proves the host key; compare the files too, so the reason is clear.
	if after := tl.mustSSH(t, h, "cat /etc/ssh/ssh_host_ed25519_key.pub /etc/machine-id"); after != before {
		t.Errorf("identity changed across reboot:\nbefore %s\nafter  %s", before, after)
	}
	for cmd, want := range map[string]string{
		"systemctl is-enabled hwt-probe.service": "enabled",
		"systemctl is-active hwt-probe.service":  "active",
	} {
		if got, _ := tl.ssh(t, h, cmd); got != want {
			t.Errorf("%s = %q, want %q", cmd, got, want)
		}
	}
	if !strings.Contains(tail(filepath.Join("/var/tmp/hardway/lab/hwt3", h, "console.log")), "reboot") {
		t.Errorf("console.log does not show the supervisor's reboot")
	}
	st, err := tl.Status(t.Context())
	if err != nil || len(st.Hosts) != 1 || !st.Hosts[0].Running {
		t.Errorf("status after reboot = %+v, %v", st, err)
	}
}

// TestEtcdSmoke pushes the mirror's etcd to a lab host with plain scp (after
// its SHA256SUMS matched), runs it as a systemd unit and asks etcdctl on the
// host for its health: the mirror's binaries run on the lab's hosts.
func TestEtcdSmoke(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const version = mirrortest.Etcd
	bin := mirrortest.EtcdBinaries(t, "etcd", "etcdctl")

	tl := startLab(t, "hwt4", "10.240.11", 1)
	const h = "controller-1"
	scp := exec.CommandContext(t.Context(), "scp", "-F", tl.res.SSHConfig,
		filepath.Join(bin, "etcd"), filepath.Join(bin, "etcdctl"), h+":/usr/local/bin/")
	if out, err := scp.CombinedOutput(); err != nil {
		t.Fatalf("scp: %v: %s", err, out)
	}
	if got := tl.mustSSH(t, h, "etcd --version | head -1"); got != "etcd Version: "+strings.TrimPrefix(version, "v") {
		t.Errorf("etcd --version on the host = %q", got)
	}
	// Type=notify: systemd-run returns once etcd said it is ready.
	tl.mustSSH(t, h, "systemd-run --unit=etcd-smoke -p Type=notify -p TimeoutStartSec=60 "+
		"/usr/local/bin/etcd --name "+h+" --data-dir /var/lib/etcd-smoke "+
		"--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 "+
		"--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 "+
		"--initial-cluster "+h+"=http://127.0.0.1:2380")
	if got := tl.mustSSH(t, h, "systemctl is-active etcd-smoke"); got != "active" {
		t.Fatalf("etcd-smoke unit is %q", got)
	}
	out, err := tl.ssh(t, h, "etcdctl --endpoints=http://127.0.0.1:2379 endpoint health")
	if err != nil || !strings.Contains(out, "is healthy") {
		t.Fatalf("etcdctl endpoint health = %q, %v", out, err)
	}
	if got := tl.mustSSH(t, h, "etcdctl put /hw/smoke ok >/dev/null && etcdctl get --print-value-only /hw/smoke"); got != "ok" {
		t.Errorf("etcdctl put/get = %q, want ok", got)
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
