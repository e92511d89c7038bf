package cluster

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// caRotationCluster is a converged fake cluster whose etcd still trusts the
// cluster CA (a state directory made before the etcd CA).
func caRotationCluster(t *testing.T) (*fakeCluster, string) {
	t.Helper()
	root := t.TempDir()
	text := "controlPlane:\n  - {name: c1, address: 10.240.0.11}\n  - {name: c2, address: 10.240.0.12}\n  - {name: c3, address: 10.240.0.13}\n"
	p := filepath.Join(root, "inventory.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Parse(p, p, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := pki.Generate(t.Context(), inv, st, pki.Options{LegacyEtcd: true}); err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster(t, inv, Options{State: st, Release: releaseOptionsIn(inv, root)}, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	fc.etcd.converged(inv)
	return fc, root
}

// `rotate ca --which etcd --dry-run`: every phase is planned (new CA,
// pushes of the bundle and the leaves, restarts host by host), and nothing
// changes: no host is sent a command that writes, etcd's membership is not
// touched, the state directory is byte for byte the same.
func TestCARotationPlanOnlyReads(t *testing.T) {
	ctx := context.Background()
	fc, root := caRotationCluster(t)
	before := treeHash(t, root)

	rot := fc.CARotation(CARotateOptions{Which: pki.WhichEtcd, DryRun: true})
	rot.ready = func(context.Context, inventory.Host) error { return nil }
	if err := rot.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ph := range rot.Phases() {
		res, err := (&plan.Runner{Out: io.Discard, DryRun: true}).Run(ctx, ph.Steps)
		if err != nil {
			t.Fatalf("phase %s: %v", ph.Name, err)
		}
		for _, s := range res.Steps {
			for _, a := range s.Actions {
				lines = append(lines, s.Name+" "+a.Host+": "+string(a.Kind)+" "+a.Desc)
			}
		}
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		"new-ca : reissue make a new etcd-ca",
		"trust-both/push c2: write write /etc/etcd/ca.crt",
		"trust-both/push c2: write write /var/lib/kubernetes/etcd-ca.crt",
		"trust-both/etcd c1: restart etcd: restart",
		"trust-both/control-plane c3: restart kube-apiserver: restart",
		"reissue : reissue reissue 7 certificate(s)",
		"reissue/push c1: write write /etc/etcd/etcd-peer.crt",
		"reissue/push c2: write write /var/lib/kubernetes/apiserver-etcd-client.key",
		"reissue/etcd c3: restart etcd: restart",
		"drop-old : write write",
		"drop-old/control-plane c1: restart kube-apiserver: restart",
		"drop-old/record : write rotation complete",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("plan lacks %q:\n%s", want, all)
		}
	}
	// Restarts of the controller-manager and scheduler are no part of it.
	if strings.Contains(all, "kube-controller-manager: restart") || strings.Contains(all, "kube-scheduler: restart") {
		t.Errorf("restarts beyond etcd and the apiservers:\n%s", all)
	}
	for _, h := range fc.Inv.ControlPlane {
		cmds := fc.commands(h.Name)
		if len(cmds) == 0 {
			t.Fatalf("%s was never asked anything: the test proves nothing", h.Name)
		}
		assertReadOnly(t, h.Name, cmds)
	}
	if m := fc.etcd.mutations(); len(m) > 0 {
		t.Errorf("etcd changed: %q", m)
	}
	if after := treeHash(t, root); after != before {
		t.Error("the local directory (inventory, state) changed")
	}
}

// The guards: an unknown CA is a usage error; a host whose apiserver unit
// an older hardway wrote (--etcd-cafile on the cluster CA) is refused
// before anything changes; while a rotation is recorded, up's identity
// step refuses with the command that finishes it.
func TestCARotationGuards(t *testing.T) {
	ctx := context.Background()
	fc, root := caRotationCluster(t)
	ready := func(context.Context, inventory.Host) error { return nil }

	rot := fc.CARotation(CARotateOptions{Which: "cluster", DryRun: true})
	if err := rot.Preflight(ctx); err == nil || usererr.CodeOf(err) != usererr.CodeUsage {
		t.Errorf("--which cluster: %v", err)
	}

	unit := "/etc/systemd/system/kube-apiserver.service"
	saved := fc.model["c2"].files[unit]
	fc.model["c2"].files[unit] = "644 root 0 root 0 9 0000"
	before := treeHash(t, root)
	rot = fc.CARotation(CARotateOptions{Which: pki.WhichEtcd})
	rot.ready = ready
	err := rot.Preflight(ctx)
	if err == nil || !strings.Contains(err.Error(), "c2: "+unit) || !strings.Contains(usererr.HintOf(err), "hardway up") {
		t.Errorf("stale unit: %v", err)
	}
	if treeHash(t, root) != before {
		t.Error("a refused preflight changed the state directory")
	}
	fc.model["c2"].files[unit] = saved

	// A recorded rotation stops up (and certs renew, the daemon's repairs).
	r, err := pki.StartCARotation(fc.Inv, fc.opt.State, pki.WhichEtcd, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.SaveCARotation(fc.opt.State, r, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = (&plan.Runner{Out: io.Discard, DryRun: true, Only: []string{StepIdentity}}).Run(ctx, fc.Steps())
	if err == nil || !strings.Contains(usererr.HintOf(err), "hardway rotate ca --which etcd") {
		t.Errorf("up during a CA rotation: %v", err)
	}
	var warned bool
	for _, x := range fc.checkEtcdTrust() {
		warned = warned || strings.Contains(x.Hint, "'hardway rotate ca --which etcd' finishes it")
	}
	if !warned {
		t.Error("verify does not name the rotation under way")
	}
}

// verify warns about a cluster whose etcd trusts the cluster CA, naming the
// command that migrates it; a new cluster gets no such warning.
func TestVerifyWarnsAboutSharedEtcdCA(t *testing.T) {
	fc, _ := caRotationCluster(t)
	rs := fc.checkEtcdTrust()
	if len(rs) != 1 || rs[0].Status != "warn" || !strings.Contains(rs[0].Hint, "hardway rotate ca --which etcd") ||
		!strings.Contains(rs[0].Message, "etcd trusts the cluster CA") {
		t.Errorf("%+v", rs)
	}
	inv := threeHosts(t)
	st := state.Dir(t.TempDir())
	if _, err := pki.Generate(t.Context(), inv, st, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	fresh := newFakeCluster(t, inv, Options{State: st}, models(inv, runningHost))
	if rs := fresh.checkEtcdTrust(); len(rs) != 0 {
		t.Errorf("new cluster: %+v", rs)
	}
}
