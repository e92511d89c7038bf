package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// backupScenarios is issue 11's acceptance for `hardway backup` and
// `hardway restore`. It must run LAST in TestControlPlane: its final
// subtest takes the lab's hosts down and brings up new ones (new host keys,
// empty disks, the same addresses), restoring the cluster onto them. It
// needs only the cold up before it.
func (e *env) backupScenarios(t *testing.T) {
	kubectlBin := filepath.Join(e.mirror, "kubernetes/release/v1.36.3/bin/linux/amd64/kubectl")
	st := filepath.Join(filepath.Dir(e.inv), ".hardway")
	// The admin kubeconfig from before the backup, kept aside: after the
	// restore it must still work. --server names controller-1 itself: an
	// earlier subtest may have set an apiServerEndpoint this machine cannot
	// resolve; the credentials and the CA are what is tested.
	oldKubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	kubectl := func(t *testing.T, args ...string) (string, error) {
		args = append([]string{"--kubeconfig", oldKubeconfig, "--server", "https://" + e.res.Hosts[0].Address + ":6443", "--request-timeout", "20s"}, args...)
		out, err := exec.Command(kubectlBin, args...).CombinedOutput()
		return string(out), err
	}
	const pass = "e2e: correct horse battery staple"
	passFile := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passFile, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backups")
	var file string
	// The passphrase from the environment, as a script gives it: to a
	// hardway process of its own (t.Setenv would change this whole test
	// process's environment, which a test running in parallel must not).
	bin := filepath.Join(t.TempDir(), "hardway")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/hardway/hardway/cmd/hardway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	withPass := []string{"HARDWAY_BACKUP_PASSPHRASE=" + pass}

	t.Run("backup: namespace, ConfigMap and Secret, one encrypted file", func(t *testing.T) {
		e.t = t
		b, err := os.ReadFile(filepath.Join(st, "kubeconfigs/admin.kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(oldKubeconfig, b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"create", "namespace", "hardway-backup"},
			{"-n", "hardway-backup", "create", "configmap", "kept", "--from-literal=colour=teal"},
			{"-n", "hardway-backup", "create", "secret", "generic", "kept", "--from-literal=password=s3cr3t-in-etcd"},
		} {
			if out, err := kubectl(t, args...); err != nil {
				t.Fatalf("kubectl %v: %v %s", args, err, out)
			}
		}
		// Two backups: the second with the passphrase from the environment
		// and --keep 1, which removes the first.
		code, out, errs := e.hardway("backup", "--passphrase-file", passFile, "--dir", dir, "-o", "json")
		if code != 0 {
			t.Fatalf("backup: exit %d\n%s\n%s", code, out, errs)
		}
		var first struct {
			Path      string `json:"path"`
			Size      int64  `json:"size"`
			SHA256    string `json:"sha256"`
			Encrypted bool   `json:"encrypted"`
			Snapshot  struct {
				Member string `json:"member"`
				Size   int64  `json:"size"`
			} `json:"snapshot"`
		}
		if err := json.Unmarshal([]byte(out), &first); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		code, out2, errs2 := e.hardwayProcess(bin, withPass, "backup", "--dir", dir, "--keep", "1")
		if code != 0 {
			t.Fatalf("second backup: exit %d\n%s\n%s", code, out2, errs2)
		}
		t.Logf("backup:\n%s%s", out2, errs2)
		des, _ := os.ReadDir(dir)
		if len(des) != 1 || filepath.Join(dir, des[0].Name()) == first.Path {
			t.Fatalf("--keep 1 left %v (first was %s)", des, first.Path)
		}
		file = filepath.Join(dir, des[0].Name())
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%v %v", err, fi)
		}
		raw, _ := os.ReadFile(file)
		if !bytes.HasPrefix(raw, []byte("age-encryption.org/v1\n")) || bytes.Contains(raw, []byte("PRIVATE KEY")) {
			t.Error("the backup is not age-encrypted")
		}
		if !first.Encrypted || first.Size <= 0 || first.Snapshot.Size < 64<<10 || !strings.HasPrefix(first.Snapshot.Member, "controller-") {
			t.Errorf("result %+v", first)
		}
		for _, s := range []string{out, errs, out2, errs2} {
			if strings.Contains(s, pass) || strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "s3cr3t") {
				t.Errorf("backup printed a secret:\n%s", s)
			}
		}
	})
	if file == "" {
		// The backup subtest failed (and failed the suite) or -run left it
		// out: either way the restore scenarios have nothing to restore.
		t.Log("no backup: the restore scenarios are not run")
		return
	}

	// What a refused restore must leave as it was on every host.
	hostState := func(t *testing.T) map[string]string {
		m := map[string]string{}
		for _, h := range e.res.Hosts {
			out, err := e.ssh(h.Name, "sha256sum /var/lib/kubernetes/ca.crt /var/lib/kubernetes/ca.key /var/lib/kubernetes/service-account.key "+
				"/var/lib/kubernetes/encryption-config.yaml /etc/etcd/ca.crt /etc/etcd/etcd-server.key 2>&1; ls -a /var/lib /var/lib/etcd /var/lib/hardway; "+
				"systemctl show -p ActiveEnterTimestampMonotonic --value etcd kube-apiserver kube-controller-manager kube-scheduler")
			if err != nil {
				t.Fatalf("%s: %v %s", h.Name, err, out)
			}
			m[h.Name] = out
		}
		return m
	}

	t.Run("a damaged backup, a wrong passphrase, a running cluster: refused, hosts unchanged", func(t *testing.T) {
		e.t = t
		before := hostState(t)
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		flipped := append([]byte{}, raw...)
		flipped[len(flipped)/2] ^= 0x20
		tmp := t.TempDir()
		write := func(name string, b []byte) string {
			p := filepath.Join(tmp, name)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		wrong := write("wrong", []byte("not the passphrase\n"))
		for _, c := range []struct {
			name string
			args []string
			want []string
		}{
			{"flipped byte", []string{"--from", write("flipped.age", flipped), "--passphrase-file", passFile}, []string{"damaged", "changed byte", "nothing was changed"}},
			{"truncated", []string{"--from", write("truncated.age", raw[:len(raw)*2/3]), "--passphrase-file", passFile}, []string{"damaged", "truncated"}},
			{"wrong passphrase", []string{"--from", file, "--passphrase-file", wrong}, []string{"wrong passphrase", "nothing was changed"}},
			{"over a running cluster", []string{"--from", file, "--passphrase-file", passFile}, []string{"etcd holds data on controller-1 (running)", "--replace-etcd-data", "nothing was changed"}},
		} {
			code, out, errs := e.hardway(append([]string{"restore"}, c.args...)...)
			if code == 0 {
				t.Errorf("%s: restore succeeded:\n%s", c.name, out)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("%s: the error does not say %q:\n%s", c.name, w, errs)
				}
			}
			if strings.Contains(out+errs, pass) {
				t.Errorf("%s: the passphrase was printed", c.name)
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(errs))
		}
		if after := hostState(t); fmt.Sprint(after) != fmt.Sprint(before) {
			for h := range before {
				if before[h] != after[h] {
					t.Errorf("%s changed:\n%s", h, diffLines(before[h], after[h]))
				}
			}
		}
	})

	t.Run("restore onto new hosts: objects back, Secret encrypted, verify passes, the old kubeconfig works", func(t *testing.T) {
		e.t = t
		inv, err := os.ReadFile(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		oldKnown, err := os.ReadFile(e.res.KnownHosts)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := e.lab.Down(t.Context()); err != nil {
			t.Fatalf("lab down: %v", err)
		}
		res, err := e.lab.Up(t.Context())
		if err != nil {
			t.Fatalf("lab up: %v", err)
		}
		e.res = res
		t.Logf("new hosts in %s", time.Since(start).Round(time.Millisecond))
		// The same inventory as before (lab up writes a fresh one), and the
		// old hosts' keys in known_hosts, as on the machine that ran up.
		if err := os.WriteFile(e.inv, inv, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.res.KnownHosts, oldKnown, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := e.ssh("controller-1", "ls -A /var/lib/etcd /var/lib/kubernetes 2>&1; true"); err == nil || !strings.Contains(out, "Host key verification failed") {
			// ssh refuses the new key too: proof the hosts are new.
			t.Fatalf("ssh to the new controller-1 with the old key: %v %s", err, out)
		}
		code, _, errs := e.hardwayProcess(bin, withPass, "restore", "--from", file, "--accept-new-host-keys")
		if code == 0 || !strings.Contains(errs, "host key mismatch") {
			t.Fatalf("restore with the old host keys: exit %d\n%s", code, errs)
		}
		// What the hint says: forget the old keys; restore may then trust new ones.
		for _, h := range e.res.Hosts {
			if out, err := exec.Command("ssh-keygen", "-f", e.res.KnownHosts, "-R", h.Address).CombinedOutput(); err != nil {
				t.Fatalf("ssh-keygen -R: %v %s", err, out)
			}
		}
		code, _, errs = e.hardwayProcess(bin, withPass, "restore", "--from", file)
		if code == 0 || !strings.Contains(errs, "--accept-new-host-keys") {
			t.Fatalf("restore onto unknown hosts without --accept-new-host-keys: exit %d\n%s", code, errs)
		}
		start = time.Now()
		code, out, errs := e.hardwayProcess(bin, withPass, "restore", "--from", file, "--accept-new-host-keys")
		if code != 0 {
			t.Fatalf("restore: exit %d\n%s\n%s", code, out, errs)
		}
		t.Logf("restore onto new hosts until verify passed: %s\n%s", time.Since(start).Round(time.Millisecond), out)
		for _, w := range []string{"[restore-etcd] controller-1: restore etcd member controller-1", "restored in", "verify passes"} {
			if !strings.Contains(out, w) {
				t.Errorf("restore output lacks %q", w)
			}
		}
		if strings.Contains(out+errs, pass) {
			t.Error("the passphrase was printed")
		}

		// The objects, through the admin kubeconfig from before.
		if got, err := kubectl(t, "-n", "hardway-backup", "get", "configmap", "kept", "-o", "jsonpath={.data.colour}"); err != nil || got != "teal" {
			t.Errorf("ConfigMap: %v %q", err, got)
		}
		if got, err := kubectl(t, "-n", "hardway-backup", "get", "secret", "kept", "-o", "jsonpath={.data.password}"); err != nil || got != "czNjcjN0LWluLWV0Y2Q=" {
			t.Errorf("Secret: %v %q", err, got)
		}
		// Still stored encrypted, with the backup's key.
		raw, err := e.ssh("controller-2", etcdctl+"get /registry/secrets/hardway-backup/kept --print-value-only | head -c 40")
		if err != nil || !strings.HasPrefix(raw, "k8s:enc:secretbox:v1:") {
			t.Errorf("raw etcd value of the Secret: %v %q", err, raw)
		}
		// The revision moved past anything the old cluster handed out.
		hdr, err := e.ssh("controller-3", etcdctl+"get /registry/namespaces/hardway-backup -w json")
		var resp struct {
			Header struct {
				Revision int64 `json:"revision"`
			} `json:"header"`
		}
		if err != nil || json.Unmarshal([]byte(hdr), &resp) != nil || resp.Header.Revision < 1_000_000_000 {
			t.Errorf("revision after the restore: %v %s", err, hdr)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after the restore:\n  %s", strings.Join(f, "\n  "))
		}
		// A new object can be written: the restored cluster takes writes.
		if out, err := kubectl(t, "-n", "hardway-backup", "create", "configmap", "after", "--from-literal=n="+strconv.Itoa(1)); err != nil {
			t.Errorf("write after the restore: %v %s", err, out)
		}
	})
}

// hardwayProcess runs the hardway binary bin as its own process with env
// added to this process's environment, the arguments e.hardway gives it,
// and returns exit code, stdout and stderr.
func (e *env) hardwayProcess(bin string, env []string, args ...string) (int, string, string) {
	e.t.Helper()
	args = append(args, "-i", e.inv)
	if args[0] == "up" || args[0] == "verify" || args[0] == "restore" {
		args = append(args, "--cache-dir", e.cacheDir)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("hardway %s: %v", strings.Join(args, " "), err)
	}
	e.t.Logf("hardway %s (own process): exit %d in %s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
	return code, out.String(), errb.String()
}
