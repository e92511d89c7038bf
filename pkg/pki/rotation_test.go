package pki

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/state"
)

// keysOf lists a config's providers and key names: "secretbox[key1 key2] identity".
func keysOf(c *EncryptionConfig) string {
	var out []string
	for _, p := range c.Resources[0].Providers {
		name, keys := p.name()
		if keys == nil {
			out = append(out, name)
			continue
		}
		var ks []string
		for _, k := range keys.Keys {
			ks = append(ks, k.Name)
		}
		out = append(out, name+"["+strings.Join(ks, " ")+"]")
	}
	return strings.Join(out, " ")
}

func mustStart(t *testing.T, from *EncryptionConfig, provider string, retired []RetiredKey) *EncryptionRotation {
	t.Helper()
	r, err := StartRotation(from, provider, retired, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRotationPhases(t *testing.T) {
	sb, err := NewEncryptionConfig("secretbox")
	if err != nil {
		t.Fatal(err)
	}
	cbc := mustStart(t, sb, "aescbc", nil).Config(PhaseRetired) // aescbc[key2] identity
	// From aescbc back to secretbox while an old secretbox key is listed
	// further down: its keys join the new entry, no provider twice.
	mixed := cloneConfig(cbc)
	mixed.Resources[0].Providers = append([]ProviderConfig{mixed.Resources[0].Providers[0], withKeys("secretbox", []Key{{Name: "key1", Secret: sb.Resources[0].Providers[0].Secretbox.Keys[0].Secret}})}, mixed.Resources[0].Providers[1:]...)
	for _, tc := range []struct {
		name     string
		from     *EncryptionConfig
		provider string
		want     [3]string // phases 1, 3, 7
	}{
		{"same provider", sb, "secretbox", [3]string{"secretbox[key1 key2] identity", "secretbox[key2 key1] identity", "secretbox[key2] identity"}},
		{"another provider", sb, "aescbc", [3]string{"secretbox[key1] aescbc[key2] identity", "aescbc[key2] secretbox[key1] identity", "aescbc[key2] identity"}},
		{"back to a provider listed further down", mixed, "secretbox", [3]string{"aescbc[key2] secretbox[key3 key1] identity", "secretbox[key3 key1] aescbc[key2] identity", "secretbox[key3] identity"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustStart(t, tc.from, tc.provider, nil)
			prev, _ := tc.from.Marshal()
			for i, phase := range []int{PhaseAdded, PhaseFirst, PhaseRetired} {
				c := r.Config(phase)
				if got := keysOf(c); got != tc.want[i] {
					t.Errorf("phase %d: %s, want %s", phase, got, tc.want[i])
				}
				data := r.ConfigBytes(phase)
				if _, err := ParseEncryptionConfig("phase", data); err != nil {
					t.Errorf("phase %d is not a valid config: %v", phase, err)
				}
				// Each step is safe in both directions while hosts differ:
				// every host decrypts what any other host writes.
				if ok, why := EncryptionCompatible(data, prev); !ok {
					t.Errorf("phase %d cannot take the place of the one before: %s", phase, why)
				}
				if ok, why := EncryptionCompatible(prev, data); !ok && phase != PhaseRetired {
					t.Errorf("the config before phase %d cannot read what phase %d writes: %s", phase, phase, why)
				}
				prev = data
			}
			if keysOf(&r.From) != keysOf(tc.from) {
				t.Errorf("Config changed From: %s", keysOf(&r.From))
			}
		})
	}
}

func TestNextKeyNameNeverReusesARetiredName(t *testing.T) {
	sb, _ := NewEncryptionConfig("secretbox")
	r := mustStart(t, sb, "secretbox", []RetiredKey{{Provider: "aescbc", Name: "key7"}, {Provider: "secretbox", Name: "old"}})
	if r.Key.Name != "key8" {
		t.Errorf("new key %s, want key8", r.Key.Name)
	}
	if r.Prefix() != "k8s:enc:secretbox:v1:key8:" {
		t.Errorf("prefix %s", r.Prefix())
	}
	other := mustStart(t, sb, "secretbox", nil)
	if other.Key.Secret == r.Key.Secret {
		t.Error("two rotations made the same key")
	}
}

func TestStartRotationRefuses(t *testing.T) {
	sb, _ := NewEncryptionConfig("secretbox")
	if _, err := StartRotation(sb, "rot13", nil, time.Now()); err == nil {
		t.Error("an unknown provider was accepted")
	}
	more := cloneConfig(sb)
	more.Resources[0].Resources = []string{"secrets", "configmaps"}
	if _, err := StartRotation(more, "secretbox", nil, time.Now()); err == nil || !strings.Contains(err.Error(), "more than Secrets") {
		t.Errorf("a config for configmaps too: %v", err)
	}
}

func TestRotationRecordRoundTrip(t *testing.T) {
	dir := state.Dir(t.TempDir())
	if r, err := LoadRotation(dir); r != nil || err != nil {
		t.Fatalf("no record: %v %v", r, err)
	}
	sb, _ := NewEncryptionConfig("secretbox")
	r := mustStart(t, sb, "aescbc", nil)
	r.Done = 3
	if err := SaveRotation(dir, r, time.Now()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir.EncryptionRotation())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode: %v %v", fi.Mode(), err)
	}
	back, err := LoadRotation(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Done != 3 || back.Key != r.Key || string(back.ConfigBytes(PhaseFirst)) != string(r.ConfigBytes(PhaseFirst)) {
		t.Errorf("round trip: %+v", back)
	}
	if err := os.WriteFile(dir.EncryptionRotation(), []byte("kind: Something\ndone: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRotation(dir); err == nil {
		t.Error("a broken record was accepted")
	}
	if err := FinishRotation(dir); err != nil {
		t.Fatal(err)
	}
	if err := FinishRotation(dir); err != nil {
		t.Errorf("finishing twice: %v", err)
	}
}

func TestRetireKeysKeepsEveryKey(t *testing.T) {
	dir := state.Dir(t.TempDir())
	a := RetiredKey{Provider: "secretbox", Name: "key1", Secret: "c2VjcmV0MQ=="}
	b := RetiredKey{Provider: "aescbc", Name: "key2", Secret: "c2VjcmV0Mg=="}
	for _, keys := range [][]RetiredKey{{a}, {a}, {b, a}} {
		if err := RetireKeys(dir, keys, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LoadRetiredKeys(dir)
	if err != nil || len(got) != 2 || got[0].Name != "key1" || got[1].Name != "key2" || got[0].Retired.IsZero() {
		t.Fatalf("retired: %v %v", got, err)
	}
	fi, _ := os.Stat(dir.RetiredEncryptionKeys())
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if s := a.String(); strings.Contains(s, a.Secret) {
		t.Errorf("String shows the secret: %s", s)
	}
}

func TestCheckEncryptionState(t *testing.T) {
	dir := state.Dir(t.TempDir())
	sb, _ := NewEncryptionConfig("secretbox")
	c0, _ := sb.Marshal()
	write := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(dir.EncryptionConfig(), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c0)
	if note, err := CheckEncryptionState(dir); note != "" || err != nil {
		t.Fatalf("no rotation: %q %v", note, err)
	}
	r := mustStart(t, sb, "secretbox", nil)
	c1, c3, c7 := r.ConfigBytes(PhaseAdded), r.ConfigBytes(PhaseFirst), r.ConfigBytes(PhaseRetired)
	for _, tc := range []struct {
		done  int
		local []byte
		ok    bool
	}{
		{0, c0, true}, {0, c1, true}, {0, c3, false},
		{1, c1, true}, {1, c0, false},
		{2, c1, true}, {2, c3, true}, {2, c7, false},
		{4, c3, true}, {4, c1, false},
		{6, c3, true}, {6, c7, true}, {6, c0, false},
		{7, c7, true},
	} {
		r.Done = tc.done
		if err := SaveRotation(dir, r, time.Now()); err != nil {
			t.Fatal(err)
		}
		write(tc.local)
		note, err := CheckEncryptionState(dir)
		if (err == nil) != tc.ok {
			t.Errorf("done %d: err %v, want ok=%v", tc.done, err, tc.ok)
		}
		if err != nil && (strings.Contains(err.Error(), r.Key.Secret) || !strings.Contains(err.Error(), "under way")) {
			t.Errorf("done %d: %v", tc.done, err)
		}
		if tc.ok && !strings.Contains(note, "rotate encryption-key") {
			t.Errorf("done %d: note %q", tc.done, note)
		}
	}
	// A config that writes with a retired key is refused even with no
	// rotation under way: an old copy restored by mistake.
	if err := FinishRotation(dir); err != nil {
		t.Fatal(err)
	}
	if err := RetireKeys(dir, r.OldKeys(), time.Now()); err != nil {
		t.Fatal(err)
	}
	write(c7)
	if _, err := CheckEncryptionState(dir); err != nil {
		t.Errorf("the current config: %v", err)
	}
	write(c0)
	_, err := CheckEncryptionState(dir)
	if err == nil || !strings.Contains(err.Error(), "retired") || strings.Contains(err.Error(), r.OldKeys()[0].Secret) {
		t.Errorf("a retired write key: %v", err)
	}
}

// A config made anew after a rotation (pki --new-encryption-key) must not be
// named like a retired key: etcd prefixes and old backups name keys by name.
func TestNewEncryptionConfigSkipsRetiredNames(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	if err := os.MkdirAll(string(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	retired := []RetiredKey{{Provider: "secretbox", Name: "key1", Secret: "c2VjcmV0MQ=="},
		{Provider: "secretbox", Name: "key2", Secret: "c2VjcmV0Mg=="}}
	if err := RetireKeys(dir, retired, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureEncryptionConfig(inv, dir); err != nil {
		t.Fatal(err)
	}
	c, err := LoadEncryptionConfig(dir.EncryptionConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, keys := c.Resources[0].Providers[0].name()
	if keys == nil || len(keys.Keys) != 1 || keys.Keys[0].Name != "key3" {
		t.Fatalf("new config's keys: %v, want one named key3", keys)
	}
}
