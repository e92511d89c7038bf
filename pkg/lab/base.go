package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/hardway/hardway/pkg/usererr"
)

// basePackages is what every lab host has: real systemd and OpenSSH (with the
// sftp subsystem hardway copies files with), ca-certificates for the control
// plane's binaries (they are static, they need nothing else), and a few tools
// a learner expects on a host. The second group is what containerd, kubelet
// and kube-proxy call on a worker: iptables and nftables (kube-proxy's two
// modes, the CNI portmap plugin), conntrack (kube-proxy flushes stale UDP
// entries), socat (kubectl port-forward), kmod (modprobe; kubelet and
// kube-proxy call it), util-linux and mount (mountpoint, nsenter, mount),
// ethtool (the bridge plugin's veths). They are small, so one base serves
// both roles.
var basePackages = []string{
	"systemd", "systemd-sysv", "dbus", "openssh-server", "openssh-sftp-server",
	"iproute2", "ca-certificates", "curl", "procps", "iputils-ping", "less",

	"iptables", "nftables", "conntrack", "socat", "kmod", "util-linux", "mount", "ethtool",

	// Installed, not enabled: a test turns it on to close ports (the host
	// step names and opens them). dpkg-dev's index of the .debs debootstrap
	// fetched is the hosts' one apt source: apt-get installs from it with
	// no network (the host step's hostPrep.packages: install).
	"ufw",
}

// baseRecipe names what prepareBase does; bump it when that changes.
const baseRecipe = "hardway-lab-base 3"

// baseStamp is written into a finished base. Its hash names the base's
// directory, so a base built from another package list or recipe is never
// used: the lab builds a new one beside it.
func baseStamp(suite string, packages []string) string {
	p := slices.Clone(packages)
	slices.Sort(p)
	return baseRecipe + "\nsuite: " + suite + "\npackages: " + strings.Join(p, ",") + "\n"
}

func baseKey(suite string, packages []string) string {
	sum := sha256.Sum256([]byte(baseStamp(suite, packages)))
	return suite + "-" + hex.EncodeToString(sum[:6])
}

// networkUnits would wake up inside a host on their own and try the network
// (or the disk); the lab hosts have no way out and should stay quiet.
var networkUnits = []string{
	"apt-daily.timer", "apt-daily-upgrade.timer", "apt-daily.service", "apt-daily-upgrade.service",
	"e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "man-db.timer",
	"systemd-timesyncd.service",
}

// Base builds the shared read-only lower layer every lab host boots from, if
// it is not built yet, and returns its directory. Up builds it on first use;
// calling Base first lets a script build it while other work runs (make test
// does, during lint and the mirror build: debootstrap mostly waits on the
// network and the disk).
func (l *Lab) Base(ctx context.Context) (string, error) {
	if err := preflight(); err != nil {
		return "", err
	}
	return l.ensureBase(ctx)
}

// source is the Debian mirror and suite of the lab's bases: the
// configured ones, else this machine's apt configuration's.
func (l *Lab) source() (aptSource, error) {
	src := aptSource{URI: l.cfg.DebianMirror, Suite: l.cfg.Suite}
	if src.URI == "" || src.Suite == "" {
		found, err := debianSource("")
		if err != nil {
			return src, usererr.New(err, "configure apt (/etc/apt/sources.list.d/debian.sources) or set the Debian mirror explicitly")
		}
		if src.URI == "" {
			src.URI = found.URI
		}
		if src.Suite == "" {
			src.Suite = found.Suite
		}
	}
	return src, nil
}

// DefaultSuite is the Debian suite the lab's hosts boot unless told
// otherwise: this machine's apt configuration's.
func DefaultSuite() (string, error) {
	src, err := debianSource("")
	return src.Suite, err
}

// suites are the suites of the lab's hosts: the default first, then each
// other one Config.HostSuites names.
func (l *Lab) suites() ([]string, error) {
	src, err := l.source()
	if err != nil {
		return nil, err
	}
	out := []string{src.Suite}
	for _, s := range l.cfg.HostSuites {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out[1:])
	return out, nil
}

// ensureBase debootstraps the shared read-only lower layer of the default
// suite once; later labs reuse it.
func (l *Lab) ensureBase(ctx context.Context) (string, error) {
	src, err := l.source()
	if err != nil {
		return "", err
	}
	return l.ensureSuiteBase(ctx, src.Suite)
}

