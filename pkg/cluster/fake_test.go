package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/units"
)

// A fake cluster for the step logic: hosts modelled by what their systemd,
// markers and files say (answered through remotetest fakes, every command
// recorded) and an etcd that answers from a member list. No root, no
// network.

// hostModel is one fake host's state.
type hostModel struct {
	mu       sync.Mutex
	units    map[string]remote.UnitState
	markers  map[string]bool
	etcdData bool
	files    map[string]string // path -> compare line ("644 root 0 root 0 SIZE SHA")
	content  map[string]string // path -> text, for diffs
	dirs     map[string]string // path -> "700 root:root"
	data     map[string][]byte // path -> content of files from the state directory, for remote.ReadFiles
	// oldAdmin: an admin kubeconfig an earlier hardway left on the host
	oldAdmin bool
}

func runningHost() *hostModel {
	m := &hostModel{units: map[string]remote.UnitState{}, markers: map[string]bool{}, etcdData: true,
		files: map[string]string{}, content: map[string]string{}, dirs: map[string]string{}}
	for _, comp := range units.Names(units.ControlPlane) {
		m.units[comp] = remote.UnitState{Active: true, State: "active", Enabled: true, ActiveEnter: "Sun 2026-11-29 21:05:01 UTC"}
	}
	return m
}

var (
	reCompareFile = regexp.MustCompile(`(?m)^f=(\S+); if`)
	reStatFiles   = regexp.MustCompile(`(?m)^stat -L -c '[^']*' -- (.*) 2>/dev/null$`)
	reStatDirs    = regexp.MustCompile(`(?m)^stat -c '[^']*' -- (.*) 2>/dev/null$`)
	reHashFile    = regexp.MustCompile(`(?m)^s=\$\(sum < (\S+)\)`)
)

var (
	reShowUnits = regexp.MustCompile(`(?m)systemctl show -p Id -p ActiveState -p UnitFileState -p NeedDaemonReload -p ActiveEnterTimestamp -- (.*)$`)
	reCaptured  = regexp.MustCompile(`(?m)^echo '@@(\w+)'; \{ e=\$\( \{ o=\$\((.*)\); r=\$\?; echo .*$`)
)

// fakeShowUnits answers the @units section of a script as systemctl would
// (one block per unit, Id first), from state; "" when the script has none.
func fakeShowUnits(script string, state func(comp string) remote.UnitState) string {
	g := reShowUnits.FindStringSubmatch(script)
	if g == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("@units\n")
	for i, u := range strings.Fields(g[1]) {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("Id=" + u + "\n" + fakeShowUnit(state(strings.TrimSuffix(u, ".service"))))
	}
	return b.String()
}

// fakeShowUnit is one unit's properties as systemctl show prints them
// (without the Id line: remote.ShowCommand does not ask for it).
func fakeShowUnit(st remote.UnitState) string {
	if st.State == "" {
		st.State = map[bool]string{true: "active", false: "inactive"}[st.Active]
	}
	en := map[bool]string{true: "enabled", false: "disabled"}[st.Enabled]
	rl := map[bool]string{true: "yes", false: "no"}[st.NeedReload]
	return fmt.Sprintf("ActiveState=%s\nUnitFileState=%s\nNeedDaemonReload=%s\nActiveEnterTimestamp=%s\n", st.State, en, rl, st.ActiveEnter)
}

// errSkipped: fakeCaptured's answer says the script would not run the
// command (its condition is false): no section.
var errSkipped = errors.New("not run")

// fakeCaptured answers a script's captured sections as the shell would,
// each command answered by answer.
func fakeCaptured(script string, answer func(cmd string) (string, error)) string {
	var b strings.Builder
	for _, g := range reCaptured.FindAllStringSubmatch(script, -1) {
		out, err := answer(g[2])
		if errors.Is(err, errSkipped) {
			continue
		}
		code, stderr := 0, ""
		var ee *remote.ExitError
		if errors.As(err, &ee) {
			code, stderr = ee.Code, ee.Stderr
		} else if err != nil {
			code, stderr = 1, err.Error()
		}
		fmt.Fprintf(&b, "@@%s\n%d\n%s\n@@%s-stderr\n%s\n", g[1], code, strings.TrimRight(out, "\n"), g[1], stderr)
	}
	return b.String()
}

