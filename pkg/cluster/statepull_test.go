package cluster

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// stateFilesIn maps every file of a state directory (relative path) to its
// content and mode.
func stateFilesIn(t *testing.T, st state.Dir) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(string(st), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(string(st), p)
		if d.IsDir() {
			out[rel+"/"] = fi.Mode().Perm().String()
			return nil
		}
		b, _ := os.ReadFile(p)
		out[rel] = fi.Mode().Perm().String() + " " + string(b)
		return nil
	})
	return out
}

// pullSetup: a converged fake cluster whose state directory is then lost;
// the returned options point at a new, empty one.
func pullSetup(t *testing.T) (*fakeCluster, Options, state.Dir) {
	t.Helper()
	root := t.TempDir()
	inv := threeHosts(t)
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := generatedIn(context.Background(), inv, st); err != nil {
		t.Fatal(err)
	}
	opt := Options{State: st, Release: releaseOptionsIn(inv, root)}
	fc := newFakeCluster(t, inv, opt, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	opt.State = state.Dir(filepath.Join(root, "clone", ".hardway"))
	return fc, opt, st
}

func TestStatePullRebuildsTheStateDirectory(t *testing.T) {
	ctx := context.Background()
	fc, opt, orig := pullSetup(t)
	pc := newFakeCluster(t, fc.Inv, opt, fc.model)
	pc.withRelease()
	res, err := pc.PullState(ctx, PullOptions{From: "c1"})
	if err != nil {
		t.Fatalf("%v\nhint: %s", err, usererr.HintOf(err))
	}

	// Byte for byte and mode for mode the state directory that was lost.
	want, got := stateFilesIn(t, orig), stateFilesIn(t, opt.State)
	delete(got, "lock")
	for p, w := range want {
		if strings.HasPrefix(p, "pki/kube-proxy.") || p == "kubeconfigs/kube-proxy.kubeconfig" ||
			strings.HasPrefix(p, "pki/admin.") || p == "kubeconfigs/admin.kubeconfig" {
			// No host holds kube-proxy's certificate (no workers), nor
			// admin's (pki.adminKubeconfigOnHosts is off): issued anew
			// from the pulled CA, so only the mode is the same.
			if got[p][:10] != w[:10] {
				t.Errorf("%s: mode %s, want %s", p, got[p][:10], w[:10])
			}
			continue
		}
		if got[p] != w {
			t.Errorf("%s differs from the lost state directory (%.10s vs %.10s)", p, got[p], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d files, want %d", len(got), len(want))
	}
	for _, s := range []string{PullPulled, PullExtracted, PullIssued} {
		if res.Count(s) == 0 {
			t.Errorf("no file %s: %+v", s, res.Files)
		}
	}
	for _, f := range res.Files {
		if f.Path == "pki/ca.key" && (f.Status != PullPulled || f.From[0] != "c1") {
			t.Errorf("ca.key: %+v", f)
		}
		if f.Path == "pki/kube-scheduler.key" && f.Status != PullExtracted {
			t.Errorf("kube-scheduler.key: %+v", f)
		}
		if f.Path == "pki/admin.key" && f.Status != PullIssued {
			t.Errorf("admin.key: %+v", f)
		}
	}
	if c := pki.Check(fc.Inv, opt.State, time.Now()); pki.AnyFailed(c) {
		t.Errorf("check: %+v", c)
	}

	// The summary never holds a secret.
	j, _ := json.Marshal(res)
	for _, secret := range []string{"pki/ca.key", "pki/service-account.key", "encryption-config.yaml", "kubeconfigs/admin.kubeconfig"} {
		b, _ := os.ReadFile(filepath.Join(string(opt.State), secret))
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(string(j), strings.TrimSpace(line)) {
				t.Errorf("the summary holds a line of %s", secret)
			}
		}
	}

	// up then has nothing to do: identity, pki and push plan nothing.
	uc := newFakeCluster(t, fc.Inv, opt, fc.model)
	uc.withRelease()
	r, err := (&plan.Runner{Out: &strings.Builder{}, DryRun: true, Only: []string{StepIdentity, StepPKI, StepPush}}).Run(ctx, uc.Steps())
	if err != nil {
		t.Fatal(err)
	}
	if r.Changes() != 0 {
		t.Errorf("up after state pull plans changes: %+v", r.Steps)
	}

	// A second pull changes nothing.
	pc2 := newFakeCluster(t, fc.Inv, opt, fc.model)
	pc2.withRelease()
	res, err = pc2.PullState(ctx, PullOptions{From: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Count(PullUnchanged); n != len(res.Files) {
		t.Errorf("second pull: %d of %d unchanged: %+v", n, len(res.Files), res.Files)
	}
}

func TestStatePullRefusals(t *testing.T) {
	ctx := context.Background()

	t.Run("not a control-plane host", func(t *testing.T) {
		fc, opt, _ := pullSetup(t)
		_, err := newFakeCluster(t, fc.Inv, opt, fc.model).PullState(ctx, PullOptions{From: "w9"})
		if usererr.CodeOf(err) != usererr.CodeUsage || !strings.Contains(usererr.HintOf(err), "c1, c2, c3") {
			t.Errorf("%v %q", err, usererr.HintOf(err))
		}
	})
	t.Run("a local file differs", func(t *testing.T) {
		fc, opt, _ := pullSetup(t)
		os.MkdirAll(opt.State.PKIDir(), 0o700)
		os.WriteFile(opt.State.Key("ca"), []byte("mine"), 0o600)
		before := stateFilesIn(t, opt.State)
		pc := newFakeCluster(t, fc.Inv, opt, fc.model)
		pc.withRelease()
		_, err := pc.PullState(ctx, PullOptions{From: "c1"})
		if err == nil || !strings.Contains(err.Error(), "pki/ca.key") || !strings.Contains(usererr.HintOf(err), "--force") {
			t.Fatalf("%v", err)
		}
		after := stateFilesIn(t, opt.State)
		delete(after, "lock")
		if len(after) != len(before) || after["pki/ca.key"] != before["pki/ca.key"] {
			t.Error("files written although refused")
		}
		if _, err := pc.PullState(ctx, PullOptions{From: "c1", Force: true}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(opt.State.Key("ca")); string(b) == "mine" {
			t.Error("--force did not replace it")
		}
	})
	t.Run("identity missing on the host", func(t *testing.T) {
		fc, opt, _ := pullSetup(t)
		delete(fc.model["c1"].data, units.FrontProxyCAKey)
		pc := newFakeCluster(t, fc.Inv, opt, fc.model)
		pc.withRelease()
		_, err := pc.PullState(ctx, PullOptions{From: "c1"})
		if err == nil || !strings.Contains(err.Error(), "c1 does not hold pki/front-proxy-ca.key") ||
			!strings.Contains(usererr.HintOf(err), "--from c2") {
			t.Fatalf("%v\n%s", err, usererr.HintOf(err))
		}
		if _, err := os.Stat(opt.State.Cert("ca")); err == nil {
			t.Error("files written although refused")
		}
		// Another host has it.
		if _, err := pc.PullState(ctx, PullOptions{From: "c2"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("copies of a leaf differ", func(t *testing.T) {
		fc, opt, _ := pullSetup(t)
		// A valid certificate that is another one (a damaged copy is no
		// candidate at all: below).
		fc.model["c3"].data[units.APIServerCert] = fc.model["c3"].data[units.CACert]
		fc.model["c2"].data[units.APIServerCert] = []byte("truncated")
		pc := newFakeCluster(t, fc.Inv, opt, fc.model)
		pc.withRelease()
		res, err := pc.PullState(ctx, PullOptions{From: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range res.Files {
			if f.Path == "pki/kube-apiserver.crt" && (f.From[0] != "c1" || !strings.Contains(f.Note, "copies differ between c1, c3: taken from c1")) {
				t.Errorf("%+v", f)
			}
		}
	})
}

// A cluster made before the etcd CA has none on its hosts: state pull
// rebuilds it as it is (etcd still on the cluster CA, no etcd CA made), and
// up then has nothing to do.
func TestStatePullSingleCACluster(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	inv := threeHosts(t)
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := pki.Generate(ctx, inv, st, pki.Options{LegacyEtcd: true}); err != nil {
		t.Fatal(err)
	}
	opt := Options{State: st, Release: releaseOptionsIn(inv, root)}
	fc := newFakeCluster(t, inv, opt, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	opt.State = state.Dir(filepath.Join(root, "clone", ".hardway"))
	pc := newFakeCluster(t, inv, opt, fc.model)
	pc.withRelease()
	if _, err := pc.PullState(ctx, PullOptions{From: "c2"}); err != nil {
		t.Fatalf("%v\nhint: %s", err, usererr.HintOf(err))
	}
	if legacy, err := pki.EtcdLegacy(opt.State); !legacy || err != nil {
		t.Errorf("pulled state: legacy %v, %v", legacy, err)
	}
	if _, err := os.Stat(opt.State.Cert(pki.EtcdCA)); err == nil {
		t.Error("state pull made an etcd CA")
	}
	uc := newFakeCluster(t, inv, opt, fc.model)
	uc.withRelease()
	r, err := (&plan.Runner{Out: &strings.Builder{}, DryRun: true, Only: []string{StepIdentity, StepPKI, StepPush}}).Run(ctx, uc.Steps())
	if err != nil {
		t.Fatal(err)
	}
	if r.Changes() != 0 {
		t.Errorf("up after state pull plans changes: %+v", r.Steps)
	}
}

// A host whose copy of an identity file is damaged is never a source: a pull
// from it is refused, naming the hosts with valid copies, and a pull from
// another host takes the valid copy and says where the damage is.
func TestStatePullNeverTakesADamagedCopy(t *testing.T) {
	ctx := context.Background()
	fc, opt, orig := pullSetup(t)
	enc, err := os.ReadFile(orig.EncryptionConfig())
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := pki.LoadEncryptionConfig(orig.EncryptionConfig())
	secret := ec.Resources[0].Providers[0].Secretbox.Keys[0].Secret
	fc.model["c2"].data[units.EncryptionConfig] = []byte(strings.Replace(string(enc), secret, "${ENCRYPTION_KEY}", 1))

	pc := newFakeCluster(t, fc.Inv, opt, fc.model)
	pc.withRelease()
	_, err = pc.PullState(ctx, PullOptions{From: "c2"})
	if err == nil || !strings.Contains(err.Error(), "c2's copy is damaged: encryption-config.yaml (a key is not base64") ||
		!strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("err %v", err)
	}
	if h := usererr.HintOf(err); !strings.Contains(h, "--from c1, --from c3") {
		t.Errorf("hint: %s", h)
	}
	if _, err := os.Stat(string(opt.State)); err == nil {
		if _, err := os.Stat(opt.State.EncryptionConfig()); err == nil {
			t.Error("a refused pull wrote the encryption config")
		}
	}

	res, err := pc.PullState(ctx, PullOptions{From: "c1"})
	if err != nil {
		t.Fatalf("%v\nhint: %s", err, usererr.HintOf(err))
	}
	got, _ := os.ReadFile(opt.State.EncryptionConfig())
	if string(got) != string(enc) {
		t.Error("the pulled encryption config is not the valid one")
	}
	for _, f := range res.Files {
		if f.Path == "encryption-config.yaml" && !strings.Contains(f.Note, "damaged on c2 ('hardway up' repairs it)") {
			t.Errorf("%+v", f)
		}
		if strings.Contains(f.Note, secret) {
			t.Error("a note holds the key")
		}
	}
}
