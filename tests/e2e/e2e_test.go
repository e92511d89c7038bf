// Package e2e runs `hardway up` and `hardway verify` for real: three lab
// hosts (systemd-nspawn containers booting systemd, with OpenSSH), the real
// etcd and Kubernetes binaries from the release mirror built from source.
// It needs root and the mirror (make mirror); a missing prerequisite fails.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/cli"
	"github.com/hardway/hardway/pkg/lab"
	"github.com/hardway/hardway/pkg/verify"
)

type env struct {
	t        *testing.T
	inv      string
	cacheDir string
	res      *lab.Result
	mirror   string
	lab      *lab.Lab // to replace the hosts (backupScenarios)
}

func setup(t *testing.T, prefix, net string) *env {
	t.Helper()
	labtest.RequireRoot(t)
	mirror := mirrortest.Dir()
	for _, p := range []string{"kubernetes/release/v1.36.3/bin/linux/amd64/kube-apiserver", "etcd/v3.6.16/SHA256SUMS"} {
		if _, err := os.Stat(filepath.Join(mirror, p)); err != nil {
			t.Fatalf("the release mirror lacks %s: run 'make mirror' (%v)", p, err)
		}
	}
	dir := t.TempDir()
	l, res := labtest.Start(t, lab.Config{Dir: dir, Prefix: prefix, Net: net, Mirror: mirror})
	return &env{t: t, inv: res.Inventory, cacheDir: filepath.Join(dir, "cache"), res: res, mirror: mirror, lab: l}
}

