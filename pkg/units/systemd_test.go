package units

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// systemdRoot builds a directory systemd-analyze can use as --root: the
// host's own unit directory (sysinit.target, network-online.target, ... that
// every service depends on) plus a stub executable at each binary path the
// manifest installs. A unit whose ExecStart names any other binary still
// fails verify, as it would on the host.
func systemdRoot(t *testing.T, ms ...Manifest) string {
	t.Helper()
	root := t.TempDir()
	var src string
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			src = d
			break
		}
	}
	if src == "" {
		t.Fatal("no systemd unit directory with sysinit.target: install systemd (hack/setup.sh does)")
	}
	if err := copyTree(src, filepath.Join(root, "usr/lib/systemd/system")); err != nil {
		t.Fatal(err)
	}
	// ip and iptables are the host's own (iproute2, iptables), for the pod
	// routes unit.
	bins := []string{ipCommand, iptablesCommand, ip6tablesCommand, "/sbin/modprobe", "/sbin/sysctl"}
	for _, m := range ms {
		for _, f := range m.Files {
			if f.Source != nil && f.Source.Kind == SourceBinary {
				bins = append(bins, f.Path)
			}
		}
	}
	for _, b := range bins {
		p := filepath.Join(root, b)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, UnitDir), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// copyTree copies regular files and recreates symlinks (unit aliases).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		}
		return nil
	})
}

// verify runs systemd-analyze verify on units (name -> content) installed
// in root and returns its combined complaints. systemd-analyze exits 0 on
// unknown keys and bad values, so any output at all is a failure.
func verify(t *testing.T, root string, units map[string][]byte) string {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install systemd (hack/setup.sh does)")
	}
	dir := filepath.Join(root, UnitDir)
	old, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	for _, o := range old {
		os.Remove(o)
	}
	args := []string{"verify", "--root=" + root}
	for name, b := range units {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, name)
	}
	cmd := exec.Command(sa, args...)
	// An inherited SYSTEMD_LOG_LEVEL=crit would silence exactly what we look for.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SYSTEMD_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	out := strings.TrimSpace(stderr.String() + stdout.String())
	if err != nil && out == "" {
		out = err.Error()
	}
	return out
}

func hostUnits(m Manifest) map[string][]byte {
	out := map[string][]byte{}
	for _, f := range m.Files {
		if f.Source == nil && strings.HasPrefix(f.Path, UnitDir+"/") {
			out[filepath.Base(f.Path)] = f.Content
		}
	}
	return out
}

func TestSystemdAnalyzeVerify(t *testing.T) {
	// Binary names do not depend on the version: one root serves all cases.
	base, err := render(t, newInventory(t, "1.36", ""))
	if err != nil {
		t.Fatal(err)
	}
	root := systemdRoot(t, base...)
	for _, v := range supported {
		t.Run(v.k8s+"/"+v.etcd, func(t *testing.T) {
			ms, err := render(t, newInventory(t, v.k8s, v.etcd))
			if err != nil {
				t.Fatal(err)
			}
			// Hosts differ only in addresses (checkArg vets those); every host
			// for the acceptance versions, the first one for the rest.
			if v.k8s != "1.30" && v.k8s != "1.37" {
				ms = []Manifest{ms[0], ms[3]}
			}
			for _, m := range ms {
				u := hostUnits(m)
				// 4 control-plane units or 4 worker units (with the node-local
				// load balancer), plus the pod routes.
				if want := map[Role]int{ControlPlane: 5, Worker: 5}[m.Role]; len(u) != want {
					t.Fatalf("%s: %d units, want %d", m.Host, len(u), want)
				}
				if out := verify(t, root, u); out != "" {
					t.Errorf("%s: systemd-analyze verify:\n%s", m.Host, out)
				}
			}
		})
	}
}

// The check above is only worth something if it can fail: each deliberately
// broken unit must make systemd-analyze say something.
func TestSystemdAnalyzeVerifyCatchesBadUnits(t *testing.T) {
	ms, err := render(t, newInventory(t, "1.36", ""))
	if err != nil {
		t.Fatal(err)
	}
	root := systemdRoot(t, ms[0])
	good, _ := ms[0].File(UnitPath(Etcd))
	if out := verify(t, root, map[string][]byte{"etcd.service": good.Content}); out != "" {
		t.Fatalf("the unmodified unit must pass first:\n%s", out)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"unknown key", "RestartSec=5", "RestartSecs=5"},
		{"bad value", "Restart=on-failure", "Restart=on-failur"},
		{"bad type", "Type=notify", "Type=notifyy"},
		{"binary not installed", "ExecStart=/usr/local/bin/etcd ", "ExecStart=/usr/local/bin/etcd3 "},
		{"relative binary", "ExecStart=/usr/local/bin/etcd ", "ExecStart=etcd/etcd "},
		{"unknown section", "[Service]", "[Servcie]"},
		{"bad specifier", "--name=controller-1", "--name=%controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(good.Content), tc.old, tc.new, 1)
			if bad == string(good.Content) {
				t.Fatalf("%q not in the unit", tc.old)
			}
			out := verify(t, root, map[string][]byte{"etcd.service": []byte(bad)})
			if out == "" {
				t.Errorf("systemd-analyze verify accepted a unit with %s", tc.name)
			}
			t.Logf("systemd-analyze: %s", out)
		})
	}
}
