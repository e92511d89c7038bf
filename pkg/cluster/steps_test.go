package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
)

// generated is a state directory with the inventory's PKI, made once per
// inventory text (key generation is the slow part of these tests).
func generated(t *testing.T, inv *inventory.Inventory) state.Dir {
	t.Helper()
	st := state.Dir(filepath.Join(t.TempDir(), ".hardway"))
	if _, err := pki.Generate(context.Background(), inv, st, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// withRelease renders the manifests and gives the cluster a release set of
// small local files, one per binary the manifests name for each arch.
func (fc *fakeCluster) withRelease() {
	fc.t.Helper()
	if err := fc.ensureRendered(context.Background()); err != nil {
		fc.t.Fatal(err)
	}
	dir := fc.t.TempDir()
	set := &release.Set{}
	seen := map[string]bool{}
	for _, h := range fc.Inv.Hosts() {
		m := fc.manifest(h.Name)
		for _, f := range m.Files {
			if f.Source == nil || f.Source.Kind != units.SourceBinary || seen[m.Arch+"/"+f.Source.Name] {
				continue
			}
			k := m.Arch + "/" + f.Source.Name
			seen[k] = true
			p := filepath.Join(dir, m.Arch+"-"+strings.ReplaceAll(f.Source.Name, "/", "_"))
			// An ELF header for the host's arch (the push checks it), then
			// the name, so that each binary has its own digest.
			data := append(platform.FakeELF(m.Arch), "binary "+f.Source.Name...)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				fc.t.Fatal(err)
			}
			a := release.Artifact{Name: f.Source.Name, Arch: m.Arch, Path: p, Size: int64(len(data)), SHA256: fmt.Sprintf("%x", sha256.Sum256(data))}
			if name, ok := strings.CutPrefix(f.Source.Name, release.ImagePrefix); ok {
				a.Image = &release.ImageInfo{Name: name, ID: "sha256:" + a.SHA256, OS: "linux", Arch: m.Arch}
			}
			set.Artifacts = append(set.Artifacts, a)
		}
	}
	fc.setReleaseSet(set)
}

func models(inv *inventory.Inventory, mk func() *hostModel) map[string]*hostModel {
	out := map[string]*hostModel{}
	for _, h := range inv.ControlPlane {
		out[h.Name] = mk()
	}
	return out
}

func descs(as []plan.Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s %s: %s", a.Kind, a.Host, a.Desc))
	}
	return out
}

func TestPlanPush(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	ctx := context.Background()

	as, err := fc.planPush(ctx, nil)
	if err != nil || len(as) != 0 {
		t.Fatalf("converged hosts: %v %q", err, descs(as))
	}

	// A drifted unit on c2 and a missing directory on c3.
	unit := "/etc/systemd/system/kube-scheduler.service"
	fc.model["c2"].files[unit] = "644 root 0 root 0 12 0000"
	fc.model["c2"].content[unit] = "[Service]\nExecStart=/bin/false\n"
	delete(fc.model["c3"].dirs, restartDir)
	as, err = fc.planPush(ctx, nil)
	if err != nil || len(as) != 2 {
		t.Fatalf("%v %q", err, descs(as))
	}
	d, w := as[0], as[1] // every host's directories come before any write
	if w.Host != "c2" || w.Kind != plan.Write || !strings.Contains(w.Desc, unit) || !slices.Equal(w.Restarts, []string{units.Scheduler}) {
		t.Errorf("write action: %+v", w)
	}
	if !strings.Contains(w.Diff, "- ExecStart=/bin/false") {
		t.Errorf("no diff of the drifted unit: %q", w.Diff)
	}
	if d.Host != "c3" || d.Kind != plan.Write || !strings.Contains(d.Desc, restartDir) || len(d.Restarts) != 0 {
		t.Errorf("directory action: %+v", d)
	}
	// The restart the write implies reaches the control-plane step as plan
	// data: nothing was written, no marker exists.
	cp, err := fc.planControlPlane(ctx, plan.Planned(as))
	if err != nil || len(cp) != 1 || cp[0].Host != "c2" || cp[0].Kind != plan.Restart || !strings.Contains(cp[0].Desc, units.Scheduler) {
		t.Fatalf("control-plane after push: %v %q", err, descs(cp))
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}
	// Writes run side by side, each in its own lane, after the (not
	// parallel) directories; one command marks the restart, writes the
	// file and records its stat cache entry, in that order.
	if !w.Parallel || w.Lane != unit || d.Parallel {
		t.Errorf("write Parallel %v lane %q, directory Parallel %v", w.Parallel, w.Lane, d.Parallel)
	}
	before := len(fc.commands("c2"))
	if err := w.Do(ctx); err != nil {
		t.Fatal(err)
	}
	cmds := fc.commands("c2")[before:]
	marker := "touch -- " + restartDir + "/" + units.Scheduler
	if len(cmds) != 1 || !strings.Contains(cmds[0], marker) || strings.Index(cmds[0], marker) > strings.Index(cmds[0], "cat > ") ||
		strings.Index(cmds[0], sumsCache) < strings.Index(cmds[0], "mv -f -- ") {
		t.Errorf("write ran %d command(s): %q", len(cmds), cmds)
	}
}