// hardway runs the CLI in-process and returns exit code, stdout, stderr.
func (e *env) hardway(args ...string) (int, string, string) {
	e.t.Helper()
	args = append(args, "-i", e.inv)
	if args[0] == "up" || args[0] == "verify" || args[0] == "restore" {
		args = append(args, "--cache-dir", e.cacheDir)
	}
	var out, errb bytes.Buffer
	start := time.Now()
	code := cli.Main(context.Background(), args, &out, &errb)
	e.t.Logf("hardway %s: exit %d in %s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
	return code, out.String(), errb.String()
}

func (e *env) mustUp(args ...string) string {
	e.t.Helper()
	code, out, errs := e.hardway(append([]string{"up"}, args...)...)
	if code != 0 {
		e.t.Fatalf("up %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	return out
}

func (e *env) verify() *verify.Report {
	e.t.Helper()
	_, out, errs := e.hardway("verify", "-o", "json")
	var r verify.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		e.t.Fatalf("verify -o json: %v\n%s\n%s", err, out, errs)
	}
	return &r
}

func failures(r *verify.Report) []string {
	var out []string
	for _, x := range r.Results {
		if x.Status == verify.Fail {
			out = append(out, fmt.Sprintf("%s %s: %s (hint: %s)", x.Check, x.Host, x.Message, x.Hint))
		}
	}
	return out
}

// ssh runs a command on a lab host with the lab's own ssh_config.
func (e *env) ssh(host, cmd string) (string, error) {
	out, err := exec.Command("ssh", "-F", e.res.SSHConfig, host, cmd).CombinedOutput()
	return string(out), err
}

// activeSince is every control-plane unit's ActiveEnterTimestamp on every host.
func (e *env) activeSince() map[string]string {
	e.t.Helper()
	m := map[string]string{}
	for _, h := range e.res.Hosts {
		for _, u := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			out, err := e.ssh(h.Name, "systemctl show -p ActiveEnterTimestampMonotonic --value "+u)
			if err != nil {
				e.t.Fatalf("%s %s: %v %s", h.Name, u, err, out)
			}
			m[h.Name+"/"+u] = strings.TrimSpace(out)
		}
	}
	return m
}

// TestEtcdCA is issue 12's etcd CA and CA rotation acceptance (etcdca_test.go)
// on a lab of its own: the scenarios need only a fresh cluster, and side by
// side with TestControlPlane (make e2e) they no longer add their 17 minutes
// to it.
func TestEtcdCA(t *testing.T) {
	sideBySide(t)
	e := setup(t, "hwc", "10.240.16")
	t.Run("fresh up then verify passes", func(t *testing.T) {
		e.t = t
		e.mustUp()
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
	})
	e.etcdCAScenarios(t)
}

func TestControlPlane(t *testing.T) {
	sideBySide(t)
	e := setup(t, "hwe", "10.240.7")

	t.Run("fresh up then verify passes", func(t *testing.T) {
		e.t = t
		out := e.mustUp()
		if !strings.Contains(out, "changes applied") {
			t.Fatalf("first up applied nothing:\n%s", out)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
	})

	t.Run("kubectl reaches the apiserver", func(t *testing.T) {
		e.t = t
		kubectl := filepath.Join(e.mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kubectl")
		kc := filepath.Join(filepath.Dir(e.inv), ".hardway/kubeconfigs/admin.kubeconfig")
		out, err := exec.Command(kubectl, "--kubeconfig", kc, "get", "--raw", "/readyz").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("kubectl get --raw /readyz: %v %s", err, out)
		}
	})

	t.Run("probe secret is encrypted in etcd", func(t *testing.T) {
		e.t = t
		out, err := e.ssh("controller-1", "etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/etcd/ca.crt "+
			"--cert /var/lib/kubernetes/apiserver-etcd-client.crt --key /var/lib/kubernetes/apiserver-etcd-client.key "+
			"get /registry/secrets/kube-system/hardway-encryption-probe --print-value-only | head -c 40")
		if err != nil || !strings.HasPrefix(out, "k8s:enc:secretbox:v1:key1:") {
			t.Fatalf("raw etcd value: %v %q", err, out)
		}
	})

	t.Run("second up changes nothing and restarts nothing", func(t *testing.T) {
		e.t = t
		before := e.activeSince()
		start := time.Now()
		out := e.mustUp()
		if !strings.Contains(out, "no changes") {
			t.Fatalf("second up:\n%s", out)
		}
		t.Logf("no-op up took %s", time.Since(start).Round(time.Millisecond))
		if after := e.activeSince(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("services restarted:\nbefore %v\nafter  %v", before, after)
		}
		if out := e.mustUp("--dry-run"); !strings.Contains(out, "no changes") {
			t.Fatalf("dry run after up:\n%s", out)
		}
	})

	// Issue 11's acceptance: a lost state directory (a fresh clone) never
	// replaces the cluster's identity; state pull brings it back.
	t.Run("a lost state directory: up stops before writing, state pull restores it, up says no changes", func(t *testing.T) {
		e.t = t
		kubectl := filepath.Join(e.mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kubectl")
		st := filepath.Join(filepath.Dir(e.inv), ".hardway")
		kc := filepath.Join(st, "kubeconfigs/admin.kubeconfig")
		if out, err := exec.Command(kubectl, "--kubeconfig", kc, "create", "secret", "generic", "hardway-e2e-keep",
			"--from-literal=answer=42").CombinedOutput(); err != nil {
			t.Fatalf("create secret: %v %s", err, out)
		}
		identity := "sha256sum /var/lib/kubernetes/ca.crt /var/lib/kubernetes/ca.key /etc/etcd/ca.crt " +
			"/var/lib/kubernetes/front-proxy-ca.crt /var/lib/kubernetes/front-proxy-ca.key " +
			"/var/lib/kubernetes/service-account.key /var/lib/kubernetes/service-account.pub /var/lib/kubernetes/encryption-config.yaml"
		sums := func() map[string]string {
			m := map[string]string{}
			for _, h := range e.res.Hosts {
				out, err := e.ssh(h.Name, identity)
				if err != nil {
					t.Fatalf("%s: %v %s", h.Name, err, out)
				}
				m[h.Name] = out
			}
			return m
		}
		before, since := sums(), e.activeSince()
		moved := st + ".moved"
		if err := os.Rename(st, moved); err != nil {
			t.Fatal(err)
		}

		code, out, errs := e.hardway("up")
		if code == 0 {
			t.Fatalf("up without the state directory succeeded:\n%s", out)
		}
		if !strings.Contains(errs, "hardway state pull controller-1") || !strings.Contains(errs, "nothing was written") {
			t.Errorf("up's error does not name state pull:\n%s", errs)
		}
		if after := sums(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("the hosts' identity changed:\nbefore %v\nafter  %v", before, after)
		}
		if _, err := os.Stat(filepath.Join(st, "pki/ca.crt")); err == nil {
			t.Fatal("up made a new CA")
		}

		code, out, errs = e.hardway("state", "pull", "--from", "controller-1")
		if code != 0 {
			t.Fatalf("state pull: exit %d\n%s\n%s", code, out, errs)
		}
		t.Logf("state pull:\n%s", out)
		// Every file of the lost directory is back, byte for byte, but for
		// kube-proxy's, which no host holds without workers, and admin's,
		// which no host holds unless pki.adminKubeconfigOnHosts (issued anew).
		err := filepath.WalkDir(moved, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(moved, p)
			if rel == "lock" || strings.HasPrefix(rel, "logs/") || strings.Contains(rel, "kube-proxy") || strings.Contains(rel, "admin.") {
				return nil
			}
			a, _ := os.ReadFile(p)
			b, err := os.ReadFile(filepath.Join(st, rel))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s not restored (%v)", rel, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}

		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Fatalf("up after state pull:\n%s", out)
		}
		if after := e.activeSince(); fmt.Sprint(after) != fmt.Sprint(since) {
			t.Errorf("services restarted:\nbefore %v\nafter  %v", since, after)
		}
		got, err := exec.Command(kubectl, "--kubeconfig", kc, "get", "secret", "hardway-e2e-keep",
			"-o", "jsonpath={.data.answer}").CombinedOutput()
		if err != nil || string(got) != "NDI=" {
			t.Fatalf("the Secret from before: %v %q", err, got)
		}
	})

	e.damagedIdentityScenarios(t)

	t.Run("etcd status: every member answers, one leader, no alarm", func(t *testing.T) {
		e.t = t
		code, out, errs := e.hardway("etcd", "status", "-o", "json")
		if code != 0 {
			t.Fatalf("etcd status: exit %d\n%s\n%s", code, out, errs)
		}
		var ms []struct {
			Name        string   `json:"name"`
			Reachable   bool     `json:"reachable"`
			Leader      bool     `json:"leader"`
			DBSize      int64    `json:"dbSize"`
			DBSizeInUse int64    `json:"dbSizeInUse"`
			RaftIndex   uint64   `json:"raftIndex"`
			Version     string   `json:"version"`
			Alarms      []string `json:"alarms"`
		}
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		leaders := 0
		for _, m := range ms {
			if m.Leader {
				leaders++
			}
			if !m.Reachable || m.Version != "3.6.16" || m.DBSizeInUse <= 0 || m.DBSizeInUse > m.DBSize || m.RaftIndex == 0 || len(m.Alarms) > 0 {
				t.Errorf("%+v", m)
			}
		}
		if len(ms) != 3 || leaders != 1 {
			t.Errorf("%d members, %d leaders:\n%s", len(ms), leaders, out)
		}
		if code, out, _ := e.hardway("etcd", "status"); code != 0 || !strings.Contains(out, "RAFT INDEX") {
			t.Errorf("table: exit %d\n%s", code, out)
		}
	})

	t.Run("dry run with every flag changes nothing on a drifted cluster", func(t *testing.T) {
		e.t = t
		e.dryRunChangesNothing()
	})

	t.Run("a changed apiserver setting restarts only the apiserver, host by host", func(t *testing.T) {
		e.t = t
		before := e.activeSince()
		src, _ := os.ReadFile(e.inv)
		changed := withEndpoint(string(src), "k8s.lab.internal:6443")
		if err := os.WriteFile(e.inv, []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
		// A poller asks each apiserver in turn for /readyz all along.
		var ok, bad atomic.Int32
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				anyReady := false
				for _, h := range e.res.Hosts {
					if out, err := e.ssh(h.Name, "curl -sk --max-time 2 https://127.0.0.1:6443/readyz"); err == nil && out == "ok" {
						anyReady = true
						break
					}
				}
				if anyReady {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		dry := e.mustUp("--dry-run")
		if !strings.Contains(dry, "kube-apiserver (does not cover the inventory: missing k8s.lab.internal)") || strings.Contains(dry, "etcd.service") {
			t.Errorf("dry run should plan only the apiserver certificate:\n%s", dry)
		}
		out := e.mustUp()
		close(stop)
		wg.Wait()
		// hardway restarts exactly the apiservers, one per host, in order.
		var restarts []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "restart") && strings.HasPrefix(l, "[") {
				restarts = append(restarts, l)
			}
		}
		want := []string{
			"[control-plane] controller-1: kube-apiserver: restart (files changed)",
			"[control-plane] controller-2: kube-apiserver: restart (files changed)",
			"[control-plane] controller-3: kube-apiserver: restart (files changed)",
		}
		if strings.Join(restarts, "\n") != strings.Join(want, "\n") {
			t.Errorf("restarts:\n%s\nwant:\n%s", strings.Join(restarts, "\n"), strings.Join(want, "\n"))
		}
		after := e.activeSince()
		for k, v := range before {
			restarted := after[k] != v
			switch {
			case strings.HasSuffix(k, "/kube-apiserver") && !restarted:
				t.Errorf("%s was not restarted", k)
			case strings.HasSuffix(k, "/etcd") && restarted:
				t.Errorf("%s was restarted", k)
			case restarted && !strings.HasSuffix(k, "/kube-apiserver"):
				// A controller-manager or scheduler that held the leader
				// lease exits when its local apiserver is away longer than
				// the renew deadline; systemd starts it again. Not hardway's
				// doing, but worth seeing in the log.
				t.Logf("%s restarted by itself (leader lease lost while its apiserver restarted)", k)
			}
		}
		if bad.Load() > 0 || ok.Load() == 0 {
			t.Errorf("no apiserver ready in %d of %d polls", bad.Load(), ok.Load()+bad.Load())
		}
		// The inventory keeps the new endpoint: going back would reissue the
		// certificate and restart the apiservers once more, proving nothing new.
	})

	t.Run("a stopped etcd member fails exactly its checks and up repairs it", func(t *testing.T) {
		e.t = t
		if out, err := e.ssh("controller-2", "systemctl stop etcd"); err != nil {
			t.Fatalf("stop etcd: %v %s", err, out)
		}
		r := e.verify()
		for _, f := range failures(r) {
			if !strings.Contains(f, "controller-2") && !strings.HasPrefix(f, "etcd/members") {
				t.Errorf("unexpected failure with one member down: %s", f)
			}
		}
		var sawHealth bool
		for _, x := range r.Results {
			if x.Check == "etcd/health" && x.Host == "controller-2" && x.Status == verify.Fail && x.Hint != "" {
				sawHealth = true
			}
			if x.Check == "apiserver/readyz" && x.Host == "controller-1" && x.Status != verify.Pass {
				t.Errorf("quorum lost? controller-1 apiserver: %s", x.Message)
			}
		}
		if !sawHealth {
			t.Errorf("verify did not fail etcd/health on controller-2:\n%v", failures(r))
		}
		e.mustUp()
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after repair:\n  %s", strings.Join(f, "\n  "))
		}
	})

	t.Run("a rebuilt host is refused, then accepted and its etcd member replaced", func(t *testing.T) {
		e.t = t
		rebuild := `systemctl disable --now kube-scheduler kube-controller-manager kube-apiserver etcd
rm -rf /var/lib/etcd /etc/etcd /var/lib/kubernetes /var/lib/hardway /etc/kubernetes /usr/local/bin/* /etc/systemd/system/etcd.service /etc/systemd/system/kube-*.service
systemctl daemon-reload
rm -f /etc/ssh/ssh_host_*
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
systemctl restart ssh`
		if out, err := e.ssh("controller-3", rebuild); err != nil {
			t.Fatalf("rebuild: %v %s", err, out)
		}
		code, _, errs := e.hardway("up")
		if code == 0 || !strings.Contains(errs, "host key mismatch") || !strings.Contains(errs, "ssh-keygen") {
			t.Fatalf("up against a changed host key: exit %d\n%s", code, errs)
		}
		// What the hint tells the user to do.
		if out, err := exec.Command("ssh-keygen", "-f", e.res.KnownHosts, "-R", e.res.Hosts[2].Address).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen -R: %v %s", err, out)
		}
		code, _, errs = e.hardway("up", "--accept-new-host-keys")
		if code == 0 || !strings.Contains(errs, "--remove-stale-members") || !strings.Contains(errs, "member remove") {
			t.Fatalf("up with a stale member: exit %d\n%s", code, errs)
		}
		out := e.mustUp("--remove-stale-members")
		if !strings.Contains(out, "replace etcd member controller-3") {
			t.Errorf("no member replacement in:\n%s", out)
		}
		e.mustUp() // converges what the join left (restarts that depended on it)
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after the replacement:\n  %s", strings.Join(f, "\n  "))
		}
	})

	e.defragScenarios(t)
	e.rotateScenarios(t)
	e.renewScenarios(t)
	// The etcd CA scenarios run in TestEtcdCA, on a lab of their own.

	t.Run("a host reboot brings every service back", func(t *testing.T) {
		e.t = t
		e.ssh("controller-3", "systemctl reboot")
		deadline := time.Now().Add(3 * time.Minute)
		for {
			out, err := e.ssh("controller-3", "systemctl is-system-running --wait")
			if err == nil || strings.Contains(out, "degraded") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("controller-3 did not come back: %v %s", err, out)
			}
			time.Sleep(2 * time.Second)
		}
		deadline = time.Now().Add(2 * time.Minute)
		for {
			f := failures(e.verify())
			if len(f) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after reboot:\n  %s", strings.Join(f, "\n  "))
			}
			time.Sleep(3 * time.Second)
		}
	})

	// Last: it takes the lab's hosts down and restores onto new ones.
	e.backupScenarios(t)
}

