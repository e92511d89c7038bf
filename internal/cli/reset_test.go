package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/units"
)

const resetInv = `cluster: prod
controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
workers:
  - {name: w1, address: 10.240.0.21}
`

// resetDir is an inventory next to a state directory with files in it.
func resetDir(t *testing.T) (root, invPath string) {
	t.Helper()
	root = t.TempDir()
	invPath = filepath.Join(root, "inventory.yaml")
	for p, data := range map[string]string{
		invPath: resetInv,
		filepath.Join(root, ".hardway/pki/ca.crt"):       "not a real CA",
		filepath.Join(root, ".hardway/pki/ca.key"):       "not a real key",
		filepath.Join(root, ".hardway/admin.kubeconfig"): "kubeconfig",
		filepath.Join(root, "hardway.lock"):              "lock",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, invPath
}

// dirHash is every path's name, mode, size, mtime and content under dir.
func dirHash(t *testing.T, dir string) string {
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
		fmt.Fprintf(h, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

var (
	reResetUnits = regexp.MustCompile(`(?m)-p ActiveEnterTimestamp -- (.*) 2>/dev/null$`)
	reResetPaths = regexp.MustCompile(`(?m)^echo '@paths'; for p in (.*); do if`)
)

// afterUp answers the reset's read as a host 'up' built: every unit runs,
// every path of its footprint is there. Any other command fails the test:
// the fake expects nothing else.
func afterUp(t *testing.T, name string) *remotetest.Fake {
	f := remotetest.New(t, name)
	f.ExpectMatch(`^cd /etc/containerd/certs.d `).AnyTimes()
	f.ExpectMatch(`^# reset: what hardway put on the host`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) {
		var b strings.Builder
		b.WriteString("@units\n")
		for i, u := range strings.Fields(reResetUnits.FindStringSubmatch(cmd)[1]) {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "Id=%s\nActiveState=active\nUnitFileState=enabled\n", u)
		}
		b.WriteString("@paths\n")
		for _, p := range strings.Fields(reResetPaths.FindStringSubmatch(cmd)[1]) {
			b.WriteString(strings.Trim(p, "'") + "\n")
		}
		b.WriteString("@entries\n@links\n@mounts\n/\n@routes\n10.200.0.0/24 via 10.240.0.21 dev eth0 proto 70\n@bridge\n@egress\n@kube-iptables\n0\n@kube-nft\n")
		b.WriteString("@user\netcd:x:998:998:" + units.EtcdUserGECOS + ":/var/lib/etcd:/usr/sbin/nologin\n@group\netcd:x:998:\n@aside\n")
		return b.String(), nil
	})
	return f
}

// runApp runs hardway on an App with stdin and fake hosts (nil: a connection
// fails the test).
func runApp(t *testing.T, stdin io.Reader, hosts map[string]*remotetest.Fake, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdout: &out, Stderr: &errb, Stdin: stdin}
	a.connect = func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		if f, ok := hosts[cfg.Name]; ok {
			return f, nil
		}
		t.Errorf("reset connected to %s", cfg.Name)
		return nil, fmt.Errorf("no host %s", cfg.Name)
	}
	root := a.newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	code := 0
	if err := root.ExecuteContext(context.Background()); err != nil {
		code = a.printError(err)
	}
	return code, out.String(), errb.String()
}

// Without --yes reset asks on a terminal only: a stdin that is none is
// refused before any host is reached, with the way out; part of a control
// plane needs --yes even on a terminal.
func TestResetRefusesWithoutYesOnAPipe(t *testing.T) {
	root, inv := resetDir(t)
	before := dirHash(t, root)
	code, _, stderr := runApp(t, strings.NewReader("prod\n"), nil, "reset", "-i", inv)
	if code != 2 || !strings.Contains(stderr, "error: reset asks for the cluster's name on a terminal, and stdin is not one") ||
		!strings.Contains(stderr, "hint:  add --yes to reset without asking (a script), or --dry-run to see the plan") {
		t.Fatalf("code %d\n%s", code, stderr)
	}
	code, _, stderr = runApp(t, nil, nil, "reset", "-i", inv, "--host", "c2")
	if code != 2 || !strings.Contains(stderr, "error: reset of c2: etcd membership is not changed") || !strings.Contains(stderr, "hint:  add --yes") {
		t.Fatalf("part of the control plane: code %d\n%s", code, stderr)
	}
	code, _, stderr = runApp(t, nil, nil, "reset", "-i", inv, "--host", "c9", "--dry-run")
	if code != 2 || !strings.Contains(stderr, "--host c9: no such host") || !strings.Contains(stderr, "the hosts are: c1, c2, w1") {
		t.Fatalf("unknown host: code %d\n%s", code, stderr)
	}
	if dirHash(t, root) != before {
		t.Error("a refused reset changed the directory")
	}
}

