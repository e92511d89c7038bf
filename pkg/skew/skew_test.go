package skew

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-version"
)

func v(s string) *version.Version { return version.Must(version.NewVersion(s)) }

// cluster is what a healthy hardway cluster at k8s/etcd runs: three
// control-plane hosts and two workers, every Node registered.
type cluster struct {
	obs []Observation
}

func newCluster(k8s, etcd string) *cluster {
	c := &cluster{}
	for _, h := range []string{"c1", "c2", "c3"} {
		c.set(h, Etcd, etcd)
		for _, comp := range []string{APIServer, ControllerManager, Scheduler} {
			c.set(h, comp, k8s)
		}
	}
	for _, h := range []string{"w1", "w2"} {
		c.set(h, Containerd, "2.4.2")
		c.set(h, Runc, "1.5.3")
		c.set(h, Kubelet, k8s)
		c.set(h, KubeProxy, k8s)
		c.obs = append(c.obs, Observation{Host: h, Component: Kubelet, Source: FromNode, Version: v(k8s)})
	}
	return c
}

// set sets the binary version of comp on host ("" = could not be read).
func (c *cluster) set(host, comp, ver string) *cluster {
	o := Observation{Host: host, Component: comp, Source: FromBinary, Raw: ver}
	if ver == "" {
		o.Err = "ssh: connect to host: no route to host"
	} else {
		o.Version = v(ver)
	}
	for i, x := range c.obs {
		if x.Host == host && x.Component == comp && x.Source == FromBinary {
			c.obs[i] = o
			return c
		}
	}
	c.obs = append(c.obs, o)
	return c
}

// node sets the kubelet version host's Node reports.
func (c *cluster) node(host, ver string) *cluster {
	for i, x := range c.obs {
		if x.Host == host && x.Component == Kubelet && x.Source == FromNode {
			c.obs[i].Version = v(ver)
		}
	}
	return c
}

func target(k8s, etcd string) Target {
	return Target{Kubernetes: v(k8s), Etcd: v(etcd), Containerd: v("2.4.2"), Runc: v("1.5.3")}
}

