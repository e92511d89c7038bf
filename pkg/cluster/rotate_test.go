package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
)

// fakeRotEnv models three apiservers (the file on each host and the config
// each one uses), and the Secrets in etcd by the key they are stored with.
// It checks the one rule a rotation must never break: every apiserver can
// decrypt what any other apiserver writes.
type fakeRotEnv struct {
	t        *testing.T
	mu       sync.Mutex
	names    []string
	files    map[string][]byte
	loaded   map[string][]byte
	stuck    map[string]bool // never reloads by itself
	noHash   bool            // reports no hash
	skip     string          // a Secret the rewrite misses
	restarts []string
	secrets  map[string]string // etcd key -> "provider/name"
	calls    int
	killAt   int // the call that "kills" the run (cancels its context); 0: none
	cancel   context.CancelFunc
}

func newFakeRotEnv(t *testing.T, c0 []byte) *fakeRotEnv {
	f := &fakeRotEnv{t: t, names: []string{"c1", "c2", "c3"}, files: map[string][]byte{}, loaded: map[string][]byte{},
		stuck: map[string]bool{}, secrets: map[string]string{}}
	for _, h := range f.names {
		f.files[h], f.loaded[h] = c0, c0
	}
	w := f.writeKey(c0)
	for i := range 5 {
		f.secrets[fmt.Sprintf("/registry/secrets/default/s%d", i)] = w
	}
	return f
}

// call counts a call and "kills" the run at killAt.
func (f *fakeRotEnv) call() error {
	f.calls++
	if f.killAt > 0 && f.calls == f.killAt {
		f.cancel()
		return context.Canceled
	}
	return nil
}

func (f *fakeRotEnv) writeKey(cfg []byte) string {
	c, err := pki.ParseEncryptionConfig("fake", cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	p := c.Resources[0].Providers[0]
	for name, kc := range map[string]*pki.KeysConfig{"secretbox": p.Secretbox, "aescbc": p.AESCBC, "aesgcm": p.AESGCM} {
		if kc != nil {
			return pki.KeyRef(name, kc.Keys[0].Name)
		}
	}
	f.t.Fatal("no key provider first")
	return ""
}

// checkSafe fails the test when an apiserver could not decrypt what
// another one writes.
func (f *fakeRotEnv) checkSafe() {
	for _, a := range f.names {
		for _, b := range f.names {
			if ok, why := compatible(f.loaded[b], f.loaded[a]); !ok {
				f.t.Errorf("the apiserver on %s cannot read what %s writes: %s", b, a, why)
			}
		}
	}
}

// compatible is pki.EncryptionCompatible, remembered: the kill test asks
// the same pairs thousands of times.
var compatibleSeen sync.Map

func compatible(reader, writer []byte) (bool, string) {
	k := string(reader) + "\x00" + string(writer)
	if v, ok := compatibleSeen.Load(k); ok {
		return v.(string) == "", v.(string)
	}
	ok, why := pki.EncryptionCompatible(reader, writer)
	if ok {
		why = ""
	} else if why == "" {
		why = "incompatible"
	}
	compatibleSeen.Store(k, why)
	return ok, why
}

func (f *fakeRotEnv) hosts() []string { return f.names }

func (f *fakeRotEnv) readConfig(_ context.Context, h string) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return nil, false, err
	}
	d, ok := f.files[h]
	return d, ok, nil
}

func (f *fakeRotEnv) writeConfig(_ context.Context, h string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return err
	}
	f.files[h] = data
	return nil
}

func (f *fakeRotEnv) loadedHash(_ context.Context, h string) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return "", false, err
	}
	if !f.stuck[h] {
		f.loaded[h] = f.files[h] // the automatic reload
		f.checkSafe()
	}
	return pki.EncryptionConfigHash(f.loaded[h]), !f.noHash, nil
}

func (f *fakeRotEnv) apiserverReady(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call()
}

func (f *fakeRotEnv) restartAPIServer(_ context.Context, h string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return err
	}
	f.restarts = append(f.restarts, h)
	f.loaded[h] = f.files[h]
	f.checkSafe()
	return nil
}

func (f *fakeRotEnv) rewriteSecrets(_ context.Context, progress func(int)) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return 0, err
	}
	w := f.writeKey(f.loaded[f.names[1]])
	n := 0
	for k := range f.secrets {
		if k != f.skip {
			f.secrets[k] = w
		}
		n++
	}
	progress(n)
	return n, nil
}

