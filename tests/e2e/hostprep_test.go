package e2e

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/lab"
	"github.com/hardway/hardway/pkg/verify"
)

// otherSuite is the Debian release the suite's mixed cluster runs on one
// worker: not this machine's (the other hosts').
func otherSuite(t *testing.T) string {
	t.Helper()
	s, err := lab.DefaultSuite()
	if err != nil {
		t.Fatal(err)
	}
	if s == "trixie" {
		return "bookworm"
	}
	return "trixie"
}

// The host step on a real systemd host (a lab worker): stripped of its
// sysctls, its boot files, a package, its resolv.conf and its firewall's
// ports, it is named by preflight, the host step and verify, each with its
// fix; up with hostPrep install/open fixes all of it, the next up changes
// nothing, and pods still reach each other across the firewall.
func (e *workersEnv) hostPrepScenarios(t *testing.T) {
	const w = "worker-2"
	t.Run("the mixed cluster: worker-2 runs another Debian release, and verify names each host's", func(t *testing.T) {
		e.t = t
		want := map[string]string{"bookworm": "Debian 12", "trixie": "Debian 13"}[otherSuite(t)]
		r := e.verify()
		found := false
		for _, x := range r.Results {
			if x.Check == "host/prep" && x.Host == w && x.Status == verify.Pass {
				found = strings.HasPrefix(x.Message, want+":")
			}
		}
		if !found {
			t.Fatalf("verify has no host/prep OK for %s naming %s:\n%v", w, want, r.Results)
		}
	})

	t.Run("a stripped worker: up --dry-run names each fix, up makes them, the next up says no changes", func(t *testing.T) {
		e.t = t
		strip := `set -e
sysctl -qw net.ipv4.ip_forward=0
rm -f /etc/sysctl.d/99-hardway-kubernetes.conf /etc/modules-load.d/hardway-kubernetes.conf
DEBIAN_FRONTEND=noninteractive apt-get remove -y -q conntrack >/dev/null
mkdir -p /run/systemd/resolve && cp /etc/resolv.conf /run/systemd/resolve/resolv.conf
printf 'nameserver 127.0.0.53\noptions edns0 trust-ad\n' > /etc/resolv.conf
ufw allow 22/tcp >/dev/null && ufw --force enable >/dev/null
ufw status verbose`
		if out, err := e.ssh(w, strip); err != nil {
			t.Fatalf("strip %s: %v\n%s", w, err, out)
		}
		t.Cleanup(func() { _, _ = e.ssh(w, "ufw --force disable; ufw --force reset") })

		// hostPrep check (the default): the firewall stops up, with the
		// commands; conntrack is a warning.
		code, out, errs := e.hardway("up", "--dry-run")
		for _, want := range []string{"ufw closes 10250/tcp (kubelet secure), 10256/tcp (kube-proxy healthz), forwarded pod traffic 10.200.0.0/16",
			"ufw allow 10250/tcp comment 'hardway: kubelet secure'", "or set hostPrep.firewall: open", "conntrack not found (package conntrack)"} {
			if code == 0 || !strings.Contains(out+errs, want) {
				t.Errorf("up --dry-run with hostPrep check: exit %d, lacks %q:\n%s\n%s", code, want, out, errs)
			}
		}
		r := e.verify()
		var f []string
		for _, x := range r.Results {
			if x.Check == "host/prep" && x.Status == verify.Fail {
				f = append(f, x.Message+" (hint: "+x.Hint+")")
			}
		}
		for _, want := range []string{"set net.ipv4.ip_forward = 1, now 0", "link /var/lib/kubelet/resolv.conf to /run/systemd/resolve/resolv.conf", "ufw closes 10250/tcp"} {
			if !strings.Contains(strings.Join(f, "\n"), want) {
				t.Errorf("verify host/prep lacks %q:\n%s", want, strings.Join(f, "\n"))
			}
		}

		orig, err := os.ReadFile(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(e.inv, orig, 0o644) })
		if err := os.WriteFile(e.inv, append(append([]byte{}, orig...), "hostPrep:\n  packages: install\n  firewall: open\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		dry := e.mustUp("--dry-run")
		for _, want := range []string{
			"set net.ipv4.ip_forward = 1, now 0",
			"install conntrack (apt)",
			"open in ufw: 10250/tcp (kubelet secure), 10256/tcp (kube-proxy healthz), forwarded pod traffic 10.200.0.0/16",
			"link /var/lib/kubelet/resolv.conf to /run/systemd/resolve/resolv.conf",
			"/etc/sysctl.d/99-hardway-kubernetes.conf", "/etc/modules-load.d/hardway-kubernetes.conf",
		} {
			if !strings.Contains(dry, want) {
				t.Errorf("up --dry-run lacks %q:\n%s", want, dry)
			}
		}
		if out, _ := e.ssh(w, "sysctl -n net.ipv4.ip_forward; command -v conntrack || echo none"); !strings.Contains(out, "0\nnone") {
			t.Fatalf("the dry run changed the host: %q", out)
		}
		up := e.mustUp()
		if strings.Contains(up, "no changes") {
			t.Fatalf("up changed nothing:\n%s", up)
		}
		out2, err := e.ssh(w, "sysctl -n net.ipv4.ip_forward; command -v conntrack; readlink /var/lib/kubelet/resolv.conf; ufw status | grep -c 10250")
		if err != nil || out2 != "1\n/usr/sbin/conntrack\n/run/systemd/resolve/resolv.conf\n2\n" {
			t.Errorf("after up: %v %q", err, out2)
		}
		if again := e.mustUp(); !strings.Contains(again, "no changes") {
			t.Fatalf("second up:\n%s", again)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up, ufw on:\n  %s", strings.Join(f, "\n  "))
		}
		// Pods across the firewall: smoke's cross-node traffic and DNS.
		if code, out, errs := e.hardway("smoke"); code != 0 {
			t.Fatalf("smoke with ufw on %s: exit %d\n%s\n%s", w, code, out, errs)
		}
	})
}

// `hardway init --hosts` against the lab's own hosts, with --like the lab's
// inventory for its mirrors: the inventory it writes describes the running
// cluster, so up with it changes nothing and verify passes.
func (e *workersEnv) initScenarios(t *testing.T) {
	t.Run("init --hosts on the lab's hosts writes an inventory with which up says no changes and verify passes", func(t *testing.T) {
		e.t = t
		dir := filepath.Dir(e.inv)
		var hosts []string
		for _, h := range append(append([]lab.Host{}, e.res.Hosts...), e.res.Workers...) {
			hosts = append(hosts, "root@"+h.Address)
		}
		// Beside the lab's inventory: the state directory and the lock
		// are the ones next to the inventory file.
		out := filepath.Join(dir, "init.yaml")
		code, stdout, stderr := e.hardway("init", "--hosts", strings.Join(hosts, ","), "--like", e.inv,
			"--identity-file", e.res.Identity, "--known-hosts", e.res.KnownHosts, out)
		if code != 0 {
			t.Fatalf("init: exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, want := range []string{"guess:", "containerHost"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("init's guesses lack %q:\n%s", want, stderr)
			}
		}
		orig := e.inv
		e.inv = out
		defer func() { e.inv = orig }()
		if up := e.mustUp(); !strings.Contains(up, "no changes") {
			b, _ := os.ReadFile(out)
			t.Fatalf("up with init's inventory changed the cluster:\n%s\n--- init.yaml\n%s", up, b)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify with init's inventory:\n  %s", strings.Join(f, "\n  "))
		}
	})
}

// `hardway reset` on a real systemd host (a lab worker): what up installed
// is gone, the state directory is untouched, and the next up puts the
// worker back, Ready, with verify passing.
func (e *workersEnv) resetScenarios(t *testing.T) {
	const w = "worker-2"
	t.Run("reset --host worker-2 removes what up installed, leaves the state directory; up puts the worker back", func(t *testing.T) {
		e.t = t
		st := filepath.Join(filepath.Dir(e.inv), ".hardway")
		before := dirDigest(t, st)
		// A pipe without --yes is refused, before any host is touched.
		if code, out, errs := e.hardway("reset", "--host", w); code != 2 || !strings.Contains(out+errs, "--yes") {
			t.Fatalf("reset on a pipe without --yes: exit %d\n%s\n%s", code, out, errs)
		}
		code, out, errs := e.hardway("reset", "--host", w, "--yes")
		if code != 0 || !strings.Contains(out, "the state directory") || !strings.Contains(out, "is untouched") {
			t.Fatalf("reset: exit %d\n%s\n%s", code, out, errs)
		}
		left, err := e.ssh(w, `for u in containerd kubelet kube-proxy hardway-pod-routes hardway-apiserver-lb; do systemctl is-active --quiet $u && echo "active $u"; [ -e /etc/systemd/system/$u.service ] && echo "unit $u"; done
for p in /usr/local/bin/kubelet /usr/local/bin/containerd /var/lib/kubelet /etc/cni/net.d/10-bridge.conflist /etc/sysctl.d/99-hardway-kubernetes.conf /var/lib/hardway; do [ -e $p ] && echo "left $p"; done
ip link show cni0 >/dev/null 2>&1 && echo "left cni0"; ip route show proto 70 | sed 's/^/route /'; true`)
		if err != nil || strings.TrimSpace(left) != "" {
			t.Fatalf("after reset, %s still has: %v\n%s", w, err, left)
		}
		if after := dirDigest(t, st); after != before {
			t.Fatalf("reset changed the state directory %s", st)
		}
		if again, _, _ := e.hardway("reset", "--host", w, "--yes", "--dry-run"); again != 0 {
			t.Fatalf("reset --dry-run after reset: exit %d", again)
		}
		e.mustUp()
		deadline := time.Now().Add(3 * time.Minute)
		for !e.nodeReady(w) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not Ready after up", w)
			}
			time.Sleep(2 * time.Second)
		}
		// The worker's CoreDNS pods start again from scratch (reset removed
		// them and their images): verify passes once they are Ready.
		for {
			f := failures(e.verify())
			if len(f) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("verify after reset and up:\n  %s", strings.Join(f, "\n  "))
			}
			time.Sleep(3 * time.Second)
		}
	})
}

// dirDigest is every file's path, mode and content under dir.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", p, fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