// A cold push writes every host's files in one run of Parallel actions, after
// every host's directories: a directory action (one at a time) between two
// hosts' writes would make the runner push host by host.
func TestColdPushWritesEveryHostAtOnce(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, func() *hostModel {
		return &hostModel{units: map[string]remote.UnitState{}, markers: map[string]bool{},
			files: map[string]string{}, content: map[string]string{}, dirs: map[string]string{}}
	}))
	fc.withRelease()
	as, err := fc.planPush(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.IndexFunc(as, func(a plan.Action) bool { return a.Parallel })
	if first < 0 {
		t.Fatalf("no parallel write: %q", descs(as))
	}
	dirs, writes := map[string]int{}, map[string]int{}
	for i, a := range as {
		switch {
		case i < first && strings.HasPrefix(a.Desc, "directory "):
			dirs[a.Host]++
		case i >= first && a.Parallel && strings.HasPrefix(a.Desc, "write "):
			writes[a.Host]++
		default:
			t.Errorf("action %d of %d out of place (the first write is %d): %s %s: %s (Parallel %v)", i, len(as), first, a.Kind, a.Host, a.Desc, a.Parallel)
		}
	}
	for _, h := range inv.ControlPlane {
		if dirs[h.Name] == 0 || writes[h.Name] == 0 {
			t.Errorf("%s: %d directories, %d writes", h.Name, dirs[h.Name], writes[h.Name])
		}
	}
}

// The members of a new cluster start together and are waited for together:
// c1 has no quorum until c3 is up, so a wait host by host would time out on
// c1 before ever asking c3.
func TestWaitEtcdWaitsForEveryMemberAtOnce(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 2 * time.Second}, models(inv, runningHost))
	fc.etcd.converged(inv)
	fc.etcd.after = map[string]string{fc.etcdEndpoint(inv.ControlPlane[0]): fc.etcdEndpoint(inv.ControlPlane[2])}
	if err := fc.waitEtcd(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A member that failed ends the wait at once, named, while the others have
// no quorum yet: the waits run together, and the first failure stops them.
func TestWaitEtcdStopsAtTheFirstFailedMember(t *testing.T) {
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: time.Minute}, models(inv, runningHost))
	fc.model["c2"].units[units.Etcd] = remote.UnitState{State: "failed"}
	start := time.Now()
	err := fc.waitEtcd(context.Background())
	if err == nil || !strings.Contains(err.Error(), "etcd on c2") {
		t.Fatalf("err = %v, want etcd on c2 failed", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the failure was reported after %v: the other members' waits ran on", d)
	}
}

func TestServiceOps(t *testing.T) {
	active := remote.UnitState{Active: true, State: "active", Enabled: true}
	tests := []struct {
		name    string
		st      remote.UnitState
		pending bool
		ops     []string
		kind    plan.Kind
	}{
		{"running, unchanged", active, false, nil, ""},
		{"running, files changed", active, true, []string{opRestart}, plan.Restart},
		{"unit file changed", remote.UnitState{Active: true, State: "active", Enabled: true, NeedReload: true}, true, []string{opReload, opRestart}, plan.Restart},
		{"stopped", remote.UnitState{State: "inactive", Enabled: true}, false, []string{opStart}, plan.Start},
		{"stopped with changed files: a start is enough", remote.UnitState{State: "failed", Enabled: true}, true, []string{opStart}, plan.Start},
		{"new", remote.UnitState{State: "inactive", NeedReload: true}, true, []string{opReload, opEnable, opStart}, plan.Start},
		{"running, not enabled", remote.UnitState{Active: true, State: "active"}, false, []string{opEnable}, plan.Start},
	}
	for _, tt := range tests {
		ops, kind := serviceOps(tt.st, tt.pending)
		if !slices.Equal(ops, tt.ops) || kind != tt.kind {
			t.Errorf("%s: got %q %q, want %q %q", tt.name, ops, kind, tt.ops, tt.kind)
		}
	}
}

