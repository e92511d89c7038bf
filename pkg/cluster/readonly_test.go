package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
)

// treeHash is every file's path, mode, size, mtime and content under dir.
func treeHash(t *testing.T, dir string) string {
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
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			io.Copy(h, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// Every step's Plan, run as `up --dry-run --remove-stale-members` on a
// cluster with an unstarted extra etcd member, a drifted unit, a stopped
// service and a SAN change, plans the fixes and changes nothing: no host is
// sent a command that writes, etcd's membership is not touched, the API is
// only read, and the local directory (inventory, state, cache) is unchanged.
func TestEveryPlanOnlyReads(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	base := "controlPlane:\n  - {name: c1, address: 10.240.0.11}\n  - {name: c2, address: 10.240.0.12}\n  - {name: c3, address: 10.240.0.13}\n"
	write := func(text string) *inventory.Inventory {
		p := filepath.Join(root, "inventory.yaml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		inv, err := inventory.Parse(p, p, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	st := state.Dir(filepath.Join(root, ".hardway"))
	old := write(base)
	if _, err := generatedIn(ctx, old, st); err != nil {
		t.Fatal(err)
	}
	// The SAN change: a load balancer in front of the apiservers.
	inv := write(base + "network:\n  apiServerEndpoint: 10.240.0.100\n")

	fc := newFakeCluster(t, inv, Options{State: st, RemoveStaleMembers: true, Release: releaseOptionsIn(inv, root)}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	unstarted := etcd.Member{ID: 0x63, PeerURLs: []string{"https://10.240.0.99:2380"}}
	fc.etcd.members = append(fc.etcd.members, unstarted)
	unit := "/etc/systemd/system/kube-controller-manager.service"
	fc.model["c2"].files[unit] = "644 root 0 root 0 9 0000"
	fc.model["c3"].units[units.Scheduler] = remote.UnitState{State: "inactive", Enabled: true}
	api := fake.NewClientset()
	fc.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }

	before := treeHash(t, root)
	res, err := (&plan.Runner{Out: io.Discard, DryRun: true}).Run(ctx, fc.Steps())
	if err != nil {
		t.Fatal(err)
	}

	kinds := map[plan.Kind][]string{}
	for _, s := range res.Steps {
		for _, a := range s.Actions {
			kinds[a.Kind] = append(kinds[a.Kind], s.Name+" "+a.Host+": "+a.Desc)
		}
	}
	for k, want := range map[plan.Kind]string{
		plan.Reissue:    "pki : generate",
		plan.Write:      "push c2: write " + unit,
		plan.Restart:    "control-plane c2: kube-controller-manager: restart",
		plan.Start:      "control-plane c3: kube-scheduler: start",
		plan.Membership: "etcd : remove stale etcd member (never started) (id 63",
		plan.Apply:      "rbac : apply ClusterRole",
	} {
		if !strings.Contains(strings.Join(kinds[k], "\n"), want) {
			t.Errorf("%s actions %q lack %q", k, kinds[k], want)
		}
	}

	for _, h := range inv.ControlPlane {
		cmds := fc.commands(h.Name)
		if len(cmds) == 0 {
			t.Fatalf("%s was never asked anything: the test proves nothing", h.Name)
		}
		assertReadOnly(t, h.Name, cmds)
	}
	if m := fc.etcd.mutations(); len(m) > 0 {
		t.Errorf("etcd changed: %q", m)
	}
	for _, a := range api.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("the API was sent a %s %s", v, a.GetResource().Resource)
		}
	}
	if after := treeHash(t, root); after != before {
		t.Error("the local directory (inventory, state, cache) changed")
	}
}

// The read-only check itself catches what a Do sends.
func TestAssertReadOnlyCatchesWrites(t *testing.T) {
	for _, cmd := range []string{
		"install -d -m 700 -o root -g root /var/lib/hardway/restart",
		"mkdir -p -m 0700 /var/lib/hardway/restart && touch /var/lib/hardway/restart/etcd",
		"rm -f /var/lib/hardway/restart/etcd",
		"systemctl restart -- etcd.service",
		"systemctl daemon-reload",
		"cat > /etc/x",
		"# record 1 sums\nc=/var/lib/hardway/sums; mv -f \"$n\" \"$c\"",
		"modprobe br_netfilter",
		"sysctl -qw net.ipv4.ip_forward=1",
		"DEBIAN_FRONTEND=noninteractive apt-get install -y conntrack",
		"dnf install -y conntrack-tools",
		"ufw allow 10250/tcp comment 'hardway: kubelet secure'",
		"ufw route allow from 10.200.0.0/16",
		"firewall-cmd --permanent --zone=trusted --add-source=10.200.0.0/16",
		"firewall-cmd --add-port=10250/tcp",
		"umount -l -- /var/lib/kubelet/pods/x",
		"userdel etcd",
		"groupdel etcd",
		"rmdir --ignore-fail-on-non-empty -- /etc/etcd",
		"ip route flush proto 70",
		"ip -6 route flush proto 70",
		"ip link delete cni0",
		"iptables -w -t nat -D POSTROUTING -s 10.200.0.0/16",
		"nft delete table ip kube-proxy",
		"/usr/local/bin/crictl --runtime-endpoint unix:///run/containerd/containerd.sock rmp --all --force",
		"/usr/local/bin/kube-proxy --cleanup",
		"systemctl reset-failed -- etcd.service",
		"find /var/lib/etcd -mindepth 1 -delete",
	} {
		rt := &recordingT{TB: t}
		assertReadOnly(rt, "c1", []string{cmd})
		if !rt.failed {
			t.Errorf("not caught: %q", cmd)
		}
	}
	rt := &recordingT{TB: t}
	c := New(&inventory.Inventory{Workers: []inventory.Host{{Name: "w1"}}}, Options{})
	assertReadOnly(rt, "c1", []string{snapshotScript(), "head -c 65536 /etc/x", "ls -1 /x 2>/dev/null || true",
		c.hostPrepScript(inventory.Host{Name: "w1"}), workerFactsScript(), readRegistryFilesCmd,
		resetFactsScript(units.Footprint{Units: []string{"etcd.service"}, Files: []string{units.EtcdSysusersConf}, Dirs: []string{units.EtcdDir}, State: []string{units.EtcdDataDir}})})
	if rt.failed {
		t.Error("read-only commands flagged")
	}
}

type recordingT struct {
	testing.TB
	failed bool
}

func (r *recordingT) Errorf(string, ...any) { r.failed = true }
func (r *recordingT) Helper()               {}

func generatedIn(ctx context.Context, inv *inventory.Inventory, st state.Dir) ([]pki.Result, error) {
	return pki.Generate(ctx, inv, st, pki.Options{})
}

// releaseOptionsIn points the release cache into root (empty: nothing cached).
func releaseOptionsIn(inv *inventory.Inventory, root string) release.Options {
	o := release.OptionsFor(inv)
	o.CacheDir = filepath.Join(root, "cache")
	return o
}
