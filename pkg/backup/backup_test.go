package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
)

// fakeSource sends a snapshot shaped like etcd's: a whole number of 512-byte
// blocks followed by their sha256 (or a damaged one).
type fakeSource struct {
	db      []byte
	damage  func([]byte) []byte
	streams int
}

func newFakeSource(t *testing.T, blocks int) *fakeSource {
	db := make([]byte, 512*blocks)
	if _, err := rand.Read(db[:len(db)/2]); err != nil { // half random: gzip has something to do
		t.Fatal(err)
	}
	return &fakeSource{db: db}
}

func (f *fakeSource) bytes() []byte {
	sum := sha256.Sum256(f.db)
	b := append(append([]byte{}, f.db...), sum[:]...)
	if f.damage != nil {
		b = f.damage(b)
	}
	return b
}

func (f *fakeSource) Snapshot(_ context.Context, w io.Writer) (SnapshotInfo, error) {
	f.streams++
	_, err := w.Write(f.bytes())
	return SnapshotInfo{Member: "controller-2", Endpoint: "https://10.0.0.12:2379", EtcdVersion: "3.6.0"}, err
}

// fixture is an inventory, its lock and a state directory with keys, a
// lock file, logs and a stray temp file.
type fixture struct {
	inv   *inventory.Inventory
	state state.Dir
	out   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	inv := &inventory.Inventory{Cluster: "lab", Path: filepath.Join(dir, "inventory.yaml"),
		ControlPlane: []inventory.Host{{Name: "controller-1"}, {Name: "controller-2"}, {Name: "controller-3"}}}
	st := state.Dir(filepath.Join(dir, ".hardway"))
	files := map[string]string{
		"inventory.yaml":                         "cluster: lab\n",
		"hardway.lock":                           "etcd: v3.6.16\n",
		".hardway/pki/ca.key":                    "CA KEY",
		".hardway/pki/ca.crt":                    "CA CERT",
		".hardway/encryption-config.yaml":        "keys: [key2, key1]\n",
		".hardway/kubeconfigs/admin.kubeconfig":  "admin",
		".hardway/lock":                          "pid 1",
		".hardway/logs/up-1.log":                 "log",
		".hardway/pki/.tmp-ca.key-123":           "stray",
		".hardway/pod-subnets.yaml":              "{}\n",
		".hardway/pki/service-account.key":       "SA KEY",
		".hardway/pki/front-proxy-ca.key":        "FP KEY",
		".hardway/pki/apiserver-etcd-client.key": "K",
	}
	for n, c := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(n, ".key") {
			mode = 0o600
		}
		if err := os.WriteFile(p, []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{inv: inv, state: st, out: filepath.Join(dir, "backups")}
}

func passKeys(p string) Keys {
	return Keys{Getenv: func(k string) string {
		if k == PassphraseEnv {
			return p
		}
		return ""
	}, WorkFactor: 10}
}

func (fx *fixture) create(t *testing.T, src Source, k Keys, plaintext bool) (*Result, error) {
	t.Helper()
	rs, err := k.EncryptTo()
	if err != nil {
		t.Fatal(err)
	}
	return Create(context.Background(), Options{Source: src, Inventory: fx.inv, State: fx.state, Dir: fx.out, Recipients: rs, Plaintext: plaintext})
}

func ids(t *testing.T, k Keys) []age.Identity {
	t.Helper()
	is, err := k.DecryptWith()
	if err != nil {
		t.Fatal(err)
	}
	return is
}

func TestRoundTripPassphrase(t *testing.T) {
	fx := newFixture(t)
	src := newFakeSource(t, 40)
	res, err := fx.create(t, src, passKeys("correct horse battery staple"), false)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(res.Path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != res.Size || !res.Encrypted {
		t.Fatalf("%v %v %+v", err, fi.Mode(), res)
	}
	if !strings.HasSuffix(res.Path, ".tar.gz.age") || !strings.HasPrefix(filepath.Base(res.Path), "hardway-backup-lab-") {
		t.Errorf("name %s", res.Path)
	}
	if enc, err := Encrypted(res.Path); err != nil || !enc {
		t.Errorf("Encrypted(age) = %v, %v", enc, err)
	}
	raw, _ := os.ReadFile(res.Path)
	if bytes.Contains(raw, []byte("CA KEY")) || !bytes.HasPrefix(raw, []byte("age-encryption.org/v1\n")) {
		t.Fatal("the file is not encrypted")
	}
	if got := sha256.Sum256(raw); res.SHA256 != hexs(got[:]) {
		t.Errorf("result sha256 %s, file %x", res.SHA256, got)
	}
	// No temporary directory or file is left beside it.
	des, _ := os.ReadDir(fx.out)
	if len(des) != 1 {
		t.Errorf("output dir holds %d entries", len(des))
	}

	tmp := t.TempDir()
	a, err := Open(res.Path, ids(t, passKeys("correct horse battery staple")), tmp)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := os.ReadFile(a.SnapshotPath())
	if !bytes.Equal(snap, src.bytes()) || a.Manifest.Snapshot.Member != "controller-2" || a.Manifest.Snapshot.SHA256 != res.Snapshot.SHA256 {
		t.Errorf("snapshot differs or manifest wrong: %+v", a.Manifest.Snapshot)
	}
	var names []string
	for _, f := range a.Manifest.Files {
		names = append(names, f.Name)
	}
	want := "etcd/snapshot.db inventory.yaml hardway.lock state/encryption-config.yaml state/kubeconfigs/admin.kubeconfig " +
		"state/pki/apiserver-etcd-client.key state/pki/ca.crt state/pki/ca.key state/pki/front-proxy-ca.key state/pki/service-account.key state/pod-subnets.yaml"
	if strings.Join(names, " ") != want {
		t.Errorf("entries:\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	if a.Manifest.Cluster != "lab" || len(a.Manifest.ControlPlane) != 3 {
		t.Errorf("manifest %+v", a.Manifest)
	}

	// Restoring the state into an empty directory reproduces it, modes too.
	dst := state.Dir(filepath.Join(t.TempDir(), "st"))
	written, err := a.WriteState(dst, false)
	if err != nil || len(written) != 8 {
		t.Fatalf("%v %v", err, written)
	}
	fi, err = os.Stat(filepath.Join(string(dst), "pki/ca.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v", err, fi)
	}
	b, _ := os.ReadFile(filepath.Join(string(dst), "encryption-config.yaml"))
	if string(b) != "keys: [key2, key1]\n" {
		t.Errorf("encryption config %q", b)
	}
	// Again: nothing to write. A differing local file is refused, then forced.
	if w, err := a.WriteState(dst, false); err != nil || len(w) != 0 {
		t.Errorf("second write: %v %v", err, w)
	}
	os.WriteFile(filepath.Join(string(dst), "pki/ca.key"), []byte("NEWER"), 0o600)
	if _, err := a.WriteState(dst, false); err == nil || !strings.Contains(err.Error(), "pki/ca.key") || strings.Contains(err.Error(), "CA KEY") {
		t.Errorf("conflict: %v", err)
	}
	if w, err := a.WriteState(dst, true); err != nil || strings.Join(w, ",") != "pki/ca.key" {
		t.Errorf("forced: %v %v", err, w)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(tmp); len(des) != 0 {
		t.Errorf("Close left %d entries in the temp dir", len(des))
	}
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestRoundTripAgeKeys(t *testing.T) {
	fx := newFixture(t)
	id1, _ := age.GenerateX25519Identity()
	id2, _ := age.GenerateX25519Identity()
	kf := filepath.Join(t.TempDir(), "key.txt")
	os.WriteFile(kf, []byte("# a key\n"+id2.String()+"\n"), 0o600)
	rf := filepath.Join(t.TempDir(), "recipients.txt")
	os.WriteFile(rf, []byte("# team\n"+id2.Recipient().String()+"\n"), 0o644)
	res, err := fx.create(t, newFakeSource(t, 8), Keys{Recipients: []string{id1.Recipient().String()}, RecipientFiles: []string{rf}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(res.Path, ids(t, Keys{IdentityFiles: []string{kf}, Getenv: func(string) string { return "" }}), t.TempDir()); err != nil {
		t.Fatalf("the second recipient cannot open it: %v", err)
	}
	other, _ := age.GenerateX25519Identity()
	if _, err := Verify(res.Path, []age.Identity{other}, t.TempDir()); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another key: %v", err)
	}
	if _, err := (Keys{Recipients: []string{"age1notakey"}}).EncryptTo(); err == nil {
		t.Error("a bad recipient was accepted")
	}
}

func TestNoKeyIsRefusedUnlessPlaintext(t *testing.T) {
	fx := newFixture(t)
	src := newFakeSource(t, 4)
	if _, err := fx.create(t, src, passKeys(""), false); err == nil || !strings.Contains(err.Error(), "no passphrase") {
		t.Fatalf("unencrypted without asking: %v", err)
	}
	if src.streams != 0 {
		t.Error("a snapshot was taken before the keys were checked")
	}
	res, err := fx.create(t, src, passKeys(""), true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Encrypted || !strings.HasSuffix(res.Path, ".tar.gz") {
		t.Errorf("%+v", res)
	}
	if enc, err := Encrypted(res.Path); err != nil || enc {
		t.Errorf("Encrypted(plain) = %v, %v", enc, err)
	}
	if _, err := Verify(res.Path, nil, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// Every kind of damage is refused with its own error, and Open leaves no
// extracted file behind.
func TestDamagedBackupsAreRefused(t *testing.T) {
	fx := newFixture(t)
	res, err := fx.create(t, newFakeSource(t, 300), passKeys("pass"), false)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := fx.create(t, newFakeSource(t, 300), passKeys(""), true)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(res.Path)
	goodPlain, _ := os.ReadFile(plain.Path)
	good4 := ids(t, passKeys("pass"))

	type tc struct {
		name string
		data []byte
		ids  []age.Identity
		want error
	}
	flip := func(b []byte, at int) []byte {
		c := append([]byte{}, b...)
		c[at] ^= 0x01
		return c
	}
	cases := []tc{
		{"wrong passphrase", good, ids(t, passKeys("wrong")), ErrWrongKey},
		{"no passphrase", good, nil, ErrNeedKey},
		{"empty file", nil, good4, ErrNotBackup},
		{"not a backup", []byte("hello world, this is not a backup at all\n"), good4, ErrNotBackup},
	}
	// Bytes in the header (its MAC), the first, a middle and the last chunk.
	for _, at := range []int{60, 200, len(good) / 2, len(good) - 5, len(good) - 1} {
		want := ErrDamaged
		if at < 200 {
			want = nil // the header: wrong key or damaged, either is a refusal
		}
		cases = append(cases, tc{"flipped byte at " + strconv.Itoa(at), flip(good, at), good4, want})
	}
	for _, n := range []int{len(good) - 1, len(good) - 17, len(good) / 2, 300, 100} {
		cases = append(cases, tc{"truncated to " + strconv.Itoa(n), good[:n], good4, nil})
	}
	for _, at := range []int{20, len(goodPlain) / 2, len(goodPlain) - 3} {
		cases = append(cases, tc{"unencrypted, flipped byte at " + strconv.Itoa(at), flip(goodPlain, at), nil, ErrDamaged})
	}
	cases = append(cases, tc{"unencrypted, truncated", goodPlain[:len(goodPlain)-10], nil, ErrDamaged})
	cases = append(cases, tc{"trailing garbage", append(append([]byte{}, good...), 'x'), good4, ErrDamaged})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "b.tar.gz.age")
			os.WriteFile(p, c.data, 0o600)
			tmp := t.TempDir()
			_, err := Verify(p, c.ids, tmp)
			if err == nil {
				t.Fatal("accepted")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
			if strings.Contains(c.name, "truncated") && !strings.Contains(err.Error(), "truncated") {
				t.Errorf("a truncated file is not called truncated: %v", err)
			}
			if c.name == "flipped byte at "+strconv.Itoa(len(good)/2) && !strings.Contains(err.Error(), "(a changed byte)") {
				t.Errorf("a flipped byte is not called a changed byte: %v", err)
			}
			if !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrWrongKey) && !errors.Is(err, ErrNeedKey) && !errors.Is(err, ErrNotBackup) {
				t.Errorf("unclassified error: %v", err)
			}
			if strings.Contains(err.Error(), "CA KEY") || strings.Contains(err.Error(), "SA KEY") {
				t.Errorf("the error shows a secret: %v", err)
			}
			if des, _ := os.ReadDir(tmp); len(des) != 0 {
				t.Errorf("Open left %d entries", len(des))
			}
		})
	}
}

// A snapshot whose trailer does not match — damaged in transit, or cut
// short — never becomes a backup, and an archive that carries one (its
// manifest consistent with it) is refused by Open.
func TestSnapshotTrailer(t *testing.T) {
	fx := newFixture(t)
	for name, damage := range map[string]func([]byte) []byte{
		"flipped":   func(b []byte) []byte { b[100] ^= 1; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-512] },
		"no trailer": func(b []byte) []byte {
			return b[:len(b)-trailerSize]
		},
	} {
		t.Run(name, func(t *testing.T) {
			src := newFakeSource(t, 10)
			src.damage = damage
			_, err := fx.create(t, src, passKeys("p"), false)
			if !errors.Is(err, ErrSnapshotHash) {
				t.Fatalf("got %v", err)
			}
			if des, _ := os.ReadDir(fx.out); len(des) != 0 {
				t.Errorf("%d files left in the output dir", len(des))
			}

			// The same snapshot packed by hand, manifest and all.
			snap := damage(newFakeSource(t, 10).bytes())
			sp := filepath.Join(t.TempDir(), "s")
			os.WriteFile(sp, snap, 0o600)
			e := entry{File: File{Name: SnapshotName, Mode: 0o600}, path: sp}
			inv := entry{File: File{Name: InventoryName, Mode: 0o644}, path: fx.inv.Path}
			e.hash()
			inv.hash()
			m := Manifest{Format: FormatVersion, Cluster: "lab", Snapshot: SnapshotInfo{Size: e.Size, SHA256: e.SHA256},
				Files: []File{e.File, inv.File}}
			var buf bytes.Buffer
			if err := writeArchive(&buf, m, []entry{e, inv}, nil); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "b.tar.gz")
			os.WriteFile(p, buf.Bytes(), 0o600)
			if _, err := Verify(p, nil, t.TempDir()); !errors.Is(err, ErrDamaged) || !errors.Is(err, ErrSnapshotHash) {
				t.Errorf("Open: %v", err)
			}
		})
	}
}

// Archives that are well-formed gzip and tar but not what the manifest
// says: an extra entry, a missing one, a name escaping the directory.
func TestManifestMismatch(t *testing.T) {
	fx := newFixture(t)
	src := newFakeSource(t, 4)
	sp := filepath.Join(t.TempDir(), "s")
	os.WriteFile(sp, src.bytes(), 0o600)
	snap := entry{File: File{Name: SnapshotName, Mode: 0o600}, path: sp}
	inv := entry{File: File{Name: InventoryName, Mode: 0o644}, path: fx.inv.Path}
	snap.hash()
	inv.hash()
	base := Manifest{Format: FormatVersion, Snapshot: SnapshotInfo{Size: snap.Size, SHA256: snap.SHA256}}
	build := func(m Manifest, es []entry, extra string) string {
		var buf bytes.Buffer
		if err := writeArchive(&buf, m, es, nil); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if extra != "" { // re-pack with one more entry the manifest does not list
			var out bytes.Buffer
			gz, _ := gzip.NewReader(bytes.NewReader(b))
			tr := tar.NewReader(gz)
			gw := gzip.NewWriter(&out)
			tw := tar.NewWriter(gw)
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				tw.WriteHeader(h)
				io.Copy(tw, tr)
			}
			tw.WriteHeader(&tar.Header{Name: extra, Mode: 0o600, Size: 1, Typeflag: tar.TypeReg})
			tw.Write([]byte("x"))
			tw.Close()
			gw.Close()
			b = out.Bytes()
		}
		p := filepath.Join(t.TempDir(), "b.tar.gz")
		os.WriteFile(p, b, 0o600)
		return p
	}
	ok := base
	ok.Files = []File{snap.File, inv.File}
	if _, err := Verify(build(ok, []entry{snap, inv}, ""), nil, t.TempDir()); err != nil {
		t.Fatalf("the good one: %v", err)
	}
	if _, err := Verify(build(ok, []entry{snap, inv}, "state/evil"), nil, t.TempDir()); !errors.Is(err, ErrDamaged) {
		t.Errorf("extra entry: %v", err)
	}
	noInv := base
	noInv.Files = []File{snap.File}
	if _, err := Verify(build(noInv, []entry{snap}, ""), nil, t.TempDir()); err == nil || !strings.Contains(err.Error(), "inventory.yaml") {
		t.Errorf("no inventory: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/passwd", "state/../../x", "other/file", "state/./x"} {
		m := ok
		evil := inv
		evil.Name = bad
		m.Files = []File{snap.File, evil.File}
		p := build(m, []entry{snap, evil}, "")
		tmp := t.TempDir()
		if _, err := Verify(p, nil, tmp); err == nil {
			t.Errorf("%q accepted", bad)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(tmp), "x")); err == nil {
			t.Errorf("%q escaped", bad)
		}
	}
	future := ok
	future.Format = 99
	if _, err := Verify(build(future, []entry{snap, inv}, ""), nil, t.TempDir()); !errors.Is(err, ErrNotBackup) {
		t.Errorf("format 99: %v", err)
	}
}

func TestKeepAndNames(t *testing.T) {
	fx := newFixture(t)
	src := newFakeSource(t, 2)
	os.MkdirAll(fx.out, 0o700)
	otherCluster := filepath.Join(fx.out, "hardway-backup-prod-20200101T000000Z.tar.gz.age")
	unrelated := filepath.Join(fx.out, "notes.txt")
	os.WriteFile(otherCluster, []byte("x"), 0o600)
	os.WriteFile(unrelated, []byte("x"), 0o600)
	t0 := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	var paths []string
	for i, d := range []time.Duration{0, 0, time.Hour, 2 * time.Hour} { // two in the same second
		now := t0.Add(d)
		res, err := Create(context.Background(), Options{Source: src, Inventory: fx.inv, State: fx.state, Dir: fx.out, Plaintext: true,
			Keep: 3, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(i, err)
		}
		paths = append(paths, res.Path)
		if i == 3 && (len(res.Removed) != 1 || res.Removed[0] != paths[0]) {
			t.Errorf("removed %v, want %s", res.Removed, paths[0])
		}
	}
	if filepath.Base(paths[1]) != "hardway-backup-lab-20261130T220000Z-2.tar.gz" {
		t.Errorf("second name in the same second: %s", paths[1])
	}
	left, _ := List(fx.out, "lab")
	if strings.Join(left, ",") != strings.Join(paths[1:], ",") {
		t.Errorf("left %v, want %v", left, paths[1:])
	}
	for _, p := range []string{otherCluster, unrelated} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("--keep removed %s", p)
		}
	}
}

func TestPassphraseSources(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(f, []byte("from-file\nignored\n"), 0o600)
	k := Keys{PassphraseFile: f, Getenv: func(string) string { return "from-env" }}
	if p, err := k.passphrase(false); err != nil || p != "from-file" {
		t.Errorf("%q %v", p, err)
	}
	k.PassphraseFile = ""
	if p, _ := k.passphrase(false); p != "from-env" {
		t.Errorf("env: %q", p)
	}
	asked := false
	k = Keys{Getenv: func(string) string { return "" }, Prompt: func(confirm bool) (string, error) { asked = confirm; return "typed", nil }}
	if p, _ := k.passphrase(true); p != "typed" || !asked {
		t.Errorf("prompt: %q %v", p, asked)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := (Keys{PassphraseFile: empty}).EncryptTo(); err == nil {
		t.Error("an empty passphrase file was accepted")
	}
	id, _ := age.GenerateX25519Identity()
	if _, err := (Keys{PassphraseFile: f, Recipients: []string{id.Recipient().String()}}).EncryptTo(); err == nil {
		t.Error("a passphrase and recipients together were accepted")
	}
}
