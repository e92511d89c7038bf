package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The acceptance of the render issue, through the command: for 1.30 and
// 1.37, the tree holds every unit, nothing forbidden, and the apiserver
// always has --service-cluster-ip-range.
func TestRenderTree(t *testing.T) {
	for _, v := range []string{"1.30", "1.37"} {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			inv := filepath.Join(dir, "inventory.yaml")
			os.WriteFile(inv, []byte(`kubernetesVersion: "`+v+`"
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
  - {name: controller-2, address: 10.240.0.12}
  - {name: controller-3, address: 10.240.0.13}
`), 0o644)
			out := filepath.Join(dir, "rendered")
			if code, _, stderr := run(t, "render", "-i", inv, "--out", out); code != 0 {
				t.Fatalf("render: %d %s", code, stderr)
			}
			n := 0
			filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				n++
				b, _ := os.ReadFile(p)
				for _, bad := range []string{"--kubelet-https", "--address=", "--port=", "v1beta1", "v1alpha1", "api/all", "${"} {
					if strings.Contains(string(b), bad) {
						t.Errorf("%s contains %q", p, bad)
					}
				}
				if filepath.Base(p) == "kube-apiserver.service" && !strings.Contains(string(b), "--service-cluster-ip-range=10.32.0.0/24") {
					t.Errorf("%s lacks --service-cluster-ip-range", p)
				}
				return nil
			})
			if n != 3*8+3 { // 8 rendered files per host + 3 manifests
				t.Errorf("%d files in the tree, want 27", n)
			}
			for _, h := range []string{"controller-1", "controller-2", "controller-3"} {
				for _, u := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
					if _, err := os.Stat(filepath.Join(out, h, "etc/systemd/system", u+".service")); err != nil {
						t.Error(err)
					}
				}
				m, err := os.ReadFile(filepath.Join(out, h+".manifest"))
				if err != nil || !strings.Contains(string(m), "/etc/etcd/etcd-server.key 0600 root:root restart=etcd from=key etcd-server-"+h) {
					t.Errorf("%s.manifest: %v\n%s", h, err, m)
				}
			}
		})
	}
}

func TestRenderExplainAndHost(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	os.WriteFile(inv, []byte("controlPlane:\n  - {name: cp-1, address: 10.240.0.11}\n  - {name: cp-2, address: 10.240.0.12}\n  - {name: cp-3, address: 10.240.0.13}\n"), 0o644)
	code, stdout, stderr := run(t, "render", "-i", inv, "--explain", "--host", "cp-2")
	if code != 0 {
		t.Fatalf("render --explain: %d %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "# cp-2\n") || strings.Contains(stdout, "# cp-1") ||
		!strings.Contains(stdout, "--service-cluster-ip-range=10.32.0.0/24") || !strings.Contains(stdout, "ALWAYS set") {
		t.Errorf("explain output:\n%s", stdout)
	}
	code, stdout, _ = run(t, "render", "-i", inv)
	if code != 0 || !strings.Contains(stdout, "==> cp-3:/etc/systemd/system/etcd.service <==\n[Unit]") {
		t.Errorf("render to stdout: %d\n%.300s", code, stdout)
	}
	code, _, stderr = run(t, "render", "-i", inv, "--host", "cp-9")
	if code != 2 || !strings.Contains(stderr, `"cp-9" is not a host of the inventory`) || !strings.Contains(stderr, "cp-1 cp-2 cp-3") {
		t.Errorf("unknown host: %d %s", code, stderr)
	}
}