// ensureSuiteBase is ensureBase for one suite. A lock keeps two concurrent
// `lab up`s from building it twice.
func (l *Lab) ensureSuiteBase(ctx context.Context, suite string) (string, error) {
	stamp := baseStamp(suite, basePackages)
	rootfs := filepath.Join(l.cfg.BaseDir, "rootfs-"+baseKey(suite, basePackages))
	if got, err := os.ReadFile(filepath.Join(rootfs, "etc/hardway-lab-base")); err == nil && string(got) == stamp {
		return rootfs, nil
	}
	if err := os.MkdirAll(l.cfg.BaseDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := flock(filepath.Join(l.cfg.BaseDir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if got, err := os.ReadFile(filepath.Join(rootfs, "etc/hardway-lab-base")); err == nil && string(got) == stamp {
		return rootfs, nil // built while we waited for the lock
	}
	if err := os.RemoveAll(rootfs); err != nil { // a half-built one
		return "", err
	}
	for _, tool := range []string{"debootstrap", "dpkg-scanpackages"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", usererr.Errorf("install it: apt-get install debootstrap dpkg-dev (or run hack/setup.sh)",
				"%s not found: the lab builds its Debian rootfs and its local package index with it", tool)
		}
	}
	src, err := l.source()
	if err != nil {
		return "", err
	}
	src.Suite = suite
	tmp := rootfs + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	logPath := filepath.Join(l.cfg.BaseDir, "debootstrap.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	l.logf("debootstrap %s into %s (first run only, about 2 minutes)", src.Suite, rootfs)
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase",
		"--include="+strings.Join(basePackages, ","), src.Suite, tmp, src.URI)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return "", usererr.Errorf("see "+logPath, "debootstrap %s from %s: %w", src.Suite, src.URI, err)
	}
	if err := prepareBase(ctx, tmp, stamp); err != nil {
		return "", fmt.Errorf("prepare lab base: %w", err)
	}
	if err := os.Rename(tmp, rootfs); err != nil {
		return "", err
	}
	l.removeOldBases(suite, rootfs)
	return rootfs, nil
}

// removeOldBases deletes the bases of suite with other package lists or
// recipes (and those of an older naming, without a suite) that no running
// lab uses as its lower layer (about 300 MB each); another suite's base
// stays. Called under the base lock, so no base is being built.
func (l *Lab) removeOldBases(suite, keep string) {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	old, _ := filepath.Glob(filepath.Join(l.cfg.BaseDir, "rootfs-*"))
	for _, d := range old {
		name := strings.TrimPrefix(filepath.Base(d), "rootfs-")
		s, _, named := strings.Cut(name, "-")
		if named && s != suite {
			continue
		}
		if d == keep || strings.Contains(string(mi), "lowerdir="+d+",") || strings.Contains(string(mi), "lowerdir="+d+" ") {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			l.logf("old lab base %s not removed: %v", d, err)
			continue
		}
		l.logf("removed old lab base %s", d)
	}
}

// prepareBase makes a fresh debootstrap usable as a shared lower layer: no
// identity of its own (each host gets its own host key and machine-id), sshd
// for keys only, nothing that tries the network by itself, multi-user boot.
func prepareBase(ctx context.Context, r, stamp string) error {
	keys, _ := filepath.Glob(filepath.Join(r, "etc/ssh/ssh_host_*"))
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/machine-id": "",
		"etc/ssh/sshd_config.d/10-hardway-lab.conf": "# hardway lab: one ed25519 host key per host, keys only\n" +
			"HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n" +
			"PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n",
		"etc/default/locale": "LANG=C.UTF-8\n",
	}
	for name, content := range files {
		p := filepath.Join(r, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	links := map[string]string{"etc/systemd/system/default.target": "/lib/systemd/system/multi-user.target"}
	for _, u := range networkUnits {
		links["etc/systemd/system/"+u] = "/dev/null"
	}
	for name, target := range links {
		p := filepath.Join(r, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	if err := localAptSource(ctx, r); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r, "etc/hardway-lab-base"), []byte(stamp), 0o644)
}

// localAptSource makes the .debs debootstrap left in the rootfs's apt cache
// its only apt source, with an index dpkg-scanpackages writes: a lab host
// has no way to a Debian mirror, and apt-get install of a package the base
// has (one a test removed) works from it, as on a real host.
func localAptSource(ctx context.Context, r string) error {
	const repo = "var/cache/apt/archives"
	cmd := exec.CommandContext(ctx, "dpkg-scanpackages", "--multiversion", ".")
	cmd.Dir = filepath.Join(r, repo)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	idx, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("dpkg-scanpackages: %w: %s", err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(r, repo, "Packages"), idx, 0o644); err != nil {
		return err
	}
	for _, f := range []string{"etc/apt/sources.list"} {
		if err := os.WriteFile(filepath.Join(r, f), []byte("# hardway lab: the base's own packages, no network\ndeb [trusted=yes] file:/"+repo+" ./\n"), 0o644); err != nil {
			return err
		}
	}
	srcs, _ := filepath.Glob(filepath.Join(r, "etc/apt/sources.list.d/*"))
	for _, f := range srcs {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	return nil
}

// flock takes an exclusive lock on path, waiting for it.
func flock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