// --dry-run prints the plan of every host and changes nothing: the hosts
// are sent the reset's read only (the fakes refuse anything else), and the
// state directory, the lock and the inventory stay as they are, no lock
// file made.
func TestResetDryRunChangesNothing(t *testing.T) {
	root, inv := resetDir(t)
	before := dirHash(t, root)
	hosts := map[string]*remotetest.Fake{"c1": afterUp(t, "c1"), "c2": afterUp(t, "c2"), "w1": afterUp(t, "w1")}
	code, stdout, stderr := runApp(t, nil, hosts, "reset", "-i", inv, "--dry-run")
	if code != 0 {
		t.Fatalf("code %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"warning: etcd's data, every object of the cluster, is deleted",
		"[services] would c1: stop and disable hardway-pod-routes.service, kube-scheduler.service",
		"[services] would w1: stop and disable hardway-pod-routes.service, kube-proxy.service, kubelet.service",
		"[files] would w1: remove ",
		"[files]     /usr/local/bin/kubelet\n",
		"[data] would c2: remove with everything in them: /etc/etcd/join.env, /var/lib/etcd, /var/lib/hardway",
		"[user] would c1: delete the system user etcd",
		"Reset will leave:\n",
		"every host reset: the kernel modules the host step loaded",
		"The state directory " + filepath.Join(root, ".hardway") + " (CA, keys, kubeconfigs, backups) and " + filepath.Join(root, "hardway.lock") + " are untouched",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`^reset 3 host\(s\): \d+ change\(s\) planned, nothing changed \(--dry-run\); the state directory \S+ is untouched$`).MatchString(last) {
		t.Errorf("last line %q", last)
	}
	if dirHash(t, root) != before {
		t.Error("a dry run changed the directory")
	}
	if _, err := os.Stat(filepath.Join(root, ".hardway", "lock")); !os.IsNotExist(err) {
		t.Errorf("a lock file was made: %v", err)
	}

	// -o json: the same plan for machines, on stdout.
	code, stdout, stderr = runApp(t, nil, hosts, "reset", "-i", inv, "--dry-run", "--host", "w1", "-o", "json")
	if code != 0 {
		t.Fatalf("json: code %d\n%s", code, stderr)
	}
	var r cluster.ResetResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if !r.DryRun || len(r.Hosts) != 1 || r.Hosts[0].Name != "w1" || r.Hosts[0].Role != "worker" || r.Hosts[0].Changes == 0 ||
		!strings.HasPrefix(r.Summary, "reset 1 host(s): ") || r.StateDir != filepath.Join(root, ".hardway") || len(r.Steps) != 6 {
		t.Errorf("json %+v", r)
	}
	if !strings.Contains(stderr, "[services] would w1: ") {
		t.Errorf("progress not on stderr:\n%s", stderr)
	}
	if dirHash(t, root) != before {
		t.Error("a dry run changed the directory")
	}
}

// The question takes the cluster's name, nothing else.
func TestResetConfirm(t *testing.T) {
	_, invPath := resetDir(t)
	a := &App{Stdout: io.Discard, Stderr: io.Discard, InventoryPath: invPath}
	inv, err := a.loadInventory()
	if err != nil {
		t.Fatal(err)
	}
	for answer, ok := range map[string]bool{"prod\n": true, "  prod  \n": true, "prod": true, "yes\n": false, "\n": false, "": false, "Prod\n": false} {
		a.Stdin = strings.NewReader(answer)
		err := a.confirmReset(inv, inv.Hosts(), 5)
		if (err == nil) != ok {
			t.Errorf("%q: %v", answer, err)
		}
		if err != nil && !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("%q: %v", answer, err)
		}
	}
}