func TestPlanEtcd(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	unstarted := etcd.Member{ID: 0x63, PeerURLs: []string{"https://10.240.0.99:2380"}}
	running := etcd.Member{ID: 0x64, Name: "old", PeerURLs: []string{"https://10.240.0.98:2380"}, ClientURLs: []string{"https://10.240.0.98:2379"}}

	tests := []struct {
		name    string
		remove  bool // --remove-stale-members
		setup   func(fc *fakeCluster)
		want    []string // "kind host: desc" prefixes, in order
		wantErr string
		do      []string // etcd mutations after doing the actions
	}{
		{name: "new cluster: all start together, then one wait",
			setup: func(fc *fakeCluster) {
				for _, m := range fc.model {
					m.etcdData = false
					m.units[units.Etcd] = remote.UnitState{State: "inactive"}
				}
			},
			want: []string{"start c1: etcd: enable, start", "start c2: etcd: enable, start", "start c3: etcd: enable, start", "wait : wait for etcd quorum"}},
		{name: "converged", setup: func(fc *fakeCluster) { fc.etcd.converged(fc.Inv) }},
		{name: "one member down",
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.model["c2"].units[units.Etcd] = remote.UnitState{State: "failed", Enabled: true}
			},
			want: []string{"start c2: etcd: start", "wait : wait for etcd quorum"}},
		{name: "rebuilt member without the flag",
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.model["c2"].etcdData = false
				fc.model["c2"].units[units.Etcd] = remote.UnitState{State: "inactive"}
			},
			wantErr: "the host was rebuilt"},
		{name: "rebuilt member replaced", remove: true,
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.model["c2"].etcdData = false
				fc.model["c2"].units[units.Etcd] = remote.UnitState{State: "inactive"}
				fc.etcd.health["https://10.240.0.12:2379"] = true // once started
			},
			want: []string{"membership c2: replace etcd member c2: remove old member 11"},
			do:   []string{"remove 11", "add https://10.240.0.12:2380"}},
		{name: "unstarted stale member without the flag",
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.etcd.members = append(fc.etcd.members, unstarted)
			},
			wantErr: "not in the inventory: (unstarted)"},
		{name: "unstarted stale member removed", remove: true,
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.etcd.members = append(fc.etcd.members, unstarted)
			},
			want: []string{"membership : remove stale etcd member (never started) (id 63"},
			do:   []string{"remove 63"}},
		{name: "stale member that answers is named, never removed", remove: true,
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.etcd.members = append(fc.etcd.members, running)
				fc.etcd.health[running.ClientURLs[0]] = true
			},
			wantErr: "not in the inventory still answer: old (id 64"},
		{name: "stale member that stopped answering is removed", remove: true,
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.etcd.members = append(fc.etcd.members, running)
			},
			want: []string{"membership : remove stale etcd member old (id 64"},
			do:   []string{"remove 64"}},
		{name: "changed files: restarts one at a time after the others are healthy",
			setup: func(fc *fakeCluster) {
				fc.etcd.converged(fc.Inv)
				fc.model["c1"].markers[units.Etcd] = true
				fc.model["c3"].markers[units.Etcd] = true
			},
			want: []string{"restart c1: etcd: restart", "restart c3: etcd: restart"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, inv, Options{State: st, RemoveStaleMembers: tt.remove, ServiceTimeout: 5e9}, models(inv, runningHost))
			tt.setup(fc)
			as, err := fc.planEtcd(ctx, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			got := descs(as)
			if len(got) != len(tt.want) {
				t.Fatalf("actions %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("action %d = %q, want %q…", i, got[i], tt.want[i])
				}
				// Only starts of stopped members go together; a restart
				// of a running one, a wait or a membership change never.
				if want := as[i].Kind == plan.Start; as[i].Parallel != want {
					t.Errorf("action %d %q: Parallel %v", i, got[i], as[i].Parallel)
				}
			}
			if m := fc.etcd.mutations(); len(m) > 0 {
				t.Fatalf("planning changed etcd: %q", m)
			}
			for _, h := range inv.ControlPlane {
				assertReadOnly(t, h.Name, fc.commands(h.Name))
			}
			if tt.do == nil {
				return
			}
			for _, a := range as {
				if err := a.Do(ctx); err != nil {
					t.Fatalf("%s: %v", a.Desc, err)
				}
			}
			if m := fc.etcd.mutations(); !slices.Equal(m, tt.do) {
				t.Fatalf("etcd changes %q, want %q", m, tt.do)
			}
		})
	}
}