// The rule table. Sources, as cited in rules.go:
//   - kubernetes.io/releases/version-skew-policy: apiservers within one
//     minor; controller-manager/scheduler not newer than any apiserver and
//     at most one older; kubelet/kube-proxy not newer, at most three older;
//     upgrade order and one minor at a time.
//   - etcd.io/docs/v3.6/upgrades/upgrading-etcd: one minor at a time;
//     etcd.io/docs/latest/upgrades/upgrade_3_6: 3.5.26 or later before 3.6.
//   - kubeadm cmd/kubeadm/app/constants SupportedEtcdVersion: the etcd of
//     each Kubernetes minor (pkg/inventory's etcdTable).
//   - Kubernetes 1.35 release notes: the last release with containerd 1.x.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  *cluster
		target   Target
		allow    bool
		want     []string // "rule host" of every violation, in order; nil: the upgrade may go
		wantFix  string   // a fix that must be among the violations'
		wantMsg  string
		wantMove string // "host component now target change" that must be among the moves
	}{
		{
			name:     "1.35 to 1.36, everything moves",
			cluster:  newCluster("1.35.4", "3.6.16"),
			target:   target("1.36.3", "3.6.16"),
			wantMove: "w1 kubelet v1.35.4 v1.36.3 upgrade",
		},
		{
			name:    "1.35 to 1.37 skips 1.36",
			cluster: newCluster("1.35.4", "3.6.16"),
			target:  target("1.37.0", "3.7.0"),
			want:    []string{"control-plane-one-minor c1", "control-plane-one-minor c2", "control-plane-one-minor c3"},
			wantMsg: "v1.37.0 skips 1.36",
			wantFix: "upgrade to v1.36.x first: hardway upgrade apply --to 1.36",
		},
		{
			name:    "kubelet newer than the apiservers",
			cluster: newCluster("1.36.3", "3.6.16").set("w2", Kubelet, "1.37.0"),
			target:  target("1.36.3", "3.6.16"),
			// The plan would also put it back: a downgrade to refuse.
			want:    []string{"downgrade w2", "kubelet-kube-proxy w2"},
			wantMsg: "kubelet on w2 runs v1.37.0, newer than the oldest apiserver (v1.36.3 on c1)",
		},
		{
			name:    "a Node reports a kubelet newer than the apiservers",
			cluster: newCluster("1.36.3", "3.6.16").node("w1", "1.37.1"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"downgrade w1", "kubelet-kube-proxy w1"},
			wantMsg: "kubelet on w1 (its Node) runs v1.37.1",
		},
		{
			name:    "etcd below the patch floor for 3.6",
			cluster: newCluster("1.33.7", "3.5.24"),
			target:  target("1.34.5", "3.6.16"),
			want:    []string{"etcd-patch-floor c1", "etcd-patch-floor c2", "etcd-patch-floor c3"},
			wantMsg: "etcd on c1 runs v3.5.24; moving to 3.6 needs v3.5.26 or later first",
			wantFix: "set etcdVersion: v3.5.26",
		},
		{
			name:    "etcd at the floor moves to 3.6",
			cluster: newCluster("1.33.7", "3.5.26"),
			target:  target("1.34.5", "3.6.16"),
		},
		{
			name:    "a downgrade",
			cluster: newCluster("1.36.3", "3.6.16"),
			target:  target("1.35.4", "3.6.16"),
			want: []string{"downgrade c1", "downgrade c1", "downgrade c1", "downgrade c2", "downgrade c2", "downgrade c2",
				"downgrade c3", "downgrade c3", "downgrade c3", "downgrade w1", "downgrade w1", "downgrade w1", "downgrade w2", "downgrade w2", "downgrade w2"},
			wantMsg: "kube-apiserver on c1 runs v1.36.3; the target v1.35.4 is a minor downgrade",
			wantFix: "--allow-downgrade",
		},
		{
			name:    "a patch downgrade is named",
			cluster: newCluster("1.36.3", "3.6.16").set("c2", APIServer, "1.36.4"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"downgrade c2"},
			wantMsg: "is a patch downgrade",
		},
		{
			name:    "a downgrade allowed",
			cluster: newCluster("1.36.3", "3.6.16"),
			target:  target("1.35.4", "3.6.16"),
			allow:   true,
		},
		{
			name:    "apiservers two minors apart now",
			cluster: newCluster("1.36.3", "3.6.16").set("c3", APIServer, "1.34.2"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"control-plane-one-minor c3", "apiserver-skew c3", "controller-manager-scheduler c1", "controller-manager-scheduler c1", "controller-manager-scheduler c2", "controller-manager-scheduler c2", "controller-manager-scheduler c3", "controller-manager-scheduler c3", "kubelet-kube-proxy w1", "kubelet-kube-proxy w1", "kubelet-kube-proxy w1", "kubelet-kube-proxy w2", "kubelet-kube-proxy w2", "kubelet-kube-proxy w2"},
			wantMsg: "the apiservers span v1.34.2 (c3) to v1.36.3 (c1)",
		},
		{
			name:    "a controller-manager behind the apiservers skips a minor",
			cluster: newCluster("1.36.3", "3.6.16").set("c1", ControllerManager, "1.35.0"),
			target:  target("1.37.0", "3.7.0"),
			want:    []string{"control-plane-one-minor c1", "controller-manager-scheduler c1"},
			wantMsg: "kube-controller-manager on c1 runs v1.35.0; v1.37.0 skips 1.36",
		},
		{
			name:    "a controller-manager two minors behind an apiserver now",
			cluster: newCluster("1.36.3", "3.6.16").set("c2", ControllerManager, "1.34.6"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"control-plane-one-minor c2", "controller-manager-scheduler c2"},
			wantMsg: "more than one minor older than the oldest apiserver",
		},
		{
			name:    "scheduler two minors behind after the apiservers move",
			cluster: newCluster("1.36.3", "3.6.16").set("c3", Scheduler, "1.35.9"),
			target:  target("1.37.0", "3.7.0"),
			want:    []string{"control-plane-one-minor c3", "controller-manager-scheduler c3"},
			wantFix: "bring the control plane to one version first: hardway upgrade apply --to 1.36",
		},
		{
			name:    "controller-manager newer than an apiserver",
			cluster: newCluster("1.36.3", "3.6.16").set("c1", ControllerManager, "1.37.0"),
			target:  target("1.37.0", "3.7.0"),
			want:    []string{"controller-manager-scheduler c1"},
			wantMsg: "newer than the oldest apiserver",
		},
		{
			name:    "a kubelet that would be four minors behind",
			cluster: newCluster("1.35.4", "3.6.16").set("w1", Kubelet, "1.32.9").node("w1", "1.32.9"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"kubelet-kube-proxy w1", "kubelet-kube-proxy w1"},
			wantMsg: "kubelet on w1 runs v1.32.9; with the control plane at v1.36.3 it would be 4 minors behind (at most 3)",
			wantFix: "upgrade kubelet on w1 to 1.33 or later first: hardway upgrade apply --to 1.35",
		},
		{
			name:    "a kube-proxy more than three minors from its kubelet",
			cluster: newCluster("1.36.3", "3.6.16").set("w2", KubeProxy, "1.32.0"),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"kubelet-kube-proxy w2", "kubelet-kube-proxy w2"},
			wantMsg: "kube-proxy on w2 runs v1.32.0, more than 3 minors from its kubelet (v1.36.3)",
		},
		{
			name:    "etcd not paired with the target Kubernetes",
			cluster: newCluster("1.35.4", "3.6.16"),
			target:  target("1.36.3", "3.5.26"),
			want:    []string{"downgrade c1", "downgrade c2", "downgrade c3", "etcd-supported "},
			wantFix: "leave etcdVersion out of the inventory (Kubernetes 1.36 defaults to v3.6.16)",
		},
		{
			name:    "etcd skips a minor",
			cluster: newCluster("1.36.3", "3.5.26"),
			target:  target("1.37.0", "3.7.0"),
			want:    []string{"etcd-one-minor c1", "etcd-one-minor c2", "etcd-one-minor c3"},
			wantMsg: "etcd on c1 runs v3.5.26; v3.7.0 skips 3.6",
		},
		{
			name:    "containerd 1.x with a 1.36 kubelet",
			cluster: newCluster("1.35.4", "3.6.16").set("w1", Containerd, "1.7.28"),
			target:  Target{Kubernetes: v("1.36.3"), Etcd: v("3.6.16"), Containerd: v("1.7.28"), Runc: v("1.5.3")},
			want:    []string{"downgrade w2", "container-runtime "},
			wantMsg: "the target containerd v1.7.28 is older than v2.0.0, the oldest kubelet 1.36 works with",
		},
		{
			name:    "runc too old for containerd 2",
			cluster: newCluster("1.36.3", "3.6.16"),
			target:  Target{Kubernetes: v("1.36.3"), Etcd: v("3.6.16"), Containerd: v("2.4.2"), Runc: v("1.1.15")},
			want:    []string{"downgrade w1", "downgrade w2", "container-runtime "},
			wantMsg: "the target runc v1.1.15 is older than v1.2.0",
		},
		{
			name:    "a host that cannot be read blocks",
			cluster: newCluster("1.35.4", "3.6.16").set("c2", APIServer, ""),
			target:  target("1.36.3", "3.6.16"),
			want:    []string{"unreadable c2"},
			wantMsg: "cannot read the kube-apiserver version on c2",
		},
		{
			name:    "a target hardway does not render",
			cluster: newCluster("1.37.0", "3.7.0"),
			target:  target("1.38.0", "3.7.0"),
			want:    []string{"target-supported "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(Input{Observed: tc.cluster.obs, Target: tc.target, AllowDowngrade: tc.allow})
			var got []string
			var msgs, fixes []string
			for _, v := range res.Violations {
				got = append(got, v.Rule+" "+v.Host)
				msgs = append(msgs, v.Message)
				fixes = append(fixes, v.Fix)
				if v.Message == "" || v.Fix == "" || strings.Contains(v.Message+v.Fix, "\n") {
					t.Errorf("%s: a violation is one line of message and one of fix: %+v", v.Rule, v)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("violations:\n%s\nwant:\n%s\n(messages: %q)", strings.Join(got, "\n"), strings.Join(tc.want, "\n"), msgs)
			}
			if res.Blocked() != (len(tc.want) > 0) {
				t.Errorf("Blocked() = %v", res.Blocked())
			}
			if tc.wantMsg != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.wantMsg) {
				t.Errorf("no message has %q: %q", tc.wantMsg, msgs)
			}
			if tc.wantFix != "" && !strings.Contains(strings.Join(fixes, "\n"), tc.wantFix) {
				t.Errorf("no fix has %q: %q", tc.wantFix, fixes)
			}
			if tc.wantMove != "" {
				var ms []string
				for _, m := range res.Moves {
					ms = append(ms, strings.Join([]string{m.Host, m.Component, m.Now, m.Target, m.Change}, " "))
				}
				if !strings.Contains(strings.Join(ms, "\n"), tc.wantMove) {
					t.Errorf("moves lack %q:\n%s", tc.wantMove, strings.Join(ms, "\n"))
				}
			}
		})
	}
}

