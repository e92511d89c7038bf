package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// resetModel is a fake host for 'hardway reset': what is there (paths,
// units, mounts, routes, rules, the etcd user), answered to the reset's
// read, and changed by its actions' scripts as the host would be.
type resetModel struct {
	mu      sync.Mutex
	units   map[string]remote.UnitState // by unit
	paths   map[string]bool
	mounts  []string
	routes  []string
	bridge  bool
	egress  []string // iptables -S lines
	kubeIPT int
	user    string // getent passwd line; "" none
	group   string
	aside   []string
}

var (
	reForPaths   = regexp.MustCompile(`(?m)^echo '@paths'; for p in (.*); do if`)
	reForEntries = regexp.MustCompile(`(?m)^echo '@entries'; for d in (.*); do if`)
	reStopUnit   = regexp.MustCompile(`(?m)^systemctl stop -- (\S+) \|\| true$`)
	reDataDirs   = regexp.MustCompile(`(?m)^for d in (.*); do$`)
	reRmFiles    = regexp.MustCompile(`(?m)^rm -f -- (.*)$`)
	reRmdir      = regexp.MustCompile(`(?m)^rmdir --ignore-fail-on-non-empty -- (.*)$`)
)

// words splits a list of remote.Quote'd words (single quotes only).
func words(s string) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		out = append(out, strings.ReplaceAll(strings.Trim(w, "'"), `'\''`, "'"))
	}
	return out
}

