package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
)

// certs renew plans, from a converged cluster with an unrelated drift: the
// renewed leaves' files only (counted as changed before they are reissued,
// as in a dry run), then exactly the restarts they bring, host by host; the
// plan reads only, and the reissue changes the named leaves and nothing else.
func TestRenewPlan(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st, Renew: []string{"kube-apiserver", "etcd-server-c2", "kube-scheduler"}}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	// Drift that up would push and renew must leave alone.
	unit := "/etc/systemd/system/kube-controller-manager.service"
	fc.model["c1"].files[unit] = "644 root 0 root 0 12 0000"

	var names []string
	for _, s := range fc.RenewSteps() {
		names = append(names, s.Name)
	}
	if want := []string{StepPreflight, StepIdentity, StepRenew, StepFetch, StepRender, StepPush, StepEtcd, StepControlPlane, "workers"}; !slices.Equal(names, want) {
		t.Fatalf("steps %v, want %v", names, want)
	}

	renew, err := fc.planRenew(ctx, nil)
	if err != nil || len(renew) != 1 || renew[0].Kind != plan.Reissue {
		t.Fatalf("renew: %v %q", err, descs(renew))
	}
	for _, s := range []string{"kube-apiserver: expires", "etcd-server-c2: expires", "kube-scheduler: expires", "rewrites kubeconfig kube-scheduler"} {
		if !strings.Contains(renew[0].Diff, s) {
			t.Errorf("renew plan lacks %q:\n%s", s, renew[0].Diff)
		}
	}

	push, err := fc.planPush(ctx, plan.Planned(renew))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range push {
		if a.Kind != plan.Write || !strings.Contains(a.Desc, "renewed") {
			t.Errorf("push: %s %s: %s", a.Kind, a.Host, a.Desc)
		}
		got = append(got, a.Host+" "+strings.Fields(a.Desc)[1]+" "+strings.Join(a.Restarts, ","))
	}
	want := []string{
		"c1 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c1 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c1 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
		"c2 /etc/etcd/etcd-server.crt etcd",
		"c2 /etc/etcd/etcd-server.key etcd",
		"c2 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c2 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c2 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
		"c3 /var/lib/kubernetes/kube-apiserver.crt kube-apiserver",
		"c3 /var/lib/kubernetes/kube-apiserver.key kube-apiserver",
		"c3 /var/lib/kubernetes/kube-scheduler.kubeconfig kube-scheduler",
	}
	if !slices.Equal(got, want) {
		t.Errorf("push:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	earlier := plan.Planned(append(renew, push...))
	et, err := fc.planEtcd(ctx, earlier)
	if err != nil || len(et) != 1 || et[0].Host != "c2" || et[0].Kind != plan.Restart {
		t.Errorf("etcd: %v %q", err, descs(et))
	}
	cp, err := fc.planControlPlane(ctx, earlier)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := descs(cp), []string{
		"restart c1: kube-apiserver: restart (files changed)",
		"restart c2: kube-apiserver: restart (files changed)",
		"restart c3: kube-apiserver: restart (files changed)",
		"restart c1: kube-scheduler: restart (files changed)",
		"restart c2: kube-scheduler: restart (files changed)",
		"restart c3: kube-scheduler: restart (files changed)",
	}; !slices.Equal(got, want) {
		t.Errorf("control plane:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}

	serial := func(name string) string { return readSerial(t, st, name) }
	before := map[string]string{}
	for _, e := range pki.Entries(inv) {
		before[e.Name] = serial(e.Name)
	}
	sched, _ := os.ReadFile(st.Kubeconfig("kube-scheduler"))
	cm, _ := os.ReadFile(st.Kubeconfig("kube-controller-manager"))
	if err := renew[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range pki.Entries(inv) {
		changed := serial(e.Name) != before[e.Name]
		if changed != slices.Contains(fc.opt.Renew, e.Name) {
			t.Errorf("%s: serial changed %v", e.Name, changed)
		}
	}
	if b, _ := os.ReadFile(st.Kubeconfig("kube-scheduler")); string(b) == string(sched) {
		t.Error("the scheduler's kubeconfig still embeds the old certificate")
	}
	if b, _ := os.ReadFile(st.Kubeconfig("kube-controller-manager")); string(b) != string(cm) {
		t.Error("the controller-manager's kubeconfig changed")
	}
	if rs := pki.Check(inv, st, time.Now()); pki.AnyFailed(rs) {
		t.Errorf("check after renew: %+v", rs)
	}
}

func readSerial(t *testing.T, st interface{ Cert(string) string }, name string) string {
	t.Helper()
	b, err := os.ReadFile(st.Cert(name))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// An admin kubeconfig left on a control-plane host (an earlier hardway
// pushed it) is removed by up unless the inventory asks for it; nothing
// else is planned on a converged host, and asking keeps (pushes) it.
func TestOldAdminKubeconfigRemoved(t *testing.T) {
	ctx := context.Background()
	inv := threeHosts(t)
	st := generated(t, inv)
	fc := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.model["c2"].oldAdmin = true
	as, err := fc.planPush(ctx, nil)
	if got := descs(as); err != nil || len(got) != 1 || got[0] != "write c2: remove /var/lib/kubernetes/admin.kubeconfig (system:masters; pki.adminKubeconfigOnHosts is off)" {
		t.Fatalf("%v %q", err, got)
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}
	if err := as[0].Do(ctx); err != nil {
		t.Fatal(err)
	}
	if cmds := fc.commands("c2"); cmds[len(cmds)-1] != "rm -f /var/lib/kubernetes/admin.kubeconfig" {
		t.Errorf("last command %q", cmds[len(cmds)-1])
	}

	inv.PKI.AdminKubeconfigOnHosts = true
	fc2 := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	fc2.withRelease()
	as, err = fc2.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range as {
		if strings.Contains(a.Desc, "admin.kubeconfig") {
			n++
			if !strings.HasPrefix(a.Desc, "write /var/lib/kubernetes/admin.kubeconfig") {
				t.Errorf("%s", a.Desc)
			}
		}
	}
	if n != 3 {
		t.Errorf("admin kubeconfig pushed to %d hosts, want 3", n)
	}
}