func (f *fakeRotEnv) scanSecrets(_ context.Context, fn func(string, []byte) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call(); err != nil {
		return err
	}
	var keys []string
	for k := range f.secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p, name, _ := strings.Cut(f.secrets[k], "/")
		if err := fn(k, []byte(pki.StoragePrefix(p, name)+"\x00ciphertext")); err != nil {
			return err
		}
	}
	return nil
}

// rotationFixture is a state directory with a secretbox config, the fake
// hosts holding it, and the inventory asking for provider.
type rotationFixture struct {
	t   *testing.T
	st  state.Dir
	env *fakeRotEnv
	c   *Cluster
	out *bytes.Buffer
}

func newRotationFixture(t *testing.T, provider string) *rotationFixture {
	t.Helper()
	st := state.Dir(t.TempDir())
	c0cfg, err := pki.NewEncryptionConfig("secretbox")
	if err != nil {
		t.Fatal(err)
	}
	c0, _ := c0cfg.Marshal()
	if err := os.WriteFile(st.EncryptionConfig(), c0, 0o600); err != nil {
		t.Fatal(err)
	}
	inv := threeHosts(t)
	inv.Encryption.Provider = provider
	var out bytes.Buffer
	return &rotationFixture{t: t, st: st, env: newFakeRotEnv(t, c0), out: &out, c: New(inv, Options{State: st, Out: &out})}
}

// run is one `hardway rotate encryption-key`.
func (fx *rotationFixture) run(o RotateOptions, killAt int) (RotationResult, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fx.env.killAt, fx.env.calls, fx.env.cancel = killAt, 0, cancel
	if o.PollInterval == 0 {
		o.PollInterval = time.Millisecond
	}
	r := fx.c.EncryptionRotation(o)
	r.env = fx.env
	if err := r.Preflight(ctx); err != nil {
		return r.Result(nil), err
	}
	pr, err := (&plan.Runner{Out: fx.out, DryRun: o.DryRun}).Run(ctx, r.Steps())
	return r.Result(pr), err
}