func (m *resetModel) children(d string) []string {
	var out []string
	for p := range m.paths {
		if path.Dir(p) == d && p != d {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (m *resetModel) answer(cmd string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	switch {
	case cmd == readRegistryFilesCmd:
	case strings.HasPrefix(cmd, "# reset: what hardway put on the host"):
		b.WriteString(fakeShowUnits(cmd, func(comp string) remote.UnitState { return m.units[comp+".service"] }))
		b.WriteString("@paths\n")
		for _, p := range words(reForPaths.FindStringSubmatch(cmd)[1]) {
			if m.paths[p] {
				b.WriteString(p + "\n")
			}
		}
		b.WriteString("@entries\n")
		for _, d := range words(reForEntries.FindStringSubmatch(cmd)[1]) {
			if m.paths[d] {
				for _, c := range m.children(d) {
					b.WriteString(c + "\n")
				}
			}
		}
		b.WriteString("@links\n@mounts\n/\n/proc\n/sys\n")
		for _, mp := range m.mounts {
			b.WriteString(strings.ReplaceAll(mp, " ", `\040`) + "\n")
		}
		b.WriteString("@routes\n")
		for _, r := range m.routes {
			b.WriteString(r + "\n")
		}
		b.WriteString("@bridge\n")
		if m.bridge {
			b.WriteString(units.CNIBridge + "\n")
		}
		b.WriteString("@egress\n")
		for _, e := range m.egress {
			b.WriteString("iptables " + e + "\n")
		}
		fmt.Fprintf(&b, "@kube-iptables\n%d\n@kube-nft\n@user\n%s\n@group\n%s\n@aside\n", m.kubeIPT, m.user, m.group)
		for _, a := range m.aside {
			b.WriteString(a + "\n")
		}
	case strings.HasPrefix(cmd, "# reset: stop hardway's services"):
		for _, g := range reStopUnit.FindAllStringSubmatch(cmd, -1) {
			m.units[g[1]] = remote.UnitState{State: "inactive"}
		}
	case strings.HasPrefix(cmd, "# reset: the pod network"):
		m.routes, m.bridge, m.egress = nil, false, nil
		if strings.Contains(cmd, " --cleanup") {
			m.kubeIPT = 0
		}
	case strings.HasPrefix(cmd, "# reset: hardway's data"):
		for _, u := range m.units {
			if u.Active {
				return "", &remote.ExitError{Code: 1, Stderr: "a unit is running: its data stays"}
			}
		}
		for _, d := range words(reDataDirs.FindStringSubmatch(cmd)[1]) {
			self := slices.Contains(m.mounts, d)
			m.mounts = slices.DeleteFunc(m.mounts, func(mp string) bool { return mp != d && units.Under(mp, d) })
			for p := range m.paths {
				if units.Under(p, d) && !(self && p == d) {
					delete(m.paths, p)
				}
			}
		}
	case strings.HasPrefix(cmd, "# reset: hardway's files"):
		for _, p := range words(reRmFiles.FindStringSubmatch(cmd)[1]) {
			delete(m.paths, p)
		}
	case strings.HasPrefix(cmd, "# reset: hardway's directories"):
		for _, d := range words(reRmdir.FindStringSubmatch(cmd)[1]) {
			if len(m.children(d)) == 0 {
				delete(m.paths, d)
			}
		}
	case strings.HasPrefix(cmd, "# reset: hardway's etcd user"):
		m.user, m.group = "", ""
	}
	return b.String(), nil
}

// resetCluster is three control-plane hosts and two workers, each as 'up'
// leaves it: its footprint's paths there, its units running; c2's
// /var/lib/kubernetes holds a file of someone else's, c3's etcd user is
// not hardway's, c1 has old data a restore moved aside, w2's containerd root
// is a mount point (as in the lab).
type resetCluster struct {
	*Cluster
	t     *testing.T
	root  string // inventory, state directory
	hosts map[string]*remotetest.Fake
	model map[string]*resetModel
}

const resetInventory = `cluster: prod
controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
  - {name: c3, address: 10.240.0.13}
workers:
  - {name: w1, address: 10.240.0.21}
  - {name: w2, address: 10.240.0.22}
`

func newResetCluster(t *testing.T) *resetCluster {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, "inventory.yaml")
	if err := os.WriteFile(p, []byte(resetInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Parse(p, p, []byte(resetInventory))
	if err != nil {
		t.Fatal(err)
	}
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := generatedIn(context.Background(), inv, st); err != nil {
		t.Fatal(err)
	}
	rc := &resetCluster{t: t, root: root, hosts: map[string]*remotetest.Fake{}, model: map[string]*resetModel{}}
	rc.Cluster = New(inv, Options{State: st, Connect: func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		if f, ok := rc.hosts[cfg.Name]; ok {
			return f, nil
		}
		return nil, fmt.Errorf("no fake host %s", cfg.Name)
	}})
	if err := rc.ensureRendered(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, h := range inv.Hosts() {
		fp := units.HostFootprint(rc.manifests[h.Name])
		m := &resetModel{units: map[string]remote.UnitState{}, paths: map[string]bool{}}
		for _, u := range fp.Units {
			m.units[u] = remote.UnitState{Active: true, State: "active", Enabled: true}
		}
		for _, f := range rc.manifests[h.Name].Files {
			m.paths[f.Path] = true
		}
		for _, d := range slices.Concat(fp.Dirs, fp.State) {
			if d != units.EtcdJoinEnv {
				m.paths[d] = true
			}
		}
		m.paths[units.HardwayDataDir+"/restart"] = true
		if rc.isWorker(h.Name) {
			vol := units.KubeletDir + "/pods/1f2e/volumes/kubernetes.io~projected/kube-api-access-x9"
			shm := units.ContainerdStateDir + "/io.containerd.grpc.v1.cri/sandboxes/ab12/shm"
			m.paths[vol], m.paths[shm] = true, true
			m.paths[units.ContainerdRootDir+"/io.containerd.content.v1.content"] = true
			m.mounts = []string{vol, shm}
			m.routes = []string{"10.200.1.0/24 via 10.240.0.22 dev eth0 proto 70"}
			m.bridge = true
			m.egress = []string{"-A POSTROUTING -s 10.200.0.0/16 ! -d 10.200.0.0/16 -m comment --comment hardway-pod-egress -j MASQUERADE"}
			m.kubeIPT = 42
		} else {
			m.paths[units.EtcdDataDir+"/member/snap/db"] = true
			m.routes = []string{"10.200.0.0/24 via 10.240.0.21 dev eth0 proto 70", "10.200.1.0/24 via 10.240.0.22 dev eth0 proto 70"}
			m.user = "etcd:x:998:998:" + units.EtcdUserGECOS + ":/var/lib/etcd:/usr/sbin/nologin"
			m.group = "etcd:x:998:"
		}
		rc.model[h.Name] = m
		f := remotetest.New(t, h.Name)
		f.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return m.answer(cmd) })
		rc.hosts[h.Name] = f
	}
	rc.model["c1"].aside = []string{units.EtcdDataDir + ".before-restore-20260101-000000"}
	rc.model["c2"].paths[units.KubeDir+"/old.pem"] = true
	rc.model["c3"].user = "etcd:x:997:997:etcd daemon:/var/lib/etcd:/bin/false"
	rc.model["w2"].mounts = append(rc.model["w2"].mounts, units.ContainerdRootDir)
	return rc
}

func (rc *resetCluster) run(dry bool, hosts []inventory.Host) *plan.Result {
	rc.t.Helper()
	res, err := (&plan.Runner{Out: io.Discard, DryRun: dry}).Run(context.Background(), rc.ResetSteps(hosts))
	if err != nil {
		rc.t.Fatal(err)
	}
	return res
}

// The plan, made on every host, removes what the manifest and the component
// table say each host has, each kind of thing in its step; it only reads,
// on the hosts and in the state directory.
func TestResetPlan(t *testing.T) {
	rc := newResetCluster(t)
	before := treeHash(t, rc.root)
	all, err := rc.ResetHosts(nil)
	if err != nil {
		t.Fatal(err)
	}
	var dry plan.Planned
	steps := rc.ResetSteps(all)
	for _, s := range steps {
		as, err := s.Plan(context.Background(), dry)
		if err != nil {
			t.Fatal(err)
		}
		dry = append(dry, as...)
	}
	for _, a := range dry {
		if !a.Parallel || a.Host == "" {
			t.Errorf("%s: %s: not one host's action side by side with the others'", a.Host, a.Desc)
		}
	}
	find := func(host, substr string) plan.Action {
		t.Helper()
		for _, a := range dry {
			if a.Host == host && strings.Contains(a.Desc, substr) {
				return a
			}
		}
		t.Fatalf("%s: no action with %q in\n%s", host, substr, strings.Join(descs(dry), "\n"))
		return plan.Action{}
	}
	for _, h := range all {
		m := rc.manifests[h.Name]
		worker := rc.isWorker(h.Name)
		stop := find(h.Name, "stop and disable ")
		if stop.Kind != plan.Stop {
			t.Errorf("%s: %s", h.Name, stop.Kind)
		}
		want := "stop and disable hardway-pod-routes.service, kube-scheduler.service, kube-controller-manager.service, kube-apiserver.service, etcd.service"
		if worker {
			want = "stop and disable hardway-pod-routes.service, kube-proxy.service, kubelet.service, hardway-apiserver-lb.service, containerd.service; before containerd stops, remove every pod"
		}
		if !strings.HasPrefix(stop.Desc, want) {
			t.Errorf("%s: %q, want %q…", h.Name, stop.Desc, want)
		}
		// Every file the manifest pushes, but those inside a data directory
		// (the kubelet's certificates go with /var/lib/kubelet).
		files := find(h.Name, "file(s) hardway pushed")
		listed := strings.Split(files.Diff, "\n")
		fp := units.HostFootprint(m)
		for _, f := range m.Files {
			inData := slices.ContainsFunc(fp.State, func(s string) bool { return units.Under(f.Path, s) })
			if slices.Contains(listed, f.Path) == inData {
				t.Errorf("%s: %s listed %v (in a data directory: %v)", h.Name, f.Path, !inData, inData)
			}
		}
		data := find(h.Name, map[bool]string{false: "remove with everything in them: ", true: "unmount the 2 mount(s) below the data directories"}[worker])
		for _, d := range fp.State {
			if d != units.EtcdJoinEnv && !strings.Contains(data.Desc, d) {
				t.Errorf("%s: data %q lacks %s", h.Name, data.Desc, d)
			}
		}
		net := find(h.Name, "pod route(s)")
		if !strings.Contains(net.Desc, "pod route(s) (proto 70)") || strings.Contains(net.Desc, units.CNIBridge) != worker ||
			strings.Contains(net.Desc, "egress") != worker || strings.Contains(net.Desc, "kube-proxy --cleanup") != worker {
			t.Errorf("%s: network %q", h.Name, net.Desc)
		}
		dirs := find(h.Name, "remove the directories left empty: ")
		for _, d := range []string{units.EtcdDir, units.KubeDir} {
			if strings.Contains(dirs.Desc, d) != (!worker && !(h.Name == "c2" && d == units.KubeDir)) {
				t.Errorf("%s: dirs %q and %s", h.Name, dirs.Desc, d)
			}
		}
		user := slices.ContainsFunc(dry, func(a plan.Action) bool {
			return a.Host == h.Name && strings.HasPrefix(a.Desc, "delete the system user etcd (uid 998")
		})
		if user != (h.Name == "c1" || h.Name == "c2") {
			t.Errorf("%s: user removal %v", h.Name, user)
		}
	}
	if d := find("w2", "unmount").Desc; !strings.Contains(d, units.ContainerdRootDir+" (a mount point: its contents)") {
		t.Errorf("w2: %q", d)
	}
	for _, h := range all {
		cmds := rc.hosts[h.Name].Commands()
		if len(cmds) == 0 {
			t.Fatalf("%s was never asked", h.Name)
		}
		assertReadOnly(t, h.Name, cmds)
	}
	if after := treeHash(t, rc.root); after != before {
		t.Error("the plan changed the inventory's directory or the state directory")
	}
}

// --host resets those hosts only: the others are never reached. A host not
// in the inventory is a usage error naming the hosts.
func TestResetHostLimitsIt(t *testing.T) {
	rc := newResetCluster(t)
	if _, err := rc.ResetHosts([]string{"w1", "w9"}); err == nil || usererr.CodeOf(err) != usererr.CodeUsage || !strings.Contains(usererr.HintOf(err), "c1, c2, c3, w1, w2") {
		t.Fatalf("unknown host: %v (hint %q)", err, usererr.HintOf(err))
	}
	hosts, err := rc.ResetHosts([]string{"w1"})
	if err != nil || len(hosts) != 1 {
		t.Fatal(hosts, err)
	}
	res := rc.run(true, hosts)
	for _, s := range res.Steps {
		for _, a := range s.Actions {
			if a.Host != "w1" {
				t.Errorf("%s: %s: %s", s.Name, a.Host, a.Desc)
			}
		}
	}
	if res.Changes() == 0 {
		t.Fatal("nothing planned on w1")
	}
	for name, f := range rc.hosts {
		if n := len(f.Commands()); (n > 0) != (name == "w1") {
			t.Errorf("%s was sent %d command(s)", name, n)
		}
	}
	if w, needYes := rc.ResetWarnings(hosts); needYes || !strings.Contains(strings.Join(w, "\n"), "the Nodes of w1 stay in the API") {
		t.Errorf("w1: %v %q", needYes, w)
	}
}

// Resetting part of the control plane says etcd keeps the members, how to
// replace them, and whether quorum is lost; it needs --yes. The whole
// control plane does not, and says the data goes.
func TestResetWarnings(t *testing.T) {
	rc := newResetCluster(t)
	for _, tt := range []struct {
		hosts   []string
		needYes bool
		want    string
		not     string
	}{
		{[]string{"c2"}, true, "etcd membership is not changed: c2 stay(s) in etcd's member list ('hardway etcd status' shows them unreachable), and the next 'hardway up' stops at them: 'hardway up --remove-stale-members'", "QUORUM"},
		{[]string{"c1", "c3"}, true, "etcd LOSES QUORUM: 1 of 3 members are left, fewer than 2", ""},
		{nil, false, "etcd's data, every object of the cluster, is deleted", "membership"},
		{[]string{"c1", "c2", "c3"}, false, "the 2 worker(s) not reset keep running", "membership"},
	} {
		hosts, err := rc.ResetHosts(tt.hosts)
		if err != nil {
			t.Fatal(err)
		}
		w, needYes := rc.ResetWarnings(hosts)
		all := strings.Join(w, "\n")
		if needYes != tt.needYes || !strings.Contains(all, tt.want) || tt.not != "" && strings.Contains(all, tt.not) {
			t.Errorf("%v: needYes %v, warnings:\n%s", tt.hosts, needYes, all)
		}
		if !strings.Contains(all, "hardway daemon --repair") {
			t.Errorf("%v: no word of the daemon", tt.hosts)
		}
	}
}

// A reset run takes everything of hardway's away in order (the services
// stop before their data goes, the pods are removed before containerd
// stops), a second one finds nothing to do, and what it leaves is named:
// someone else's file, a user hardway did not make, old data a restore
// moved aside, a mount point. The state directory is untouched.
func TestResetRunThenNothingLeft(t *testing.T) {
	rc := newResetCluster(t)
	before := treeHash(t, rc.root)
	all, _ := rc.ResetHosts(nil)
	res := rc.run(false, all)
	if res.Changes() == 0 {
		t.Fatal("nothing done")
	}
	w1 := strings.Join(rc.hosts["w1"].Commands(), "\n")
	rmp, stop := strings.Index(w1, " rmp --all --force"), strings.Index(w1, "systemctl stop -- containerd.service")
	if rmp < 0 || stop < rmp || strings.Index(w1, "systemctl stop -- kubelet.service") > rmp {
		t.Errorf("w1: the pods are not removed between the kubelet's and containerd's stop:\n%s", w1)
	}
	if !strings.Contains(w1, units.BinPath(units.KubeProxy)+" --cleanup") || !strings.Contains(w1, "-w -t nat -D POSTROUTING -s 10.200.0.0/16 '!' -d 10.200.0.0/16 -m comment --comment hardway-pod-egress -j MASQUERADE") {
		t.Errorf("w1: no kube-proxy cleanup or egress rule removal:\n%s", w1)
	}
	for _, h := range []string{"c1", "c2"} {
		if cmds := strings.Join(rc.hosts[h].Commands(), "\n"); !strings.Contains(cmds, "\nuserdel etcd\n") {
			t.Errorf("%s: etcd user not deleted", h)
		}
	}
	if strings.Contains(strings.Join(rc.hosts["c3"].Commands(), "\n"), "userdel") {
		t.Error("c3: a user hardway did not make was deleted")
	}
	for name, m := range rc.model {
		var left []string
		for p := range m.paths {
			left = append(left, p)
		}
		sort.Strings(left)
		want := map[string][]string{"c2": {units.KubeDir, units.KubeDir + "/old.pem"}, "w2": {units.ContainerdRootDir}}[name]
		if !slices.Equal(left, want) {
			t.Errorf("%s: left %q, want %q", name, left, want)
		}
		if len(m.routes)+len(m.egress) > 0 || m.bridge || m.kubeIPT > 0 {
			t.Errorf("%s: network left: %+v", name, m)
		}
	}

	again := rc.run(true, all)
	if again.Changes() != 0 {
		t.Errorf("a second reset plans %d change(s): %v", again.Changes(), again.Steps)
	}
	left, err := rc.ResetLeft(context.Background(), all, true)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range left {
		if l.Host != "" {
			lines = append(lines, l.Host+": "+l.What+" | "+l.Command)
		}
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"c1: /var/lib/etcd.before-restore-20260101-000000: old etcd data a restore moved aside | rm -rf /var/lib/etcd.before-restore-20260101-000000",
		"c2: /var/lib/kubernetes: not empty, it holds what hardway did not put there: /var/lib/kubernetes/old.pem | rm -rf /var/lib/kubernetes",
		"c3: the user etcd: hardway did not make it (its description is \"etcd daemon\", not \"etcd (hardway)\") | ",
		"w2: /var/lib/containerd is a mount point: the reset empties it and leaves the directory and its mount | ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("left lacks %q:\n%s", want, got)
		}
	}
	if len(lines) != 4 {
		t.Errorf("left on the hosts:\n%s", got)
	}
	if after := treeHash(t, rc.root); after != before {
		t.Error("the reset changed the inventory's directory or the state directory")
	}
	r := rc.NewResetResult(res, all, nil, left)
	if want := "reset 5 host(s): "; !strings.HasPrefix(r.Summary, want) || !strings.HasSuffix(r.Summary, "; the state directory "+string(rc.opt.State)+" is untouched") {
		t.Errorf("summary %q", r.Summary)
	}
}

// A services step that cannot stop a unit stops the reset before any data
// goes, with the hint.
func TestResetStopsWhenAServiceDoesNotStop(t *testing.T) {
	rc := newResetCluster(t)
	f := remotetest.New(t, "c1")
	m := rc.model["c1"]
	f.ExpectMatch(`^# reset: stop`).RespondWith(func(string, []byte) (string, error) {
		return "", &remote.ExitError{Host: "c1", Code: 1, Stderr: "still running: etcd.service"}
	})
	f.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return m.answer(cmd) })
	rc.hosts["c1"] = f
	hosts, _ := rc.ResetHosts([]string{"c1"})
	_, err := (&plan.Runner{Out: io.Discard}).Run(context.Background(), rc.ResetSteps(hosts))
	var ee *remote.ExitError
	if !errors.As(err, &ee) || !strings.Contains(usererr.HintOf(err), "journalctl") {
		t.Fatalf("err = %v", err)
	}
	if !m.paths[units.EtcdDataDir] {
		t.Error("etcd's data went although etcd did not stop")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