// etcdctl runs etcdctl on controller-1 with the apiserver's client certificate.
const etcdctl = "etcdctl --endpoints https://127.0.0.1:2379 --cacert /etc/etcd/ca.crt " +
	"--cert /var/lib/kubernetes/apiserver-etcd-client.crt --key /var/lib/kubernetes/apiserver-etcd-client.key "

// pushedFiles lists every file hardway pushes or keeps on a host with its
// mode, owner, size, mtime and sha256 (the etcd data dir, which etcd
// writes, is not one of them).
const pushedFiles = `find /etc/etcd /var/lib/kubernetes /etc/kubernetes /usr/local/bin /var/lib/hardway /etc/systemd/system -type f 2>/dev/null | sort |
while read -r f; do printf '%s %s %s\n' "$(stat -c '%n %a %U %G %s %Y' "$f")" "$(sha256sum < "$f" | cut -c1-64)"; done`

// units lists each control-plane unit's state and ActiveEnterTimestamp.
const unitsState = `for u in etcd kube-apiserver kube-controller-manager kube-scheduler; do
echo "$u $(systemctl show -p ActiveState -p SubState -p ActiveEnterTimestampMonotonic -p NeedDaemonReload --value $u | tr '\n' ' ')"; done`

// localTree hashes every file under dir (path, mode, size, mtime, content),
// the run logs and the state lock included: a dry run writes no log and
// takes the lock without writing it.
func localTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// world is everything a dry run must leave as it was.
type world struct {
	members string
	hosts   map[string]string // host -> pushed files + unit states
	local   map[string]string
}

