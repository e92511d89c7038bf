package lab_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/lab"
)

// runcNoKeyring is a test-only runc wrapper: nspawn's seccomp filter answers
// keyctl() with EPERM, and runc then fails to make the container's session
// keyring. containerd's CRI config says NoNewKeyring for a container host;
// ctr has no such option, so the wrapper adds runc's --no-new-keyring.
const runcNoKeyring = `#!/bin/sh
for a; do shift; set -- "$@" "$a"; case $a in create|run) set -- "$@" --no-new-keyring;; esac; done
exec /usr/local/bin/runc "$@"
`

// TestWorkerRunsContainer: a worker host runs a real container with the
// mirror's containerd and runc (the pause image, overlayfs snapshotter,
// cgroups in every hierarchy), and `lab down` removes all of it.
func TestWorkerRunsContainer(t *testing.T) {
	requireRoot(t)
	const prefix = "hwtc"
	bin := mirrortest.ContainerdBinaries(t, "containerd", "containerd-shim-runc-v2", "ctr")
	runc := mirrortest.RuncBinary(t)
	pause := mirrortest.ImageTarball(t, "pause-3.10.2.tar")

	cfg := lab.Config{Dir: t.TempDir(), Prefix: prefix, Net: "10.240.5", Hosts: 1, Workers: 1, Log: testLog{T: t}}
	l, res := labtest.Start(t, cfg)
	tl := &testLab{Lab: l, cfg: cfg, res: res}
	const w = "worker-1"

	tl.mustSSH(t, w, "mkdir -p /root/hw")
	files := []string{filepath.Join(bin, "containerd"), filepath.Join(bin, "containerd-shim-runc-v2"), filepath.Join(bin, "ctr"), runc, pause}
	scp := exec.CommandContext(t.Context(), "scp", append(append([]string{"-F", res.SSHConfig}, files...), w+":/root/hw/")...)
	if out, err := scp.CombinedOutput(); err != nil {
		t.Fatalf("scp: %v: %s", err, out)
	}
	tl.mustSSH(t, w, `set -e
cd /root/hw
install -m 0755 containerd containerd-shim-runc-v2 ctr /usr/local/bin/
install -m 0755 `+filepath.Base(runc)+` /usr/local/bin/runc
cat > /usr/local/bin/runc-no-keyring <<'EOF'
`+runcNoKeyring+`EOF
chmod 0755 /usr/local/bin/runc-no-keyring
systemd-run --unit=hwtc-containerd -p Type=notify -p Delegate=yes -p KillMode=process -p TimeoutStartSec=60 /usr/local/bin/containerd
ctr -n hwtc images import `+filepath.Base(pause)+` >/dev/null
ctr -n hwtc run -d --runc-binary /usr/local/bin/runc-no-keyring `+mirrortest.PauseImage+` probe`)

	out, err := tl.ssh(t, w, "ctr -n hwtc tasks ls")
	if err != nil || !strings.Contains(out, "RUNNING") {
		t.Fatalf("the pause container does not run: %q, %v; containerd:\n%s", out, err,
			tl.mustSSH(t, w, "journalctl -u hwtc-containerd --no-pager | tail -20"))
	}
	// Its layers are overlay mounts on the plain /var/lib/containerd, and its
	// cgroups sit below the worker's own in every hierarchy.
	probe := probe(t, tl, w, `pid=$(ctr -n hwtc tasks ls | awk '$1=="probe"{print $2}')
echo overlays=$(grep -c ' /run/containerd/io.containerd.runtime.v2.task/hwtc/probe/rootfs .* - overlay ' /proc/self/mountinfo)
echo cgroups=$(grep -c ':/hwtc/probe$' /proc/$pid/cgroup)
echo comm=$(cat /proc/$pid/comm)`)
	t.Logf("pause container: %v", probe)
	if probe["overlays"] != "1" || probe["comm"] != "pause" {
		t.Errorf("container: %v; want its rootfs on an overlay, running pause", probe)
	}
	// every v1 hierarchy at least (runc may leave the empty unified one alone)
	if n, err := strconv.Atoi(probe["cgroups"]); err != nil || n < len(hierarchyMounts(t))-1 {
		t.Errorf("the container's cgroups: in %q hierarchies, want %d or more", probe["cgroups"], len(hierarchyMounts(t))-1)
	}

	if err := l.Down(context.Background()); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Errorf("after lab down, left behind:\n%s", strings.Join(left, "\n"))
	}
}
