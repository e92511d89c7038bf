package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A worker host runs containerd, runc, kubelet and kube-proxy inside
// systemd-nspawn. Each thing below was shown to be needed on a cgroup v1
// machine: take one away and a pod no longer starts. Controllers get none of
// them. Settings inside containerd, kubelet and kube-proxy that only a
// container host needs are not the lab's: the inventory's
// `containerHost: true` turns them on.

// ServiceCIDR is the Services' range the lab's inventory uses (the
// tutorial's, and the inventory's default). Workers get a route for it.
const ServiceCIDR = "10.32.0.0/24"

// workerNetnsRoutes are added in a worker's network namespace. The lab has no
// default route (nothing may leave the lab's addresses), so a node-originated
// connection to a ClusterIP has no route to start from and fails before
// kube-proxy's DNAT could rewrite it.
var workerNetnsRoutes = [][]string{{"route", "add", ServiceCIDR, "dev", "eth0"}}

// workerNspawnArgs are the systemd-nspawn options a worker adds to a
// controller's (which already has CAP_NET_ADMIN, which the CNI plugins need
// to set up pod interfaces, and writable network sysctls, which the bridge
// plugin needs to turn on ip_forward).
func workerNspawnArgs(h hostState) []string {
	return []string{
		// containerd's overlayfs snapshotter cannot mount an overlay whose
		// layers sit on the host's overlay root ("invalid argument": nested
		// overlayfs); a plain directory of the lab's disk works.
		"--bind=" + h.containerdDir() + ":/var/lib/containerd",
	}
}

// kubeletSysctls are the kernel tunables kubelet sets when it starts
// (setupKernelTunables) and fails without ("Failed to start ContainerManager
// ... read-only file system"). In the container /proc/sys is read-only and
// these are global to the machine: a lab must never change them. The worker
// shows kubelet the values it wants instead (sysctl-mask below).
var kubeletSysctls = []struct{ key, value string }{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// workerFile is a file the lab writes into a worker's overlay (not into the
// shared base, so controllers do not get it).
type workerFile struct {
	path string // in the host's rootfs
	mode os.FileMode
	data string // for a symlink: its target
	link bool
}

const labLibDir = "/usr/local/lib/hardway-lab"

func workerFiles() []workerFile {
	var mask strings.Builder
	mask.WriteString(`#!/bin/sh
# Written by hardway lab. kubelet sets these kernel tunables at start and exits
# when it cannot; /proc/sys is read-only here and they are global to the
# machine, never to be changed for a lab. Show kubelet the values it wants: a
# read-only bind of a file holding the value over each entry that differs.
# The mounts live in this container's mount namespace only.
set -eu
d=/run/hardway-lab/sysctl
mkdir -p $d
want() {
  [ -e "/proc/sys/$1" ] || return 0
  [ "$(cat "/proc/sys/$1")" = "$2" ] && return 0
  f=$d/$(echo "$1" | tr / _)
  echo "$2" > "$f"
  mount --bind -o ro "$f" "/proc/sys/$1"
}
`)
	for _, s := range kubeletSysctls {
		fmt.Fprintf(&mask, "want %s %s\n", s.key, s.value)
	}

	const unitHead = "[Unit]\nDescription=%s\nDefaultDependencies=no\nBefore=sysinit.target containerd.service kubelet.service\n" +
		"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=%s\n[Install]\nWantedBy=sysinit.target\n"
	return []workerFile{
		// systemd-nspawn mounts the cgroup v1 controller hierarchies read-only
		// whenever it runs without a user namespace; containerd and kubelet
		// create kubepods.slice in each ("mkdir /sys/fs/cgroup/cpuset/kubepods.slice:
		// read-only file system"). Each hierarchy shows only the worker's own
		// cgroups (its cgroup namespace is rooted at the ones the lab made).
		{path: labLibDir + "/cgroup-rw", mode: 0o755, data: `#!/bin/sh
# Written by hardway lab: make nspawn's read-only cgroup v1 mounts writable for
# containerd and kubelet (they show only this host's own cgroups).
set -eu
for d in /sys/fs/cgroup/*; do
  [ -L "$d" ] && continue
  mountpoint -q "$d" || continue
  mount -o remount,bind,rw "$d"
done
`},
		{path: "/etc/systemd/system/hardway-lab-cgroup-rw.service", mode: 0o644,
			data: fmt.Sprintf(unitHead, "hardway lab: writable cgroup v1 hierarchies for containerd and kubelet", labLibDir+"/cgroup-rw")},
		{path: "/etc/systemd/system/sysinit.target.wants/hardway-lab-cgroup-rw.service", link: true,
			data: "/etc/systemd/system/hardway-lab-cgroup-rw.service"},

		{path: labLibDir + "/sysctl-mask", mode: 0o755, data: mask.String()},
		{path: "/etc/systemd/system/hardway-lab-sysctl-mask.service", mode: 0o644,
			data: fmt.Sprintf(unitHead, "hardway lab: show kubelet the kernel tunables it wants (the machine's stay untouched)", labLibDir+"/sysctl-mask")},
		{path: "/etc/systemd/system/sysinit.target.wants/hardway-lab-sysctl-mask.service", link: true,
			data: "/etc/systemd/system/hardway-lab-sysctl-mask.service"},

		// kubelet's OOM watcher opens /dev/kmsg and kubelet exits without it;
		// nspawn gives a container none (and the machine's is not ours to
		// share). The console is a harmless stand-in (kind does the same).
		{path: "/etc/tmpfiles.d/hardway-lab-kmsg.conf", mode: 0o644,
			data: "# Written by hardway lab: kubelet opens /dev/kmsg, which a container lacks.\nL /dev/kmsg - - - - /dev/console\n"},
	}
}

// writeWorkerFiles writes workerFiles into the worker's rootfs r and makes
// its plain containerd directory.
func writeWorkerFiles(h hostState) error {
	r := h.rootfs()
	for _, f := range workerFiles() {
		p := filepath.Join(r, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		_ = os.Remove(p)
		var err error
		if f.link {
			err = os.Symlink(f.data, p)
		} else {
			err = os.WriteFile(p, []byte(f.data), f.mode)
		}
		if err != nil {
			return fmt.Errorf("worker file %s: %w", f.path, err)
		}
	}
	return os.MkdirAll(h.containerdDir(), 0o711)
}