// checkDone proves a complete rotation to key (of the keys before, old).
func (fx *rotationFixture) checkDone(key string, old ...string) {
	t := fx.t
	t.Helper()
	local, err := os.ReadFile(fx.st.EncryptionConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range fx.env.names {
		if !bytes.Equal(fx.env.files[h], local) || !bytes.Equal(fx.env.loaded[h], local) {
			t.Errorf("%s: file or loaded config differs from the state directory's", h)
		}
	}
	c, _ := pki.ParseEncryptionConfig("local", local)
	if n := len(c.Resources[0].Providers); n != 2 || fx.env.writeKey(local) != key {
		t.Errorf("final config: %d providers, writes with %s; want %s and identity", n, fx.env.writeKey(local), key)
	}
	for k, v := range fx.env.secrets {
		if v != key {
			t.Errorf("%s stored with %s", k, v)
		}
	}
	if _, err := os.Stat(fx.st.EncryptionRotation()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the progress file is still there: %v", err)
	}
	retired, err := pki.LoadRetiredKeys(fx.st)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range retired {
		got = append(got, pki.KeyRef(k.Provider, k.Name))
	}
	if !slices.Equal(got, old) {
		t.Errorf("retired %v, want %v", got, old)
	}
	if note, err := pki.CheckEncryptionState(fx.st); note != "" || err != nil {
		t.Errorf("up's guard after the rotation: %q %v", note, err)
	}
}

func TestRotationRunsEveryStep(t *testing.T) {
	fx := newRotationFixture(t, "aescbc")
	res, err := fx.run(RotateOptions{}, 0)
	if err != nil {
		t.Fatalf("%v\n%s", err, fx.out)
	}
	if !res.Complete || res.Key != "aescbc/key2" || !slices.Equal(res.OldKeys, []string{"secretbox/key1"}) ||
		res.SecretsRewritten != 5 || res.SecretsChecked != 5 || res.Prefix != "k8s:enc:aescbc:v1:key2:" {
		t.Errorf("result %+v", res)
	}
	if len(fx.env.restarts) > 0 {
		t.Errorf("restarted %v although every apiserver reloads by itself", fx.env.restarts)
	}
	fx.checkDone("aescbc/key2", "secretbox/key1")
	for _, s := range pki.RotationSteps[1:] {
		if !strings.Contains(fx.out.String(), "["+s+"] ") {
			t.Errorf("no progress line for %s:\n%s", s, fx.out)
		}
	}
	// A second rotation moves on to key3 and keeps key1 retired.
	if _, err := fx.run(RotateOptions{}, 0); err != nil {
		t.Fatal(err)
	}
	fx.checkDone("aescbc/key3", "secretbox/key1", "aescbc/key2")
}

func TestRotationOutputHoldsNoKey(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	if _, err := fx.run(RotateOptions{}, 0); err != nil {
		t.Fatal(err)
	}
	retired, _ := pki.LoadRetiredKeys(fx.st)
	c, _ := pki.ParseEncryptionConfig("x", fx.env.files["c1"])
	for _, secret := range []string{retired[0].Secret, c.Resources[0].Providers[0].Secretbox.Keys[0].Secret} {
		if strings.Contains(fx.out.String(), secret) {
			t.Fatalf("the output shows a key:\n%s", fx.out)
		}
	}
}

// A run killed at any call is finished by the next run, the state
// directory's config is one that up accepts at every kill point, and no
// two apiservers ever disagree on a key (fakeRotEnv.checkSafe).
func TestRotationKilledAnywhereIsFinishedByTheNextRun(t *testing.T) {
	probe := newRotationFixture(t, "aescbc")
	if _, err := probe.run(RotateOptions{}, 0); err != nil {
		t.Fatal(err)
	}
	total := probe.env.calls
	if total < 20 {
		t.Fatalf("a clean run made only %d calls", total)
	}
	for killAt := 1; killAt <= total; killAt++ {
		fx := newRotationFixture(t, "aescbc")
		_, err := fx.run(RotateOptions{}, killAt)
		if err == nil {
			t.Fatalf("kill at call %d: the run succeeded", killAt)
		}
		if _, err := pki.CheckEncryptionState(fx.st); err != nil {
			t.Errorf("kill at call %d: up would refuse the state directory: %v", killAt, err)
		}
		res, err := fx.run(RotateOptions{}, 0)
		if err != nil {
			t.Fatalf("kill at call %d: the next run: %v\n%s", killAt, err, fx.out)
		}
		if !res.Complete {
			t.Errorf("kill at call %d: not complete", killAt)
		}
		fx.checkDone("aescbc/key2", "secretbox/key1")
	}
}

func TestRotationDryRunChangesNothing(t *testing.T) {
	fx := newRotationFixture(t, "aescbc")
	before := tree(t, string(fx.st))
	res, err := fx.run(RotateOptions{DryRun: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after := tree(t, string(fx.st)); after != before {
		t.Errorf("the dry run changed the state directory:\n%s\n%s", before, after)
	}
	c0, _ := os.ReadFile(fx.st.EncryptionConfig())
	for _, h := range fx.env.names {
		if !bytes.Equal(fx.env.files[h], c0) {
			t.Errorf("the dry run wrote to %s", h)
		}
	}
	out := fx.out.String()
	for _, want := range []string{
		"[add-key] would make the new key aescbc/key2",
		"[add-key] would c2: write /var/lib/kubernetes/encryption-config.yaml (aescbc/key2 added second)",
		"[wait-loaded] would c3: kube-apiserver loads the config with aescbc/key2 added second",
		"[key-first] would c1: write /var/lib/kubernetes/encryption-config.yaml (aescbc/key2 first, secretbox/key1 after it)",
		"[rewrite] would rewrite every Secret",
		"[prove] would read every Secret's raw value from etcd: each must start with k8s:enc:aescbc:v1:key2:",
		"[remove-old] would keep secretbox/key1 in",
		"[remove-old] would c3: write /var/lib/kubernetes/encryption-config.yaml (aescbc/key2 alone, secretbox/key1 removed)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if res.Complete || !res.DryRun {
		t.Errorf("result %+v", res)
	}
}

func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %v %d %x\n", p, fi.Mode(), fi.ModTime().UnixNano(), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRotationRestartsAnApiserverThatDoesNotReload(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	fx.env.stuck["c2"] = true
	_, err := fx.run(RotateOptions{ReloadTimeout: 20 * time.Millisecond}, 0)
	if err != nil {
		t.Fatalf("%v\n%s", err, fx.out)
	}
	if fmt.Sprint(fx.env.restarts) != "[c2 c2 c2]" {
		t.Errorf("restarts %v, want c2 once per wait", fx.env.restarts)
	}
	if !strings.Contains(fx.out.String(), "c2: kube-apiserver has not loaded") {
		t.Errorf("no line about the restart:\n%s", fx.out)
	}
	fx.checkDone("secretbox/key2", "secretbox/key1")

	// An apiserver that does not report the hash is restarted at once.
	fx = newRotationFixture(t, "secretbox")
	fx.env.noHash = true
	if _, err := fx.run(RotateOptions{ReloadTimeout: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	if len(fx.env.restarts) != 9 {
		t.Errorf("restarts %v, want every apiserver once per wait", fx.env.restarts)
	}
}

func TestRotationProveFailureRewritesAgain(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	fx.env.skip = "/registry/secrets/default/s3"
	_, err := fx.run(RotateOptions{}, 0)
	if err == nil || !strings.Contains(err.Error(), "1 of 5 Secrets in etcd are not stored with secretbox/key2: default/s3 (secretbox/key1)") {
		t.Fatalf("err %v", err)
	}
	rot, _ := pki.LoadRotation(fx.st)
	if rot == nil || rot.Done != 4 {
		t.Fatalf("after a failed proof the record says %+v, want 4 steps done", rot)
	}
	fx.env.skip = ""
	res, err := fx.run(RotateOptions{}, 0)
	if err != nil || res.ResumedAfter != 4 || res.SecretsRewritten != 5 {
		t.Fatalf("rerun: %+v %v", res, err)
	}
	fx.checkDone("secretbox/key2", "secretbox/key1")
}

func TestRotationRefusesAnotherProviderMidway(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	if _, err := fx.run(RotateOptions{Provider: "aescbc"}, 0); err == nil || !strings.Contains(err.Error(), "the inventory says encryption.provider: secretbox") {
		t.Errorf("a --provider the inventory does not name: %v", err)
	}
	if _, err := fx.run(RotateOptions{}, 30); err == nil {
		t.Fatal("not killed")
	}
	fx.c.Inv.Encryption.Provider = "aescbc"
	if _, err := fx.run(RotateOptions{Provider: "aescbc"}, 0); err == nil || !strings.Contains(err.Error(), "a rotation to secretbox/key2 is under way") {
		t.Errorf("another provider midway: %v", err)
	}
	// Without --provider it finishes the rotation it began.
	if _, err := fx.run(RotateOptions{}, 0); err != nil {
		t.Fatal(err)
	}
	fx.checkDone("secretbox/key2", "secretbox/key1")
}

func TestRotationRefusesHostsOfAnotherCluster(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	other, _ := pki.NewEncryptionConfig("secretbox")
	fx.env.files["c3"], _ = other.Marshal()
	_, err := fx.run(RotateOptions{}, 0)
	if err == nil || !strings.Contains(err.Error(), "c3: /var/lib/kubernetes/encryption-config.yaml: the key the host encrypts Secrets with") {
		t.Fatalf("err %v", err)
	}
	if _, err := os.Stat(fx.st.EncryptionRotation()); err == nil {
		t.Error("a refused rotation was recorded")
	}
}

// verify warns about a rotation left half done and fails a state directory
// that up would refuse.
func TestVerifyNamesARotationUnderWay(t *testing.T) {
	fx := newRotationFixture(t, "secretbox")
	models := map[string]*hostModel{"c1": runningHost(), "c2": runningHost(), "c3": runningHost()}
	fc := newFakeCluster(t, fx.c.Inv, Options{State: fx.st}, models)
	last := func() []string {
		var out []string
		// The first results are the probe Secret's (no apiserver here).
		for _, r := range fc.checkEncryptionAndRotation(context.Background())[1:] {
			out = append(out, fmt.Sprintf("%s: %s (hint: %s)", r.Status, r.Message, r.Hint))
		}
		return out
	}
	if got := last(); len(got) != 0 {
		t.Errorf("no rotation: %v", got)
	}
	if _, err := fx.run(RotateOptions{}, 30); err == nil {
		t.Fatal("not killed")
	}
	if got := last(); len(got) != 1 || !strings.HasPrefix(got[0], "warn: an encryption-key rotation to secretbox/key2 is under way") ||
		!strings.Contains(got[0], "'hardway rotate encryption-key' finishes it") {
		t.Errorf("a rotation under way: %v", got)
	}
	if err := os.WriteFile(fx.st.EncryptionConfig(), []byte("kind: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := last(); len(got) != 1 || !strings.HasPrefix(got[0], "fail: ") {
		t.Errorf("a broken config: %v", got)
	}
}
