package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/go-version"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/state"
)

var reVersionAsk = regexp.MustCompile(`(?m)^echo '?@@([^' ;]+)'?; if`)

// versionHost answers the versions script as a host whose binaries print
// out[path] (a path not in out is not installed).
func versionHost(t *testing.T, name string, out map[string]string) *remotetest.Fake {
	f := remotetest.New(t, name)
	f.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) {
		if !strings.HasPrefix(cmd, "# versions\n") {
			return "", nil
		}
		var b strings.Builder
		for _, g := range reVersionAsk.FindAllStringSubmatch(cmd, -1) {
			b.WriteString("@@" + g[1] + "\n")
			if o, ok := out[g[1]]; ok {
				b.WriteString(o + "\n")
			} else {
				b.WriteString("@missing\n")
			}
		}
		return b.String(), nil
	})
	return f
}

func controlPlaneAt(k8s, etcd string) map[string]string {
	return map[string]string{
		"/usr/local/bin/etcd":                    "etcd Version: " + etcd + "\nGit SHA: 1a2b3c\nGo Version: go1.24.6\nGo OS/Arch: linux/amd64",
		"/usr/local/bin/kube-apiserver":          "Kubernetes v" + k8s,
		"/usr/local/bin/kube-controller-manager": "Kubernetes v" + k8s,
		"/usr/local/bin/kube-scheduler":          "Kubernetes v" + k8s,
	}
}

func workerAt(k8s string) map[string]string {
	return map[string]string{
		"/usr/local/bin/containerd": "containerd github.com/containerd/containerd/v2 v2.4.2 0f6d3ed1b6a0",
		"/usr/local/sbin/runc":      "runc version 1.5.3\ncommit: v1.5.3-0-g1234567\nspec: 1.2.1",
		"/usr/local/bin/kubelet":    "Kubernetes v" + k8s,
		"/usr/local/bin/kube-proxy": "Kubernetes v" + k8s,
	}
}

type upgradeFixture struct {
	c     *Cluster
	hosts map[string]*remotetest.Fake
	api   *fake.Clientset
	root  string
}

// newUpgradeFixture: c1..c3 and w1, w2 at the versions given; down hosts
// cannot be reached.
func newUpgradeFixture(t *testing.T, cp, workers map[string]map[string]string, nodes map[string]string, down ...string) *upgradeFixture {
	t.Helper()
	root := t.TempDir()
	text := "kubernetesVersion: v1.35.4\ncontrolPlane:\n  - {name: c1, address: 10.240.0.11}\n  - {name: c2, address: 10.240.0.12}\n  - {name: c3, address: 10.240.0.13}\n" +
		"workers:\n  - {name: w1, address: 10.240.0.21}\n  - {name: w2, address: 10.240.0.22}\n"
	p := filepath.Join(root, "inventory.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Parse(p, p, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	fx := &upgradeFixture{hosts: map[string]*remotetest.Fake{}, root: root}
	for name, out := range cp {
		fx.hosts[name] = versionHost(t, name, out)
	}
	for name, out := range workers {
		fx.hosts[name] = versionHost(t, name, out)
	}
	var objs []runtime.Object
	for name, v := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: v}}})
	}
	fx.api = fake.NewClientset(objs...)
	fx.c = New(inv, Options{State: state.Dir(filepath.Join(root, ".hardway")), Connect: func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		for _, d := range down {
			if d == cfg.Name {
				return nil, errors.New("dial tcp " + cfg.Address + ":22: connect: no route to host")
			}
		}
		if f, ok := fx.hosts[cfg.Name]; ok {
			return f, nil
		}
		return nil, errors.New("no fake host " + cfg.Name)
	}})
	fx.c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return fx.api, nil }
	return fx
}

func healthy(k8s, etcd string) (cp, workers map[string]map[string]string, nodes map[string]string) {
	cp = map[string]map[string]string{"c1": controlPlaneAt(k8s, etcd), "c2": controlPlaneAt(k8s, etcd), "c3": controlPlaneAt(k8s, etcd)}
	workers = map[string]map[string]string{"w1": workerAt(k8s), "w2": workerAt(k8s)}
	nodes = map[string]string{"w1": "v" + k8s, "w2": "v" + k8s}
	return cp, workers, nodes
}

func violations(p *UpgradePlan) []string {
	var out []string
	for _, v := range p.Violations {
		out = append(out, v.Rule+" "+v.Host+": "+v.Message)
	}
	return out
}

// 'hardway upgrade plan' only reads: every host is asked its versions and
// nothing else that writes, the API is only read, and the local directory
// (inventory, state) is unchanged. The plan itself: 1.35 → 1.36 with every
// component moving and nothing blocking.
func TestUpgradePlanOnlyReads(t *testing.T) {
	cp, workers, nodes := healthy("1.35.4", "3.6.16")
	fx := newUpgradeFixture(t, cp, workers, nodes)
	before := treeHash(t, fx.root)
	p, err := fx.c.PlanUpgrade(context.Background(), UpgradeOptions{To: "v1.36.3"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Blocked() {
		t.Errorf("blocked: %q", violations(p))
	}
	if p.Target.Kubernetes != "v1.36.3" || p.Target.Etcd != "v3.6.16" || p.Target.Containerd != "v2.4.2" {
		t.Errorf("target %+v", p.Target)
	}
	var moves []string
	for _, m := range p.Moves {
		moves = append(moves, m.Host+" "+m.Component+" "+m.Now+" "+m.Target+" "+m.Change)
	}
	for _, want := range []string{"c1 kube-apiserver v1.35.4 v1.36.3 upgrade", "c3 etcd v3.6.16 v3.6.16 none",
		"w2 runc v1.5.3 v1.5.3 none", "w2 kubelet v1.35.4 v1.36.3 upgrade", "w1 kube-proxy v1.35.4 v1.36.3 upgrade"} {
		if !strings.Contains(strings.Join(moves, "\n"), want) {
			t.Errorf("moves lack %q:\n%s", want, strings.Join(moves, "\n"))
		}
	}
	if len(moves) != 20 {
		t.Errorf("%d moves, want 3×4 + 2×4", len(moves))
	}
	for name, f := range fx.hosts {
		cmds := f.Commands()
		if len(cmds) == 0 {
			t.Fatalf("%s was never asked anything: the test proves nothing", name)
		}
		assertReadOnly(t, name, cmds)
	}
	for _, a := range fx.api.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("the API was sent a %s %s", v, a.GetResource().Resource)
		}
	}
	if after := treeHash(t, fx.root); after != before {
		t.Error("the local directory (inventory, state) changed")
	}
}