func (e *env) world() world {
	e.t.Helper()
	w := world{hosts: map[string]string{}}
	out, err := e.ssh("controller-1", etcdctl+"member list -w simple")
	if err != nil {
		e.t.Fatalf("member list: %v %s", err, out)
	}
	w.members = out
	for _, h := range e.res.Hosts {
		files, err := e.ssh(h.Name, pushedFiles)
		if err != nil || strings.Count(files, "\n") < 20 {
			e.t.Fatalf("%s: pushed files: %v\n%s", h.Name, err, files)
		}
		units, err := e.ssh(h.Name, unitsState)
		if err != nil {
			e.t.Fatalf("%s: units: %v %s", h.Name, err, units)
		}
		w.hosts[h.Name] = files + units
	}
	w.local = localTree(e.t, filepath.Dir(e.inv))
	return w
}

func diffLines(a, b string) string {
	al, bl := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		al[l] = true
	}
	for _, l := range strings.Split(b, "\n") {
		bl[l] = true
	}
	var out []string
	for l := range al {
		if !bl[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range bl {
		if !al[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// dryRunChangesNothing is issue 13's acceptance: on a cluster with an
// unstarted extra etcd member, a drifted unit, a stopped service and a SAN
// change, 'up --dry-run' with every flag plans the fixes and changes
// nothing — the member list, every pushed file on every host, every unit's
// state and ActiveEnterTimestamp, and the local directory (inventory, lock,
// state, cache) are compared before and after. A real up then converges it,
// removing the member that never started.
func (e *env) dryRunChangesNothing() {
	t := e.t
	// an address of the lab's /24 that no host has
	extra := e.res.Hosts[0].Address[:strings.LastIndex(e.res.Hosts[0].Address, ".")] + ".99"
	if out, err := e.ssh("controller-1", etcdctl+"member add extra --peer-urls=https://"+extra+":2380"); err != nil {
		t.Fatalf("member add: %v %s", err, out)
	}
	if out, err := e.ssh("controller-2", "echo '# drifted by hand' >> /etc/systemd/system/kube-scheduler.service"); err != nil {
		t.Fatalf("drift: %v %s", err, out)
	}
	if out, err := e.ssh("controller-3", "systemctl stop kube-controller-manager"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	src, err := os.ReadFile(e.inv)
	if err != nil {
		t.Fatal(err)
	}
	san := withEndpoint(string(src), "dry-run.lab.internal:6443")
	if err := os.WriteFile(e.inv, []byte(san), 0o644); err != nil {
		t.Fatal(err)
	}

	before := e.world()
	every := []string{"--dry-run", "--remove-stale-members", "--accept-new-host-keys", "--offline", "--replace-identity"}
	code, out, errs := e.hardway(append([]string{"up"}, every...)...)
	if code != 0 {
		t.Fatalf("up %v: exit %d\n%s\n%s", every, code, out, errs)
	}
	for _, want := range []string{
		"[pki] would generate",
		"[push] would controller-2: write /etc/systemd/system/kube-scheduler.service",
		"[etcd] would remove stale etcd member (never started)",
		"[control-plane] would controller-2: kube-scheduler: daemon-reload, restart (files changed)",
		"[control-plane] would controller-3: kube-controller-manager: start",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run does not plan %q:\n%s", want, out)
		}
	}
	// The same with JSON output and a step selection.
	code, jout, errs := e.hardway("up", "--dry-run", "--remove-stale-members", "-o", "json", "--only", "pki,fetch,render,push,etcd,control-plane", "--skip", "rbac")
	if code != 0 || !strings.Contains(jout, `"kind": "membership"`) {
		t.Fatalf("up --dry-run -o json: exit %d\n%s\n%s", code, jout, errs)
	}
	after := e.world()

	if before.members != after.members {
		t.Errorf("etcd members changed:\nbefore\n%s\nafter\n%s", before.members, after.members)
	}
	if !strings.Contains(after.members, "unstarted") {
		t.Errorf("the unstarted member is gone:\n%s", after.members)
	}
	for h, b := range before.hosts {
		if a := after.hosts[h]; a != b {
			t.Errorf("%s changed:\n%s", h, diffLines(b, a))
		}
	}
	if fmt.Sprint(before.local) != fmt.Sprint(after.local) {
		t.Errorf("the local directory changed:\nbefore %v\nafter  %v", before.local, after.local)
	}

	// Put the inventory back and converge: the member that never started
	// is removed (it cannot answer), the drift undone, the service started.
	if err := os.WriteFile(e.inv, src, 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustUp("--remove-stale-members")
	if out, err := e.ssh("controller-1", etcdctl+"member list -w simple"); err != nil || strings.Contains(out, "unstarted") || strings.Count(strings.TrimSpace(out), "\n") != 2 {
		t.Fatalf("member list after up: %v\n%s", err, out)
	}
	if f := failures(e.verify()); len(f) > 0 {
		t.Fatalf("verify after converging:\n  %s", strings.Join(f, "\n  "))
	}
}

// withEndpoint sets network.apiServerEndpoint in an inventory's text (a
// SAN change of the apiserver certificate), under an existing network: key
// if there is one.
func withEndpoint(inv, ep string) string {
	lines := strings.Split(inv, "\n")
	for i, l := range lines {
		if l == "network:" {
			return strings.Join(append(lines[:i+1], append([]string{"  apiServerEndpoint: " + ep}, lines[i+1:]...)...), "\n")
		}
	}
	return "network:\n  apiServerEndpoint: " + ep + "\n" + inv
}