// The control plane of a new cluster starts on every host at once (one
// host's components in order); on a live cluster a component whose files
// changed restarts host by host behind its health wait, never in parallel,
// and after the stopped ones are started.
func TestPlanControlPlaneStartsTogetherRestartsRoll(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	cp := []string{units.APIServer, units.ControllerManager, units.Scheduler}
	type want struct {
		desc     string
		parallel bool
	}
	tests := []struct {
		name    string
		setup   func(fc *fakeCluster)
		earlier plan.Planned
		want    []want
	}{
		{name: "new cluster",
			setup: func(fc *fakeCluster) {
				for _, m := range fc.model {
					for _, comp := range cp {
						m.units[comp] = remote.UnitState{State: "inactive"}
					}
				}
			},
			want: []want{
				// The controller-manager and scheduler start as soon as the apiserver serves.
				{"start c1: kube-apiserver: enable, start (then kube-controller-manager, kube-scheduler: start, as soon as it serves)", true},
				{"start c2: kube-apiserver: enable, start (then kube-controller-manager, kube-scheduler: start, as soon as it serves)", true},
				{"start c3: kube-apiserver: enable, start (then kube-controller-manager, kube-scheduler: start, as soon as it serves)", true},
				{"start c1: kube-controller-manager: enable, start", true}, {"start c2: kube-controller-manager: enable, start", true}, {"start c3: kube-controller-manager: enable, start", true},
				{"start c1: kube-scheduler: enable, start", true}, {"start c2: kube-scheduler: enable, start", true}, {"start c3: kube-scheduler: enable, start", true},
			}},
		{name: "new host, the scheduler's unit changed since systemd loaded it: it waits for its own daemon-reload",
			setup: func(fc *fakeCluster) {
				for _, m := range fc.model {
					for _, comp := range cp {
						m.units[comp] = remote.UnitState{State: "inactive", Enabled: true}
					}
				}
				fc.model["c2"].units[units.Scheduler] = remote.UnitState{State: "inactive", Enabled: true, NeedReload: true}
			},
			want: []want{
				{"start c1: kube-apiserver: start (then kube-controller-manager, kube-scheduler: start, as soon as it serves)", true},
				{"start c2: kube-apiserver: start (then kube-controller-manager: start, as soon as it serves)", true},
				{"start c3: kube-apiserver: start (then kube-controller-manager, kube-scheduler: start, as soon as it serves)", true},
				{"start c1: kube-controller-manager: start", true}, {"start c2: kube-controller-manager: start", true}, {"start c3: kube-controller-manager: start", true},
				{"start c1: kube-scheduler: start", true}, {"start c2: kube-scheduler: daemon-reload, start", true}, {"start c3: kube-scheduler: start", true},
			}},
		{name: "live cluster, files changed on every host",
			earlier: plan.Planned{
				{Host: "c1", Kind: plan.Write, Restarts: []string{units.APIServer}},
				{Host: "c2", Kind: plan.Write, Restarts: []string{units.APIServer}},
				{Host: "c3", Kind: plan.Write, Restarts: []string{units.APIServer, units.Scheduler}},
			},
			want: []want{
				{"restart c1: kube-apiserver: restart", false}, {"restart c2: kube-apiserver: restart", false}, {"restart c3: kube-apiserver: restart", false},
				{"restart c3: kube-scheduler: restart", false},
			}},
		{name: "live cluster, one apiserver stopped and another changed",
			setup: func(fc *fakeCluster) {
				fc.model["c3"].units[units.APIServer] = remote.UnitState{State: "failed", Enabled: true}
			},
			earlier: plan.Planned{{Host: "c1", Kind: plan.Write, Restarts: []string{units.APIServer}}},
			// c3's controller-manager and scheduler run: only its apiserver starts.
			want: []want{{"start c3: kube-apiserver: start", true}, {"restart c1: kube-apiserver: restart", false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 5e9}, models(inv, runningHost))
			if tt.setup != nil {
				tt.setup(fc)
			}
			as, err := fc.planControlPlane(ctx, tt.earlier)
			if err != nil || len(as) != len(tt.want) {
				t.Fatalf("%v %q", err, descs(as))
			}
			for i, a := range as {
				d := descs(as[i : i+1])[0]
				if !strings.HasPrefix(d, tt.want[i].desc) || strings.Contains(d, "(then") != strings.Contains(tt.want[i].desc, "(then") || a.Parallel != tt.want[i].parallel {
					t.Errorf("action %d = %q Parallel %v, want %q Parallel %v", i, d, a.Parallel, tt.want[i].desc, tt.want[i].parallel)
				}
			}
			for _, h := range inv.ControlPlane {
				assertReadOnly(t, h.Name, fc.commands(h.Name))
			}
		})
	}
}