// The acceptance cases, end to end from what the hosts answer: a skipped
// minor, a kubelet newer than the apiservers, an etcd below the patch
// floor; and an unreachable host blocks with a hint but the rest is read.
func TestUpgradePlanRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		to     string
		change func(cp, workers map[string]map[string]string, nodes map[string]string)
		down   []string
		want   string
		fix    string
	}{
		{name: "skipped minor", to: "1.37", want: "control-plane-one-minor c1: kube-apiserver on c1 runs v1.35.4; v1.37.0 skips 1.36",
			fix: "upgrade to v1.36.x first: hardway upgrade apply --to 1.36"},
		{name: "kubelet newer than the apiservers", to: "v1.36.3",
			change: func(cp, workers map[string]map[string]string, nodes map[string]string) {
				for _, h := range []string{"c1", "c2", "c3"} {
					cp[h] = controlPlaneAt("1.36.3", "3.6.16")
				}
				workers["w2"]["/usr/local/bin/kubelet"] = "Kubernetes v1.37.1"
			},
			want: "kubelet-kube-proxy w2: kubelet on w2 runs v1.37.1, newer than the oldest apiserver (v1.36.3 on c1)"},
		{name: "etcd below the patch floor", to: "v1.34.5",
			change: func(cp, workers map[string]map[string]string, nodes map[string]string) {
				for _, h := range []string{"c1", "c2", "c3"} {
					cp[h] = controlPlaneAt("1.33.7", "3.5.24")
				}
				for _, w := range []string{"w1", "w2"} {
					workers[w] = workerAt("1.33.7")
					nodes[w] = "v1.33.7"
				}
			},
			want: "etcd-patch-floor c2: etcd on c2 runs v3.5.24; moving to 3.6 needs v3.5.26 or later first",
			fix:  "set etcdVersion: v3.5.26"},
		{name: "an unreachable host", to: "v1.36.3", down: []string{"c3"},
			want: "unreadable c3: cannot read the etcd version on c3: dial tcp 10.240.0.13:22: connect: no route to host",
			fix:  "hardway verify"},
		{name: "a worker whose Node is not registered", to: "v1.36.3",
			change: func(_, _ map[string]map[string]string, nodes map[string]string) { delete(nodes, "w1") },
			want:   "unreadable w1: cannot read the kubelet version on w1: no Node w1 is registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, workers, nodes := healthy("1.35.4", "3.6.16")
			if tc.change != nil {
				tc.change(cp, workers, nodes)
			}
			fx := newUpgradeFixture(t, cp, workers, nodes, tc.down...)
			p, err := fx.c.PlanUpgrade(context.Background(), UpgradeOptions{To: tc.to})
			if err != nil {
				t.Fatal(err)
			}
			if !p.Blocked() {
				t.Fatal("not blocked")
			}
			got := strings.Join(violations(p), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("violations lack %q:\n%s", tc.want, got)
			}
			var fixes []string
			for _, v := range p.Violations {
				fixes = append(fixes, v.Fix)
			}
			if !strings.Contains(strings.Join(fixes, "\n"), tc.fix) {
				t.Errorf("fixes lack %q: %q", tc.fix, fixes)
			}
			for name, f := range fx.hosts {
				assertReadOnly(t, name, f.Commands())
			}
		})
	}
}

// Without --to the target is the minor after the running control plane,
// resolved to its newest patch; an unresolvable minor falls back to the
// inventory's own version of it.
func TestUpgradePlanTarget(t *testing.T) {
	cp, workers, nodes := healthy("1.35.4", "3.6.16")
	fx := newUpgradeFixture(t, cp, workers, nodes)
	var asked string
	p, err := fx.c.PlanUpgrade(context.Background(), UpgradeOptions{LatestPatch: func(_ context.Context, minor string) (*version.Version, error) {
		asked = minor
		return version.NewVersion("1.36.7")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if asked != "1.36" || p.Target.Kubernetes != "v1.36.7" {
		t.Errorf("asked %q, target %s", asked, p.Target.Kubernetes)
	}
	p, err = fx.c.PlanUpgrade(context.Background(), UpgradeOptions{To: "1.35", LatestPatch: func(context.Context, string) (*version.Version, error) {
		return nil, errors.New("offline")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Target.Kubernetes != "v1.35.4" || len(p.Notes) == 0 {
		t.Errorf("target %s, notes %q", p.Target.Kubernetes, p.Notes)
	}
	if _, err := fx.c.PlanUpgrade(context.Background(), UpgradeOptions{To: "1.x"}); err == nil {
		t.Error("--to 1.x accepted")
	}
}