// answer is the host's answer to the read-only commands plans run; any
// other command succeeds silently (and is recorded by the fake).
func (m *hostModel) answer(cmd string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	switch {
	case strings.HasPrefix(cmd, "echo '@units'"):
		b.WriteString(fakeShowUnits(cmd, func(comp string) remote.UnitState { return m.units[comp] }))
		b.WriteString("@restart\n")
		var ms []string
		for k := range m.markers {
			ms = append(ms, k)
		}
		sort.Strings(ms)
		for _, k := range ms {
			b.WriteString(k + "\n")
		}
		fmt.Fprintf(&b, "@data\n%s\n", map[bool]string{true: "yes", false: "no"}[m.etcdData])
	case strings.HasPrefix(cmd, "systemctl show -p ActiveState "):
		// remote.QueryUnit (WaitActive): remote.ShowCommand of one unit.
		for _, comp := range units.Names(units.ControlPlane) {
			if cmd == remote.ShowCommand(comp+".service") {
				b.WriteString(fakeShowUnit(m.units[comp]))
			}
		}
	case strings.HasPrefix(cmd, "# compare "):
		// remote.Inspect: no stat cache, so every same-size file is hashed
		// ("# hash" below).
		b.WriteString("@stat\n")
		if p := reStatFiles.FindStringSubmatch(cmd); p != nil {
			for _, f := range strings.Fields(p[1]) {
				if l, ok := m.files[f]; ok {
					fs := strings.Fields(l)
					fmt.Fprintf(&b, "%s\tregular file\t%s\t%s 1 1 1\n", f, strings.Join(fs[:6], " "), fs[5])
				}
			}
		}
		b.WriteString("@dirs\n")
		if p := reStatDirs.FindStringSubmatch(cmd); p != nil {
			for _, d := range strings.Fields(p[1]) {
				if l, ok := m.dirs[d]; ok {
					fmt.Fprintf(&b, "%s\t%s\n", d, l)
				} else if d == units.AdminKubeconfig && m.oldAdmin {
					fmt.Fprintf(&b, "%s\t600 root:root\n", d)
				}
			}
		}
	case strings.HasPrefix(cmd, "# hash "):
		for _, p := range reHashFile.FindAllStringSubmatch(cmd, -1) {
			fs := strings.Fields(m.files[p[1]])
			b.WriteString(fs[len(fs)-1] + "\n")
		}
	case strings.HasPrefix(cmd, "# read "):
		for _, p := range reCompareFile.FindAllStringSubmatch(cmd, -1) {
			if d, ok := m.data[p[1]]; ok {
				b.WriteString("F " + base64.StdEncoding.EncodeToString(d) + "\n")
			} else {
				b.WriteString("M\n")
			}
		}
	case strings.HasPrefix(cmd, "head -c 65536 "):
		b.WriteString(m.content[strings.TrimPrefix(cmd, "head -c 65536 ")])
	case strings.HasPrefix(cmd, "date +%s%N\nuname -s"):
		return fmt.Sprintf("%d\nLinux\nx86_64\nsystemd\n73400320\n", time.Now().UnixNano()), nil
	case strings.Contains(cmd, "dd if=/dev/zero"):
		return "s 2000000\nb 1000000\n", nil
	}
	return b.String(), nil
}

// fakeCluster is a Cluster over fake hosts and a fake etcd.
type fakeCluster struct {
	*Cluster
	t     *testing.T
	hosts map[string]*remotetest.Fake
	model map[string]*hostModel
	etcd  *fakeEtcd
}

