package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
)

func TestFsyncP99SubtractsProcessCost(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&b, "s %d\n", 3_000_000+i*10_000) // 3.01 .. 3.5 ms
	}
	for i := 0; i < 10; i++ {
		b.WriteString("b 1000000\n") // 1 ms to fork dd
	}
	if got, want := fsyncP99(b.String()), 2500*time.Microsecond; got != want {
		t.Fatalf("p99 = %s, want %s", got, want)
	}
	if fsyncP99("garbage") != 0 {
		t.Fatal("no samples must give 0")
	}
}

func testInventory(t *testing.T) *inventory.Inventory {
	t.Helper()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
`))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestHostFacts(t *testing.T) {
	now := time.Now().UnixNano()
	cases := []struct {
		name     string
		facts    string
		fsync    string
		problems []string
		warnings []string
		took     time.Duration // on the host, between the two clock readings
		skipped  bool
	}{
		{"healthy", fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\nport 0.0.0.0:22 users:((\"sshd\",pid=1))\nport 10.240.0.11:2379 users:((\"etcd\",pid=9))\nport *:10257 users:((\"kube-controller\",pid=10,fd=5))\n", now),
			"s 2000000\nb 1000000\n", nil, nil, 0, false},
		// The probe took 3s on the host: not part of the round trip, so the
		// clock is not taken for 1.5s off.
		{"healthy, slow probe", fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\n", now),
			"s 2000000\nb 1000000\n", nil, nil, 3 * time.Second, false},
		{"etcd runs: no probe", fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\n", now),
			"fsync skipped\n", nil, nil, 0, true},
		{"wrong arch, no systemd, port taken, slow disk, skewed clock",
			fmt.Sprintf("%d\nLinux\naarch64\nno-systemd\n1024\nport *:6443 users:((\"nginx\",pid=7))\n", now+int64(10*time.Second)),
			"s 50000000\nb 1000000\n",
			[]string{"architecture aarch64 (arm64), but the inventory's arch: amd64", "systemd is not running", "only 1 MiB free", "port 6443 is taken by users:((\"nginx\"", "s off this machine's"},
			[]string{"fsync p99 49ms"}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := remotetest.New(t, "c1")
			// One command: the facts, then the fsync probe (unless etcd
			// runs), then the clock again.
			f.ExpectMatch(`(?s)^date \+%s%N\nuname -s.*systemctl is-active --quiet etcd.service.*dd if=/dev/zero.*end \$\(date`).Returns(
				c.facts + c.fsync + fmt.Sprintf("end %d\n", now+int64(c.took)))
			cl := New(testInventory(t), Options{})
			hf, err := cl.hostFacts(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			check := func(kind string, got, want []string) {
				if len(got) != len(want) {
					t.Fatalf("%s: got %q, want %d matching %q", kind, got, len(want), want)
				}
				for i := range want {
					if !strings.Contains(got[i], want[i]) {
						t.Errorf("%s %d = %q, want it to contain %q", kind, i, got[i], want[i])
					}
				}
			}
			check("problems", hf.Problems, c.problems)
			check("warnings", hf.Warnings, c.warnings)
			if hf.FsyncSkipped != c.skipped || abs(hf.Skew) > time.Second && c.problems == nil {
				t.Errorf("fsync skipped %v, skew %s", hf.FsyncSkipped, hf.Skew)
			}
		})
	}
}

// A host whose uname -m is not its architecture in the inventory (its own
// arch:, else the top-level one) is refused with the line to write.
func TestPreflightArchPerHost(t *testing.T) {
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
workers:
  - {name: w1, address: 10.240.0.21}
  - {name: w2, address: 10.240.0.22, arch: arm64}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := New(inv, Options{})
	for _, tc := range []struct {
		host, uname string
		want        []string // nil: no problem
	}{
		{"c1", "x86_64", nil},
		{"w2", "aarch64", nil},
		{"w1", "aarch64", []string{"architecture aarch64 (arm64), but the inventory's arch: amd64", "set arch: arm64 on this host in the inventory", "or arch: arm64 at the top level"}},
		{"w2", "x86_64", []string{"architecture x86_64 (amd64), but its arch: arm64 in the inventory", "the arm64 binaries would not run there", "set arch: amd64 on this host"}},
		{"c1", "armv7l", []string{"architecture armv7l, which hardway has no release binaries for (it installs amd64 and arm64)"}},
	} {
		got := c.archProblem(tc.host, tc.uname)
		if tc.want == nil {
			if got != "" {
				t.Errorf("%s %s: %q", tc.host, tc.uname, got)
			}
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %s: %q lacks %q", tc.host, tc.uname, got, w)
			}
		}
	}
}

func TestSnapshotParsesUnitsMarkersAndData(t *testing.T) {
	f := remotetest.New(t, "c1")
	f.ExpectMatch(`^echo '@units'; systemctl show -p Id .* -- etcd.service kube-apiserver.service kube-controller-manager.service kube-scheduler.service\n`).Returns("@units\n" +
		"Id=etcd.service\nActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\nActiveEnterTimestamp=Sun 2026-11-29 22:33:56 UTC\n\n" +
		"Id=kube-apiserver.service\nActiveState=failed\nUnitFileState=disabled\nNeedDaemonReload=yes\nActiveEnterTimestamp=\n\n" +
		"ActiveState=inactive\nUnitFileState=enabled\nNeedDaemonReload=no\nId=kube-controller-manager.service\n\n" +
		"Id=kube-scheduler.service\nActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\n" +
		"@restart\nkube-apiserver\n@data\nyes\n")
	cl := New(testInventory(t), Options{Connect: func(context.Context, remote.Config) (remote.Host, error) { return f, nil }})
	// What a dry-run push planned reaches the snapshot as plan data.
	earlier := plan.Planned{{Host: "c1", Kind: plan.Write, Restarts: []string{"kube-scheduler"}}, {Host: "c2", Kind: plan.Write, Restarts: []string{"etcd"}}}
	sns, err := cl.snapshots(context.Background(), earlier)
	if err != nil {
		t.Fatal(err)
	}
	sn := sns["c1"]
	e, a := sn.Units["etcd"], sn.Units["kube-apiserver"]
	cm, s := sn.Units["kube-controller-manager"], sn.Units["kube-scheduler"]
	if !e.Active || !e.Enabled || e.NeedReload || a.Active || a.Enabled || !a.NeedReload || !sn.EtcdData ||
		cm.Active || !cm.Enabled || cm.State != "inactive" || !s.Active || len(sn.Units) != 4 {
		t.Fatalf("%+v", sn)
	}
	if !sn.Pending["kube-apiserver"] || !sn.Pending["kube-scheduler"] || sn.Pending["etcd"] {
		t.Fatalf("pending %v", sn.Pending)
	}
}

// On a worker, 6443 belongs to the node-local load balancer: the control
// plane's port table must not call it taken (a second up refused to run).
func TestHostFactsWorkerPortIsTheLoadBalancers(t *testing.T) {
	now := time.Now().UnixNano()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
workers:
  - {name: w1, address: 10.240.0.21}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"w1": false, "c1": true} {
		f := remotetest.New(t, name)
		// A worker's facts come in the same command (one round trip).
		facts, workerFacts := `(?s)^date \+%s%N\nuname -s.*end \$\(date`, ""
		if name == "w1" {
			facts = `(?s)^date \+%s%N\nuname -s.*echo "cgroupfs.*end \$\(date`
			workerFacts = "cgroupfs cgroup2fs\ntool ip yes\ntool modprobe yes\ntool iptables yes\ntool iptables-restore yes\ntool iptables-save yes\ntool nft yes\ntool conntrack yes\n"
		}
		f.ExpectMatch(facts).Returns(
			fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\nport 127.0.0.1:6443 users:((\"traefik\",pid=7,fd=5))\nfsync skipped\n%send %d\n", now, workerFacts, now))
		hf, err := New(inv, Options{}).hostFacts(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(hf.Problems) > 0; got != want {
			t.Errorf("%s: problems %q, want some: %v", name, hf.Problems, want)
		}
	}
}

// A worker's own ports are checked too: 6443 and 6444 belong to the
// node-local load balancer and 10250 to the kubelet, so another process
// holding one of them is a preflight problem, named with its owner. With
// no node-local load balancer, 6443 on a worker is nobody's business.
func TestHostFactsWorkerPortsTaken(t *testing.T) {
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		lb, port, owner string
		want            string // "" for no problem
	}{
		{"node-local", "6443", "traefik", ""},
		{"node-local", "6443", "nginx", "port 6443 is taken"},
		{"node-local", "6444", "python3", "port 6444 is taken"},
		{"node-local", "10250", "kubelet", ""},
		{"node-local", "10250", "sshd", "port 10250 is taken"},
		{"none", "6443", "nginx", ""},
		{"none", "10250", "sshd", "port 10250 is taken"},
	} {
		inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
network:
  apiServerLoadBalancer: `+tc.lb+`
workers:
  - {name: w1, address: 10.240.0.21}
`))
		if err != nil {
			t.Fatal(err)
		}
		f := remotetest.New(t, "w1")
		f.ExpectMatch(`(?s)^date \+%s%N\nuname -s.*echo "cgroupfs.*end \$\(date`).Returns(
			fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\nport 127.0.0.1:%s users:((\"%s\",pid=7,fd=5))\ncgroupfs cgroup2fs\ntool ip yes\ntool modprobe yes\ntool iptables yes\ntool iptables-restore yes\ntool iptables-save yes\ntool nft yes\ntool conntrack yes\nend %d\n", now, tc.port, tc.owner, now))
		hf, err := New(inv, Options{}).hostFacts(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(hf.Problems, "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("lb %s, %s on %s: problems %q, want %q", tc.lb, tc.owner, tc.port, got, tc.want)
		}
	}
}

func TestSystemdVersionProblem(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"Linux\nsystemd-version 252\n", ""},
		{"Linux\nsystemd-version 247\n", ""},
		{"Linux\nsystemd-version 245\n", "systemd 245: etcd.service needs 247 or later"},
		{"Linux\nsystemd-version \n", "cannot tell the systemd version"},
		{"Linux\n", ""},
	} {
		if got := systemdVersionProblem(tc.out); tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.out, got, tc.want)
		}
	}
}