// A restart of etcd waits for every other member to be healthy; with one
// down it stops before touching the host (the quorum would be at stake).
func TestEtcdRestartNeedsHealthyOthers(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	for _, othersOK := range []bool{false, true} {
		fc := newFakeCluster(t, inv, Options{State: st, ServiceTimeout: 5e9}, models(inv, runningHost))
		fc.etcd.converged(inv)
		if !othersOK {
			fc.etcd.health["https://10.240.0.13:2379"] = false
		}
		as, err := fc.planEtcd(ctx, plan.Planned{{Host: "c1", Kind: plan.Write, Restarts: []string{units.Etcd}}})
		if err != nil || len(as) != 1 || as[0].Kind != plan.Restart {
			t.Fatalf("%v %q", err, descs(as))
		}
		err = as[0].Do(ctx)
		restarted := slices.ContainsFunc(fc.commands("c1"), func(c string) bool { return strings.HasPrefix(c, "systemctl restart") })
		if othersOK {
			if err != nil || !restarted {
				t.Fatalf("healthy others: err=%v restarted=%v", err, restarted)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "member c3 is not healthy") || restarted {
			t.Fatalf("c3 down: err=%v restarted=%v", err, restarted)
		}
	}
}

// mutating matches shell commands that change a host. The preflight's
// fsync probe is the one command allowed to write: it measures the disk
// with a scratch file it removes, which leaves nothing any comparison of
// the host can see.
var mutating = regexp.MustCompile(`(^|[\s;&|({])(install|mkdir|touch|rm|rmdir|mv|cp|ln|chmod|chown|tee|truncate|dd|kill|` +
	`systemctl (start|restart|stop|enable|disable|daemon-reload|reload|kill|mask|reset-failed)|modprobe|sysctl -q?w|apt-get|dnf|` +
	`ufw (allow|enable|route|default)|firewall-cmd[^;&|]*--add-\S*|` +
	`umount|userdel|groupdel|-delete|ip (-6 )?(route|link) (del|delete|flush)|ip6?tables[^;&|]* -[DFX]|nft (delete|flush)|` +
	`(\S*/)?crictl[^;&|]* rmp|(\S*/)?kube-proxy[^;&|]* --cleanup)(\s|$)`)

func assertReadOnly(t testing.TB, host string, cmds []string) {
	t.Helper()
	for _, c := range cmds {
		if strings.Contains(c, "dd if=/dev/zero") && strings.Contains(c, ".hardway-fsync-probe") {
			continue
		}
		s := c
		for _, ok := range []string{"2>/dev/null", ">/dev/null", "2>&1"} {
			s = strings.ReplaceAll(s, ok, "")
		}
		if strings.Contains(s, ">") {
			t.Errorf("%s: a plan redirected output into a file: %q", host, c)
		}
		if m := mutating.FindString(s); m != "" {
			t.Errorf("%s: a plan ran %q: %q", host, strings.TrimSpace(m), c)
		}
	}
}