func threeHosts(t *testing.T) *inventory.Inventory {
	t.Helper()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
  - {name: c3, address: 10.240.0.13}
`))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func newFakeCluster(t *testing.T, inv *inventory.Inventory, opt Options, models map[string]*hostModel) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{t: t, hosts: map[string]*remotetest.Fake{}, model: models, etcd: &fakeEtcd{health: map[string]bool{}}}
	for _, h := range inv.Hosts() {
		m, ok := models[h.Name]
		if !ok && indexOf(inv.Workers, h.Name) >= 0 {
			continue // a worker is faked only when the test models it
		}
		f := remotetest.New(t, h.Name)
		f.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return m.answer(cmd) })
		fc.hosts[h.Name] = f
	}
	opt.Connect = func(_ context.Context, cfg remote.Config) (remote.Host, error) {
		f, ok := fc.hosts[cfg.Name]
		if !ok {
			return nil, fmt.Errorf("no fake host %s", cfg.Name)
		}
		return f, nil
	}
	fc.Cluster = New(inv, opt)
	fc.Cluster.newEtcd = func() (etcdAPI, error) { return fc.etcd, nil }
	return fc
}

// commands returns every command run on host.
func (fc *fakeCluster) commands(host string) []string { return fc.hosts[host].Commands() }

// fakeEtcd answers from a member list; health by client endpoint.
type fakeEtcd struct {
	mu      sync.Mutex
	members []etcd.Member
	health  map[string]bool // endpoint or client URL -> answers
	down    bool            // no quorum: the member list fails
	alarms  []string        // "member <hex id>: NOSPACE"
	calls   []string
	// after: an endpoint answers healthy only once another was asked
	// (a member alone has no quorum); endpoint -> the other endpoint
	after map[string]string
}

func (e *fakeEtcd) record(s string) {
	e.mu.Lock()
	e.calls = append(e.calls, s)
	e.mu.Unlock()
}

// mutations are the calls that change the cluster.
func (e *fakeEtcd) mutations() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, c := range e.calls {
		if strings.HasPrefix(c, "add ") || strings.HasPrefix(c, "remove ") {
			out = append(out, c)
		}
	}
	return out
}

func (e *fakeEtcd) Members(context.Context) ([]etcd.Member, error) {
	e.record("members")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		return nil, errors.New("context deadline exceeded")
	}
	return append([]etcd.Member(nil), e.members...), nil
}

func (e *fakeEtcd) Health(_ context.Context, ep string) error {
	e.record("health " + ep)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.health[ep] {
		return fmt.Errorf("etcd %s unhealthy: connection refused", ep)
	}
	if other, ok := e.after[ep]; ok && !slices.Contains(e.calls, "health "+other) {
		return fmt.Errorf("etcd %s: no quorum yet", ep)
	}
	return nil
}

func (e *fakeEtcd) Status(_ context.Context, ep string) (etcd.Status, error) {
	e.record("status " + ep)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.health[ep] {
		return etcd.Status{}, fmt.Errorf("etcd status %s: connection refused", ep)
	}
	st := etcd.Status{Endpoint: ep, Version: "3.6.16", DBSize: 4 << 20, DBSizeInUse: 1 << 20, RaftIndex: 1234, RaftTerm: 2}
	for _, m := range e.members {
		if len(m.ClientURLs) > 0 && m.ClientURLs[0] == ep {
			st.MemberID = m.ID
		}
		if len(e.members) > 0 {
			st.Leader = e.members[0].ID
		}
	}
	return st, nil
}

func (e *fakeEtcd) Alarms(context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.alarms, nil
}
func (e *fakeEtcd) Get(context.Context, string) ([]byte, error) { return nil, nil }
func (e *fakeEtcd) Close() error                                { return nil }
func (e *fakeEtcd) AddMember(_ context.Context, peer string) (uint64, error) {
	e.record("add " + peer)
	return 99, nil
}

func (e *fakeEtcd) RemoveMember(_ context.Context, id uint64) error {
	e.record(fmt.Sprintf("remove %x", id))
	return nil
}

// pushed makes every host's files and directories what push would make
// them (after render, with a release set).
func (fc *fakeCluster) pushed() {
	fc.t.Helper()
	for _, h := range fc.Inv.ControlPlane {
		m := fc.manifest(h.Name)
		files, err := fc.remoteFiles(m)
		if err != nil {
			fc.t.Fatal(err)
		}
		if err := remote.PrepareFiles(files); err != nil {
			fc.t.Fatal(err)
		}
		hm := fc.model[h.Name]
		hm.mu.Lock()
		for _, f := range files {
			owner, group := f.Owner, f.Group
			if owner == "" {
				owner = "root"
			}
			if group == "" {
				group = "root"
			}
			hm.files[f.Path] = fmt.Sprintf("%o %s 0 %s 0 %d %s", f.Mode.Perm(), owner, group, f.Size, f.SHA256)
			if f.Data != nil {
				hm.content[f.Path] = string(f.Data)
			}
			if strings.HasPrefix(f.Source, string(fc.opt.State)) {
				if hm.data == nil {
					hm.data = map[string][]byte{}
				}
				if hm.data[f.Path], err = os.ReadFile(f.Source); err != nil {
					fc.t.Fatal(err)
				}
			}
		}
		hm.dirs[restartDir] = "700 root:root"
		for _, d := range m.Dirs {
			hm.dirs[d.Path] = fmt.Sprintf("%o %s", d.Mode.Perm(), d.Owner)
		}
		hm.mu.Unlock()
	}
}

// converged sets the fake etcd to the inventory's members, all healthy.
func (e *fakeEtcd) converged(inv *inventory.Inventory) {
	for i, h := range inv.ControlPlane {
		ep := "https://" + h.IP() + ":2379"
		e.members = append(e.members, etcd.Member{ID: uint64(0x10 + i), Name: h.Name,
			PeerURLs: []string{"https://" + h.IP() + ":2380"}, ClientURLs: []string{ep}})
		e.health[ep] = true
	}
}