// Every component of every host is one move, hosts in the order observed,
// components in upgrade order; a Node's version stands in for an unread
// kubelet binary.
func TestMoves(t *testing.T) {
	c := newCluster("1.35.4", "3.6.16").set("w1", Kubelet, "")
	res := Check(Input{Observed: c.obs, Target: target("1.36.3", "3.6.16")})
	var got []string
	for _, m := range res.Moves {
		got = append(got, m.Host+" "+m.Component+" "+m.Now+" "+m.Target+" "+m.Change)
	}
	want := []string{
		"c1 etcd v3.6.16 v3.6.16 none",
		"c1 kube-apiserver v1.35.4 v1.36.3 upgrade",
		"c1 kube-controller-manager v1.35.4 v1.36.3 upgrade",
		"c1 kube-scheduler v1.35.4 v1.36.3 upgrade",
	}
	if strings.Join(got[:4], "\n") != strings.Join(want, "\n") {
		t.Errorf("moves:\n%s\nwant first:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(got) != 3*4+2*4 {
		t.Errorf("%d moves, want 20:\n%s", len(got), strings.Join(got, "\n"))
	}
	if !strings.Contains(strings.Join(got, "\n"), "w1 kubelet v1.35.4 v1.36.3 upgrade") {
		t.Errorf("the Node's version did not stand in for w1's unread kubelet:\n%s", strings.Join(got, "\n"))
	}
	// The unread binary still blocks.
	if !res.Blocked() || res.Violations[0].Rule != "unreadable" {
		t.Errorf("violations %+v", res.Violations)
	}
}

func TestParseVersionOutput(t *testing.T) {
	for out, want := range map[string]string{
		"Kubernetes v1.36.3\n": "1.36.3",
		"etcd Version: 3.6.16\nGit SHA: 1a2b3c\nGo Version: go1.24.6\nGo OS/Arch: linux/amd64\n":        "3.6.16",
		"containerd github.com/containerd/containerd/v2 v2.4.2 0f6d3ed1b6a0\n":                          "2.4.2",
		"runc version 1.5.3\ncommit: v1.5.3-0-g1234567\nspec: 1.2.1\ngo: go1.24.6\nlibseccomp: 2.5.5\n": "1.5.3",
		"Kubernetes v1.37.0-rc.1": "1.37.0-rc.1",
	} {
		got, err := ParseVersionOutput(out)
		if err != nil || got.String() != want {
			t.Errorf("ParseVersionOutput(%q) = %v, %v; want %s", out, got, err, want)
		}
	}
	for _, out := range []string{"", "bash: /usr/local/bin/kubelet: No such file or directory", "containerd github.com/containerd/containerd/v2"} {
		if got, err := ParseVersionOutput(out); err == nil {
			t.Errorf("ParseVersionOutput(%q) = %v, want an error", out, got)
		}
	}
}

// Every rule is documented and cited; every fact row parses.
func TestRuleTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules() {
		if r.Name == "" || r.Doc == "" || r.Source == "" || r.check == nil || seen[r.Name] {
			t.Errorf("rule %+v: name, doc, source and check, once each", r.Name)
		}
		seen[r.Name] = true
	}
	for _, f := range etcdFloors {
		if _, err := version.NewVersion(f.Floor); err != nil || f.Source == "" {
			t.Errorf("etcd floor %+v: %v", f, err)
		}
	}
	for _, f := range containerdFloors {
		if _, err := version.NewConstraint(f.Kubelet); err != nil || f.Source == "" {
			t.Errorf("containerd floor %+v: %v", f, err)
		}
	}
	for _, f := range runcFloors {
		if _, err := version.NewConstraint(f.Containerd); err != nil || f.Source == "" {
			t.Errorf("runc floor %+v: %v", f, err)
		}
	}
}

