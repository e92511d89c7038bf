package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

const identityInventory = `cluster: lab
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
  - {name: controller-2, address: 10.240.0.12}
  - {name: controller-3, address: 10.240.0.13}
`

// identitySetup loads a three-host inventory, renders its manifests and
// fills a state directory.
func identitySetup(t *testing.T) (*inventory.Inventory, []*units.Manifest, state.Dir) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, []byte(identityInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	st := state.Dir(filepath.Join(dir, "state"))
	if _, err := pki.Generate(t.Context(), inv, st, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	rendered, err := units.Render(inv, nil) // control plane only: no pod subnets
	if err != nil {
		t.Fatal(err)
	}
	var ms []*units.Manifest
	for i := range rendered {
		ms = append(ms, &rendered[i])
	}
	return inv, ms, st
}

// hostFiles is what a fake host holds: the state files of from copied to
// where the manifest puts them (from "" : nothing).
func hostFiles(t *testing.T, m *units.Manifest, from state.Dir) map[string][]byte {
	files := map[string][]byte{}
	if from == "" {
		return files
	}
	for _, f := range m.Files {
		if f.Source != nil && f.Source.Kind != units.SourceBinary {
			b, err := os.ReadFile(f.Source.LocalPath(from))
			if err != nil {
				t.Fatal(err)
			}
			files[f.Path] = b
		}
	}
	return files
}

// readAnswer is the output of remote.ReadFiles's script for the identity
// files of m (its public halves, in manifest order) on a host holding files.
func readAnswer(m *units.Manifest, files map[string][]byte) string {
	var b strings.Builder
	holdsCA := slices.ContainsFunc(m.Files, func(f units.File) bool {
		return f.Source != nil && f.Source.Kind == units.SourceCert && f.Source.Name == pki.CA
	})
	for _, f := range m.Files {
		if !IsIdentity(f.Source) || f.Source.Kind == units.SourceKey || holdsCA && f.Source.Name == pki.CATrustBundle {
			continue
		}
		if d, ok := files[f.Path]; ok {
			fmt.Fprintf(&b, "F %s\n", base64.StdEncoding.EncodeToString(d))
		} else {
			b.WriteString("M\n")
		}
	}
	return b.String()
}

// fakes are recording hosts that answer the one read command and fail the
// test on anything else: the comparison only reads.
func fakes(t *testing.T, ms []*units.Manifest, held func(host string) map[string][]byte) HostDialer {
	hosts := map[string]*remotetest.Fake{}
	for _, m := range ms {
		f := remotetest.New(t, m.Host)
		f.ExpectMatch(`^# read \d+ files\n`).Returns(readAnswer(m, held(m.Host)))
		hosts[m.Host] = f
	}
	return func(_ context.Context, name string) (remote.Host, error) {
		if h, ok := hosts[name]; ok {
			return h, nil
		}
		return nil, fmt.Errorf("dial %s: no route to host", name)
	}
}

func TestCompareIdentity(t *testing.T) {
	inv, ms, st := identitySetup(t)

	// Another cluster's state directory: what a fresh `pki` would make.
	other := state.Dir(filepath.Join(t.TempDir(), "other"))
	if _, err := pki.Generate(t.Context(), inv, other, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	empty := state.Dir(filepath.Join(t.TempDir(), "empty"))

	byHost := func(m map[string]state.Dir) func(string) map[string][]byte {
		return func(h string) map[string][]byte {
			for _, x := range ms {
				if x.Host == h {
					return hostFiles(t, x, m[h])
				}
			}
			return nil
		}
	}
	all := func(d state.Dir) map[string]state.Dir {
		return map[string]state.Dir{"controller-1": d, "controller-2": d, "controller-3": d}
	}

	t.Run("converged", func(t *testing.T) {
		mm, down, err := CompareIdentity(t.Context(), ms, st, fakes(t, ms, byHost(all(st))))
		if err != nil || len(mm) != 0 || len(down) != 0 {
			t.Fatalf("%v %+v %v", err, mm, down)
		}
	})
	t.Run("fresh hosts", func(t *testing.T) {
		mm, _, err := CompareIdentity(t.Context(), ms, empty, fakes(t, ms, byHost(all(""))))
		if err != nil || len(mm) != 0 {
			t.Fatalf("%v %+v", err, mm)
		}
	})
	t.Run("state directory lost", func(t *testing.T) {
		mm, _, err := CompareIdentity(t.Context(), ms, empty, fakes(t, ms, byHost(all(st))))
		if err != nil {
			t.Fatal(err)
		}
		// ca.crt, etcd-ca.crt, front-proxy-ca.crt, service-account.pub,
		// encryption-config.yaml: on each host. etcd's ca.crt is the trust
		// bundle, which changes during a CA rotation: not identity.
		if len(mm) != 15 {
			t.Fatalf("%d mismatches: %+v", len(mm), mm)
		}
		for _, m := range mm {
			if !m.Missing {
				t.Errorf("%+v not missing", m)
			}
		}
		err = IdentityError(mm, "controller-1", nil)
		hint := usererr.HintOf(err)
		for _, want := range []string{"hardway state pull controller-1", "--replace-identity"} {
			if !strings.Contains(hint, want) {
				t.Errorf("hint lacks %q:\n%s", want, hint)
			}
		}
		for _, want := range []string{"nothing was written", "controller-3: /var/lib/kubernetes/encryption-config.yaml: the host has it",
			"controller-2: /etc/etcd/etcd-ca.crt"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
	t.Run("another identity on one host", func(t *testing.T) {
		mm, _, err := CompareIdentity(t.Context(), ms, st, fakes(t, ms, byHost(map[string]state.Dir{
			"controller-1": st, "controller-2": other, "controller-3": st})))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			units.CACert:            "another certificate than pki/ca.crt",
			units.EtcdOwnCACert:     "another certificate than pki/etcd-ca.crt",
			units.FrontProxyCACert:  "another certificate than pki/front-proxy-ca.crt",
			units.ServiceAccountPub: "another key than pki/service-account.pub",
			units.EncryptionConfig:  "the key the host encrypts Secrets with (secretbox \"key1\") is not in the local config",
		}
		if len(mm) != len(want) {
			t.Fatalf("%+v", mm)
		}
		for _, m := range mm {
			if m.Host != "controller-2" || m.Missing || want[m.Path] != m.Why {
				t.Errorf("%+v", m)
			}
		}
		err = IdentityError(mm, "controller-2", nil)
		if !strings.Contains(err.Error(), "differs from the state directory's") ||
			!strings.Contains(usererr.HintOf(err), "move the state\ndirectory away and run 'hardway state pull controller-2'") {
			t.Errorf("%v\nhint: %s", err, usererr.HintOf(err))
		}
		// Never a secret in the message.
		enc, _ := pki.LoadEncryptionConfig(other.EncryptionConfig())
		if s := enc.Resources[0].Providers[0].Secretbox.Keys[0].Secret; strings.Contains(err.Error()+usererr.HintOf(err), s) {
			t.Error("the message holds the encryption key")
		}
	})
	t.Run("key rotation in progress is not a mismatch", func(t *testing.T) {
		// Local: a new key first, the hosts' key second.
		old, _ := os.ReadFile(st.EncryptionConfig())
		c, _ := pki.LoadEncryptionConfig(st.EncryptionConfig())
		n, _ := pki.NewEncryptionConfig("secretbox")
		k := n.Resources[0].Providers[0].Secretbox.Keys[0]
		k.Name = "key2"
		sb := c.Resources[0].Providers[0].Secretbox
		sb.Keys = append([]pki.Key{k}, sb.Keys...)
		b, _ := c.Marshal()
		os.WriteFile(st.EncryptionConfig(), b, 0o600)
		defer os.WriteFile(st.EncryptionConfig(), old, 0o600)
		held := func(h string) map[string][]byte {
			f := hostFiles(t, ms[0], st)
			f[units.EncryptionConfig] = old
			return f
		}
		mm, _, err := CompareIdentity(t.Context(), ms, st, fakes(t, ms, held))
		if err != nil || len(mm) != 0 {
			t.Fatalf("%v %+v", err, mm)
		}
	})
	// A damaged copy on one host is drift: the state directory and the
	// other hosts agree, and nothing can have been made with a copy that
	// does not parse.
	damage := map[string][]byte{
		units.EncryptionConfig:  nil, // filled below: a literal ${ENCRYPTION_KEY}
		units.CACert:            nil, // truncated
		units.ServiceAccountPub: []byte("\n"),
	}
	enc, _ := os.ReadFile(st.EncryptionConfig())
	ec, _ := pki.LoadEncryptionConfig(st.EncryptionConfig())
	secret := ec.Resources[0].Providers[0].Secretbox.Keys[0].Secret
	damage[units.EncryptionConfig] = []byte(strings.Replace(string(enc), secret, "${ENCRYPTION_KEY}", 1))
	ca, _ := os.ReadFile(st.Cert(pki.CA))
	damage[units.CACert] = ca[:len(ca)/2]
	damaged := func(h string) map[string][]byte {
		f := hostFiles(t, ms[0], st)
		if h == "controller-2" {
			for p, d := range damage {
				f[p] = d
			}
		}
		return f
	}
	t.Run("damaged copies on one host are drift, not another identity", func(t *testing.T) {
		mm, _, err := CompareIdentity(t.Context(), ms, st, fakes(t, ms, damaged))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			units.EncryptionConfig:  "the host's copy is damaged (a key is not base64 (a literal ${ENCRYPTION_KEY}? the apiserver cannot start with it))",
			units.CACert:            "the host's copy is damaged (no PEM certificate (truncated or overwritten?))",
			units.ServiceAccountPub: "the host's copy is damaged (empty)",
		}
		if len(mm) != len(want) {
			t.Fatalf("%+v", mm)
		}
		for _, m := range mm {
			if m.Host != "controller-2" || !m.Damaged || m.Missing || m.blocks() || want[m.Path] != m.Why {
				t.Errorf("%+v", m)
			}
		}
	})
	t.Run("a lost state directory and one damaged host: the hint names a host with valid copies", func(t *testing.T) {
		mm, _, err := CompareIdentity(t.Context(), ms, empty, fakes(t, ms, damaged))
		if err != nil {
			t.Fatal(err)
		}
		c := &Cluster{Inv: inv}
		from, bad := c.pullFrom(mm, nil)
		if from != "controller-1" || fmt.Sprint(bad) != "[controller-2]" {
			t.Fatalf("from %q, damaged %v", from, bad)
		}
		err = IdentityError(mm, from, bad)
		hint := usererr.HintOf(err)
		if !strings.Contains(hint, "'hardway state pull controller-1' (not from controller-2: damaged copies)") {
			t.Errorf("hint:\n%s", hint)
		}
		// controller-1 unreachable too: controller-3, never controller-2.
		from, _ = c.pullFrom(mm, []string{"controller-1 (dial: no route to host)"})
		if from != "controller-3" {
			t.Errorf("from %q", from)
		}
		from, _ = c.pullFrom(mm, []string{"controller-1 (x)", "controller-3 (x)"})
		if from != "" {
			t.Errorf("from %q", from)
		}
		if h := usererr.HintOf(IdentityError(mm, "", bad)); !strings.Contains(h, "lost (or this is a fresh clone): restore it from your backup (no reachable control-plane host holds valid copies to pull),\nthen run 'hardway up' again.") || strings.Contains(h, "--from") {
			t.Errorf("hint without a valid host:\n%s", h)
		}
	})
	t.Run("another identity on one host and damage on another: refused, the hint never names the damaged host", func(t *testing.T) {
		held := func(h string) map[string][]byte {
			switch h {
			case "controller-1":
				return damaged("controller-2")
			case "controller-2":
				return hostFiles(t, ms[1], other)
			}
			return hostFiles(t, ms[2], st)
		}
		mm, _, err := CompareIdentity(t.Context(), ms, st, fakes(t, ms, held))
		if err != nil {
			t.Fatal(err)
		}
		c := &Cluster{Inv: inv}
		from, bad := c.pullFrom(mm, nil)
		if from != "controller-2" || fmt.Sprint(bad) != "[controller-1]" {
			t.Fatalf("from %q, damaged %v", from, bad)
		}
		err = IdentityError(mm, from, bad)
		if !strings.Contains(err.Error(), "differs from the state directory's") || !strings.Contains(err.Error(), "controller-1: /var/lib/kubernetes/ca.crt: the host's copy is damaged") {
			t.Errorf("%v", err)
		}
	})
	t.Run("unreachable host is named, not compared", func(t *testing.T) {
		d := fakes(t, ms[:2], byHost(all(st)))
		mm, down, err := CompareIdentity(t.Context(), ms, st, d)
		if err != nil || len(mm) != 0 || len(down) != 1 || !strings.Contains(down[0], "controller-3 (dial controller-3") {
			t.Fatalf("%v %+v %v", err, mm, down)
		}
	})
}

// The guard runs before every later step, even when --only leaves the
// identity step out, and a failure stops the run before any action.
func TestGuardStepsCannotBeBypassed(t *testing.T) {
	var ran []string
	step := func(name string) plan.Step {
		return plan.Step{Name: name, Plan: func(context.Context, plan.Planned) ([]plan.Action, error) {
			ran = append(ran, name)
			return []plan.Action{{Host: "controller-1", Kind: plan.Write, Desc: "write", Do: func(context.Context) error {
				ran = append(ran, name+" wrote")
				return nil
			}}}, nil
		}}
	}
	checks := 0
	identity := func(context.Context, plan.Planned) ([]plan.Action, error) {
		checks++
		return nil, usererr.New(errors.New("identity differs"), "hardway state pull")
	}
	preflight := plan.Step{Name: "preflight", Plan: func(context.Context, plan.Planned) ([]plan.Action, error) { return nil, nil }}
	steps := []plan.Step{preflight, {Name: StepIdentity}, step("pki"), step("push")}
	for _, r := range []*plan.Runner{
		{},
		{Only: []string{"push"}},
		{Skip: []string{StepIdentity}},
		{DryRun: true},
	} {
		ran, checks = nil, 0
		r.Out = &strings.Builder{}
		_, err := r.Run(t.Context(), guardSteps(steps, identity))
		if err == nil || !strings.Contains(err.Error(), "identity differs") || usererr.HintOf(err) != "hardway state pull" {
			t.Errorf("%+v: err %v", r, err)
		}
		for _, x := range ran {
			if strings.HasSuffix(x, "wrote") || x == "pki" || x == "push" {
				t.Errorf("%+v: %s ran", r, x)
			}
		}
		if checks != 1 {
			t.Errorf("%+v: identity checked %d times", r, checks)
		}
	}

	// Passing, it is checked once for the whole list.
	checks = 0
	ok := func(context.Context, plan.Planned) ([]plan.Action, error) { checks++; return nil, nil }
	res, err := (&plan.Runner{Out: &strings.Builder{}}).Run(t.Context(), guardSteps(steps, ok))
	if err != nil || checks != 1 || res.Changes() != 2 {
		t.Errorf("err %v, %d checks, %d changes", err, checks, res.Changes())
	}
}

// The case on fake hosts: a converged cluster, the state directory
// moved away, then a real (not dry) `up`: it stops in the identity step,
// with the hint naming state pull, having sent no host a write and created
// no key locally. --only push does not get around it either.
func TestUpStopsWhenTheStateDirectoryIsLost(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	inv := threeHosts(t)
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := generatedIn(ctx, inv, st); err != nil {
		t.Fatal(err)
	}
	opt := Options{State: st, Release: releaseOptionsIn(inv, root)}
	fc := newFakeCluster(t, inv, opt, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()

	lost := state.Dir(filepath.Join(root, "fresh-clone", ".hardway"))
	for _, r := range []*plan.Runner{{}, {Only: []string{StepPush}}} {
		opt.State = lost
		fc2 := newFakeCluster(t, inv, opt, fc.model)
		r.Out = &strings.Builder{}
		_, err := r.Run(ctx, fc2.Steps())
		if err == nil {
			t.Fatal("up went ahead without the cluster's identity")
		}
		if !strings.Contains(err.Error(), "[identity]") || !strings.Contains(usererr.HintOf(err), "hardway state pull c1") {
			t.Errorf("err %v\nhint %s", err, usererr.HintOf(err))
		}
		for _, h := range inv.ControlPlane {
			assertReadOnly(t, h.Name, fc2.commands(h.Name))
		}
		if _, err := os.Stat(lost.Cert(pki.CA)); err == nil {
			t.Fatal("a new CA was made")
		}
	}

	// On purpose: the identity step lists the replacement, and pki makes
	// the new identity (in a dry run: planned only).
	opt.State, opt.ReplaceIdentity = lost, true
	fc3 := newFakeCluster(t, inv, opt, fc.model)
	res, err := (&plan.Runner{Out: &strings.Builder{}, DryRun: true, Only: []string{StepIdentity, StepPKI}}).Run(ctx, fc3.Steps())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Steps[1].Actions); n != 3 || !strings.Contains(res.Steps[1].Actions[0].Desc, "replace the cluster identity (--replace-identity): /etc/etcd/etcd-ca.crt") {
		t.Errorf("identity actions: %+v", res.Steps[1].Actions)
	}
}

// The case on fake hosts: one host's encryption config holds a
// literal ${ENCRYPTION_KEY} and its service-account.key is gone. up plans
// the repair of exactly those files on exactly that host, with no flag; a
// valid but different CA on that host is still refused, with nothing sent
// that writes.
func TestUpRepairsADamagedIdentityFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	inv := threeHosts(t)
	st := state.Dir(filepath.Join(root, ".hardway"))
	if _, err := generatedIn(ctx, inv, st); err != nil {
		t.Fatal(err)
	}
	opt := Options{State: st, Release: releaseOptionsIn(inv, root)}
	fc := newFakeCluster(t, inv, opt, models(inv, runningHost))
	fc.withRelease()
	fc.pushed()
	setFile := func(host, path string, data []byte) {
		hm := fc.model[host]
		hm.mu.Lock()
		defer hm.mu.Unlock()
		if data == nil {
			delete(hm.files, path)
			delete(hm.data, path)
			return
		}
		f := strings.Fields(hm.files[path])
		hm.files[path] = fmt.Sprintf("%s %s %s %s %s %d %x", f[0], f[1], f[2], f[3], f[4], len(data), sha256.Sum256(data))
		hm.data[path] = data
	}
	enc, _ := os.ReadFile(st.EncryptionConfig())
	ec, _ := pki.LoadEncryptionConfig(st.EncryptionConfig())
	secret := ec.Resources[0].Providers[0].Secretbox.Keys[0].Secret
	setFile("c2", units.EncryptionConfig, []byte(strings.Replace(string(enc), secret, "${ENCRYPTION_KEY}", 1)))
	setFile("c2", units.ServiceAccountKey, nil)

	var out strings.Builder
	res, err := (&plan.Runner{Out: &out, DryRun: true, Only: []string{StepIdentity, StepPush}}).Run(ctx, fc.Steps())
	if err != nil {
		t.Fatalf("%v\nhint: %s", err, usererr.HintOf(err))
	}
	var got []string
	for _, s := range res.Steps {
		for _, a := range s.Actions {
			got = append(got, s.Name+" "+a.Host+": "+a.Desc)
		}
	}
	want := []string{
		"identity c2: repair /var/lib/kubernetes/encryption-config.yaml: the host's copy is damaged (a key is not base64 " +
			"(a literal ${ENCRYPTION_KEY}? the apiserver cannot start with it)); rewritten from the state directory's " +
			"encryption-config.yaml (the cluster's keys do not change)",
		"push c2: write /var/lib/kubernetes/encryption-config.yaml (0600, content)",
		"push c2: repair /var/lib/kubernetes/service-account.key (0600, missing; from the state directory: the cluster's keys do not change)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(out.String(), secret) {
		t.Error("the plan printed the encryption key")
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc.commands(h.Name))
	}

	// The daemon's --repair runs push (and the restarts) without the identity
	// step (pkg/daemon RepairSteps); the guard still compares first, so the
	// damage is repaired there too, on c2 alone.
	repair := &plan.Runner{Out: &strings.Builder{}, Only: []string{StepPush}}
	if _, err := repair.Run(ctx, fc.Steps()); err != nil {
		t.Fatalf("repair: %v", err)
	}
	wrote := func(host, path string) bool {
		return slices.ContainsFunc(fc.commands(host), func(c string) bool { return strings.Contains(c, path) && strings.Contains(c, "mv ") })
	}
	for _, h := range []string{"c1", "c3"} {
		assertReadOnly(t, h, fc.commands(h))
	}
	if !wrote("c2", units.EncryptionConfig) || !wrote("c2", units.ServiceAccountKey) {
		t.Errorf("the repair did not rewrite c2's files:\n%s", strings.Join(fc.commands("c2"), "\n---\n"))
	}

	// A valid CA of another cluster on c2: refused, nothing written.
	other := state.Dir(filepath.Join(t.TempDir(), "other"))
	if _, err := pki.Generate(ctx, inv, other, pki.Options{}); err != nil {
		t.Fatal(err)
	}
	otherCA, _ := os.ReadFile(other.Cert(pki.CA))
	setFile("c2", units.CACert, otherCA)
	fc2 := newFakeCluster(t, inv, opt, fc.model)
	_, err = (&plan.Runner{Out: &strings.Builder{}}).Run(ctx, fc2.Steps())
	if err == nil || !strings.Contains(err.Error(), "c2: /var/lib/kubernetes/ca.crt: another certificate than pki/ca.crt") ||
		!strings.Contains(err.Error(), "c2: /var/lib/kubernetes/encryption-config.yaml: the host's copy is damaged") {
		t.Fatalf("err %v", err)
	}
	if h := usererr.HintOf(err); !strings.Contains(h, "--replace-identity") || strings.Contains(h, "--from c2") {
		t.Errorf("hint names the damaged host:\n%s", h)
	}
	for _, h := range inv.ControlPlane {
		assertReadOnly(t, h.Name, fc2.commands(h.Name))
	}
}
