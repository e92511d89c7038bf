package cluster

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/state"
)

// snapSource sends a small snapshot shaped like etcd's (blocks + sha256).
type snapSource struct{}

func (snapSource) Snapshot(_ context.Context, w io.Writer) (backup.SnapshotInfo, error) {
	db := make([]byte, 4096)
	copy(db, "bbolt")
	sum := sha256.Sum256(db)
	_, err := w.Write(append(db, sum[:]...))
	return backup.SnapshotInfo{Member: "c2", EtcdVersion: "3.6.0"}, err
}

// testArchive is a backup of fc's inventory with a one-file state directory.
func testArchive(t *testing.T, fc *fakeCluster) *backup.Archive {
	t.Helper()
	st := state.Dir(filepath.Join(t.TempDir(), "st"))
	if err := os.MkdirAll(string(st), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(string(st), "encryption-config.yaml"), []byte("keys"), 0o600)
	os.WriteFile(fc.Inv.Path, []byte("controlPlane: []\n"), 0o644)
	res, err := backup.Create(context.Background(), backup.Options{Source: snapSource{}, Inventory: fc.Inv, State: st,
		Dir: t.TempDir(), Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := backup.Open(res.Path, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestRestoreStepsOrder(t *testing.T) {
	inv := threeHosts(t)
	fc := newFakeCluster(t, inv, Options{State: state.Dir(t.TempDir())}, map[string]*hostModel{"c1": runningHost(), "c2": runningHost(), "c3": runningHost()})
	var names []string
	for _, s := range fc.RestoreSteps(RestoreOptions{}) {
		names = append(names, s.Name)
	}
	want := "preflight restore-check restore-state identity host pki fetch render push restore-etcd etcd control-plane rbac workers dns"
	if strings.Join(names, " ") != want {
		t.Errorf("steps:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
}

func TestRestoreRefusesDataUnlessTold(t *testing.T) {
	inv := threeHosts(t)
	empty := runningHost()
	empty.etcdData = false
	for comp := range empty.units {
		empty.units[comp] = remoteStopped()
	}
	fc := newFakeCluster(t, inv, Options{State: state.Dir(t.TempDir())}, map[string]*hostModel{"c1": runningHost(), "c2": empty, "c3": runningHost()})
	err := fc.checkRestoreData(context.Background(), RestoreOptions{})
	if err == nil || !strings.Contains(err.Error(), "etcd holds data on c1 (running), c3 (running)") || !strings.Contains(hintOf(err, ""), "--replace-etcd-data") {
		t.Fatalf("got %v (hint %q)", err, hintOf(err, ""))
	}
	if err := fc.checkRestoreData(context.Background(), RestoreOptions{ReplaceData: true}); err != nil {
		t.Fatal(err)
	}
	for _, h := range inv.ControlPlane {
		for _, c := range fc.commands(h.Name) {
			if !strings.HasPrefix(c, "echo '@") {
				t.Errorf("%s: the check ran %q", h.Name, c)
			}
		}
	}
}

func remoteStopped() (st remote.UnitState) {
	st.State = "inactive"
	st.Enabled = true
	return st
}

// On a running cluster: every apiserver, controller-manager and scheduler
// stops first, then every etcd, then each member is restored from the same
// snapshot with the same new token; the plan itself changes nothing.
func TestPlanRestoreEtcd(t *testing.T) {
	inv := threeHosts(t)
	fc := newFakeCluster(t, inv, Options{State: state.Dir(t.TempDir())}, map[string]*hostModel{"c1": runningHost(), "c2": runningHost(), "c3": runningHost()})
	a := testArchive(t, fc)
	o := RestoreOptions{Archive: a, ReplaceData: true, BumpRevision: DefaultBumpRevision, Token: "lab-restore-x"}
	actions, err := fc.planRestoreEtcd(context.Background(), o, "20261130T220000Z")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ac := range actions {
		got = append(got, ac.Host+" "+string(ac.Kind)+" "+strings.SplitN(ac.Desc, " (", 2)[0])
	}
	want := []string{
		"c1 stop stop kube-apiserver", "c2 stop stop kube-apiserver", "c3 stop stop kube-apiserver",
		"c1 stop stop kube-controller-manager", "c2 stop stop kube-controller-manager", "c3 stop stop kube-controller-manager",
		"c1 stop stop kube-scheduler", "c2 stop stop kube-scheduler", "c3 stop stop kube-scheduler",
		"c1 stop stop etcd", "c2 stop stop etcd", "c3 stop stop etcd",
		"c1 restore restore etcd member c1 from the snapshot of c2", "c2 restore restore etcd member c2 from the snapshot of c2",
		"c3 restore restore etcd member c3 from the snapshot of c2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(actions[12].Desc, "old data to /var/lib/etcd.before-restore-20261130T220000Z") {
		t.Errorf("desc: %s", actions[12].Desc)
	}
	for _, h := range inv.ControlPlane {
		for _, c := range fc.commands(h.Name) {
			if !strings.HasPrefix(c, "echo '@") {
				t.Errorf("the plan ran %q on %s", c, h.Name)
			}
		}
	}
	for _, ac := range actions {
		if err := ac.Do(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	token := regexp.MustCompile(`--initial-cluster-token (\S+)`)
	for _, h := range inv.ControlPlane {
		cmds := strings.Join(fc.commands(h.Name), "\n---\n")
		for _, w := range []string{
			"systemctl stop kube-apiserver.service", "systemctl stop etcd.service",
			"# write /var/lib/hardway/restore/snapshot.db",
			a.Manifest.Snapshot.SHA256 + "  $snap\" | sha256sum -c",
			"/usr/local/bin/etcdutl snapshot restore \"$snap\" --name " + h.Name,
			"--initial-cluster c1=https://10.240.0.11:2380,c2=https://10.240.0.12:2380,c3=https://10.240.0.13:2380",
			"--initial-advertise-peer-urls https://" + h.IP() + ":2380",
			"--bump-revision 1000000000 --mark-compacted",
			"aside=/var/lib/etcd.before-restore-20261130T220000Z",
		} {
			if !strings.Contains(cmds, w) {
				t.Errorf("%s: no %q in\n%s", h.Name, w, cmds)
			}
		}
		if m := token.FindStringSubmatch(cmds); m == nil || m[1] != "lab-restore-x" {
			t.Errorf("%s: token %v", h.Name, m)
		}
		if strings.Contains(cmds, "rm -rf -- \"$d\"") || strings.Contains(cmds, "rm -rf /var/lib/etcd") {
			t.Errorf("%s: the old data dir is deleted, not moved aside", h.Name)
		}
	}
}