// Running reports only the skew between what runs: a half-done upgrade is
// fine, a kubelet ahead of the apiservers or apiservers two minors apart
// are not; an unreadable host is not its business.
func TestRunning(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *cluster
		want []string // rule: message substring
	}{
		{"converged", newCluster("1.36.3", "3.6.16"), nil},
		{"half-way: apiservers and controllers ahead, kubelets behind", newCluster("1.35.4", "3.6.16").
			set("c1", APIServer, "1.36.3").set("c2", APIServer, "1.36.3").set("c3", APIServer, "1.36.3").
			set("c1", ControllerManager, "1.36.3"), nil},
		{"a kubelet newer than the oldest apiserver", newCluster("1.35.4", "3.6.16").set("w2", Kubelet, "1.36.3"),
			[]string{"kubelet-kube-proxy: kubelet on w2 runs v1.36.3, newer than the oldest apiserver (v1.35.4 on c1)"}},
		{"apiservers two minors apart", newCluster("1.36.3", "3.6.16").set("c3", APIServer, "1.34.2"),
			[]string{"apiserver-skew: the apiservers span v1.34.2 (c3) to v1.36.3 (c1)"}},
		{"an unreadable host is left out", newCluster("1.36.3", "3.6.16").set("c2", APIServer, ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Running(tc.c.obs)
			var lines []string
			for _, v := range got {
				lines = append(lines, v.Rule+": "+v.Message)
			}
			all := strings.Join(lines, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("lacks %q:\n%s", w, all)
				}
			}
			if len(tc.want) == 0 && len(got) > 0 {
				t.Errorf("want none, got:\n%s", all)
			}
		})
	}
}
