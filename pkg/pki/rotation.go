package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// An encryption-key rotation follows the documented procedure: add the new
// key second, wait until every apiserver has loaded it, move it first, wait
// again, rewrite every Secret, prove from etcd that each now carries the new
// key, and drop the old key. Its progress lives in the state directory so
// that a run that dies at any point is finished by the next one, and so that
// `up` in between pushes what the rotation left there instead of undoing a
// step.

// RotationSteps names the seven steps (index 1..7), for progress lines.
var RotationSteps = [...]string{"", "add-key", "wait-loaded", "key-first", "wait-first", "rewrite", "prove", "remove-old"}

// RotationStepCount is the number of steps of a rotation.
const RotationStepCount = len(RotationSteps) - 1

const rotationKind = "EncryptionKeyRotation"

// EncryptionRotation is the progress file (0600: it holds keys).
type EncryptionRotation struct {
	Kind     string    `yaml:"kind"`
	Started  time.Time `yaml:"started"`
	Updated  time.Time `yaml:"updated"`
	Done     int       `yaml:"done"`     // steps completed, 0..7
	Provider string    `yaml:"provider"` // the new key's provider
	Key      Key       `yaml:"key"`      // the new key
	// From is the encryption config when the rotation started: its keys
	// decrypt every Secret stored before.
	From EncryptionConfig `yaml:"from"`
}

// KeyRef names a key without its secret: "secretbox/key2".
func KeyRef(provider, name string) string { return provider + "/" + name }

// NewKeyRef is the new key, for messages.
func (r *EncryptionRotation) NewKeyRef() string { return KeyRef(r.Provider, r.Key.Name) }

// Prefix is how a Secret encrypted with the new key starts in etcd.
func (r *EncryptionRotation) Prefix() string { return StoragePrefix(r.Provider, r.Key.Name) }

// StoragePrefix is the prefix the apiserver writes before a value it
// encrypted with the named key of provider.
func StoragePrefix(provider, name string) string { return "k8s:enc:" + provider + ":v1:" + name + ":" }

// OldKeys are the keys of the config the rotation started from, which step
// 7 retires.
func (r *EncryptionRotation) OldKeys() []RetiredKey {
	var out []RetiredKey
	for _, p := range r.From.Resources[0].Providers {
		name, keys := p.name()
		if keys == nil {
			continue
		}
		for _, k := range keys.Keys {
			out = append(out, RetiredKey{Provider: name, Name: k.Name, Secret: k.Secret})
		}
	}
	return out
}

// keyNameRE matches the names hardway gives keys.
var keyNameRE = regexp.MustCompile(`^key([0-9]+)$`)

// nextKeyName is key<N+1> for the highest key<N> the config or a retired
// key uses: a name is never reused, so a Secret's prefix in etcd (or in an
// old backup) always names exactly one key.
func nextKeyName(c *EncryptionConfig, retired []RetiredKey) string {
	used := map[string]bool{}
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			if _, keys := p.name(); keys != nil {
				for _, k := range keys.Keys {
					used[k.Name] = true
				}
			}
		}
	}
	for _, k := range retired {
		used[k.Name] = true
	}
	n := 0
	for name := range used {
		if m := keyNameRE.FindStringSubmatch(name); m != nil {
			if v, err := strconv.Atoi(m[1]); err == nil && v > n {
				n = v
			}
		}
	}
	for {
		n++
		if name := "key" + strconv.Itoa(n); !used[name] {
			return name
		}
	}
}

// checkRotatable refuses configs hardway cannot rotate safely: rewriting
// Secrets re-encrypts only Secrets, so the config must cover nothing else,
// and a KMS provider is rotated in the KMS, not here.
func checkRotatable(c *EncryptionConfig) error {
	const hint = "hardway rotates the config it made (one entry for secrets, a key provider first, identity last);\n" +
		"rotate a hand-written config by hand: https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/#rotating-a-decryption-key"
	if len(c.Resources) != 1 || !slices.Equal(c.Resources[0].Resources, []string{"secrets"}) {
		return usererr.New(errors.New("the encryption config covers more than Secrets, or in several entries"), hint)
	}
	for i, p := range c.Resources[0].Providers {
		name, _ := p.name()
		switch {
		case name == "kms":
			return usererr.New(errors.New("the encryption config uses a KMS provider"), hint)
		case name == "identity" && i == 0:
			return usererr.New(errors.New("the encryption config writes Secrets unencrypted (identity first)"), hint)
		}
	}
	return nil
}

// StartRotation prepares a rotation from the config from to a new key of
// provider (32 random bytes, valid for every provider hardway knows). It
// writes nothing.
func StartRotation(from *EncryptionConfig, provider string, retired []RetiredKey, now time.Time) (*EncryptionRotation, error) {
	if _, ok := validKeyLengths[provider]; !ok {
		return nil, usererr.WithCode(fmt.Errorf("unknown encryption provider %q", provider), usererr.CodeUsage, "use secretbox, aesgcm or aescbc")
	}
	if err := checkRotatable(from); err != nil {
		return nil, err
	}
	raw := make([]byte, encryptionKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	return &EncryptionRotation{
		Kind: rotationKind, Started: now.UTC(), Updated: now.UTC(), Provider: provider,
		Key:  Key{Name: nextKeyName(from, retired), Secret: base64.StdEncoding.EncodeToString(raw)},
		From: *cloneConfig(from),
	}, nil
}

func cloneConfig(c *EncryptionConfig) *EncryptionConfig {
	out := &EncryptionConfig{Kind: c.Kind, APIVersion: c.APIVersion}
	for _, r := range c.Resources {
		nr := ResourceConfig{Resources: slices.Clone(r.Resources)}
		for _, p := range r.Providers {
			nr.Providers = append(nr.Providers, cloneProvider(p))
		}
		out.Resources = append(out.Resources, nr)
	}
	return out
}

func cloneProvider(p ProviderConfig) ProviderConfig {
	name, keys := p.name()
	if keys == nil {
		return p
	}
	return withKeys(name, slices.Clone(keys.Keys))
}

func withKeys(provider string, keys []Key) ProviderConfig {
	kc := &KeysConfig{Keys: keys}
	var p ProviderConfig
	switch provider {
	case "secretbox":
		p.Secretbox = kc
	case "aesgcm":
		p.AESGCM = kc
	case "aescbc":
		p.AESCBC = kc
	}
	return p
}

// The three configs a rotation pushes.
const (
	PhaseAdded   = 1 // the new key second: every apiserver can decrypt it, none writes it yet
	PhaseFirst   = 3 // the new key first: new writes use it; the old keys still decrypt
	PhaseRetired = 7 // the new key alone (identity stays last)
)

// Config is the encryption config of a phase.
func (r *EncryptionRotation) Config(phase int) *EncryptionConfig {
	src := cloneConfig(&r.From)
	provs := src.Resources[0].Providers
	first := provs[0]
	fname, fkeys := first.name()
	// Keys the new provider had further down the list move into its new
	// entry, so that no provider is listed twice.
	var rest []ProviderConfig
	var merged []Key
	for _, p := range provs[1:] {
		if n, keys := p.name(); n == r.Provider && fname != r.Provider && keys != nil {
			merged = append(merged, keys.Keys...)
			continue
		}
		rest = append(rest, p)
	}
	var out []ProviderConfig
	switch phase {
	case PhaseAdded:
		if fname == r.Provider {
			keys := append([]Key{fkeys.Keys[0], r.Key}, fkeys.Keys[1:]...)
			out = append([]ProviderConfig{withKeys(fname, keys)}, rest...)
		} else {
			out = append([]ProviderConfig{first, withKeys(r.Provider, append([]Key{r.Key}, merged...))}, rest...)
		}
	case PhaseFirst:
		if fname == r.Provider {
			out = append([]ProviderConfig{withKeys(fname, append([]Key{r.Key}, fkeys.Keys...))}, rest...)
		} else {
			out = append([]ProviderConfig{withKeys(r.Provider, append([]Key{r.Key}, merged...)), first}, rest...)
		}
	case PhaseRetired:
		out = []ProviderConfig{withKeys(r.Provider, []Key{r.Key})}
		for _, p := range provs {
			if p.Identity != nil {
				out = append(out, p)
			}
		}
	default:
		panic(fmt.Sprintf("no rotation phase %d", phase))
	}
	src.Resources[0].Providers = out
	return src
}

// PhaseOf is the phase whose config the hosts get while step runs (1..7).
func PhaseOf(step int) int {
	switch {
	case step <= 2:
		return PhaseAdded
	case step <= 6:
		return PhaseFirst
	}
	return PhaseRetired
}

// ConfigBytes is Config marshalled: what goes to the hosts.
func (r *EncryptionRotation) ConfigBytes(phase int) []byte {
	b, err := r.Config(phase).Marshal()
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return b
}

// allowedLocal are the configs the state directory's encryption-config.yaml
// may hold after done steps. Between two steps it may hold the previous
// phase's config (a run died before it wrote the next) or the next: both
// decrypt everything every apiserver may have written by then.
func (r *EncryptionRotation) allowedLocal() [][]byte {
	from, _ := r.From.Marshal()
	switch r.Done {
	case 0:
		return [][]byte{from, r.ConfigBytes(PhaseAdded)}
	case 1:
		return [][]byte{r.ConfigBytes(PhaseAdded)}
	case 2:
		return [][]byte{r.ConfigBytes(PhaseAdded), r.ConfigBytes(PhaseFirst)}
	case 3, 4, 5:
		return [][]byte{r.ConfigBytes(PhaseFirst)}
	case 6:
		return [][]byte{r.ConfigBytes(PhaseFirst), r.ConfigBytes(PhaseRetired)}
	}
	return [][]byte{r.ConfigBytes(PhaseRetired)}
}

// LoadRotation reads the progress file; nil when no rotation is under way.
func LoadRotation(dir state.Dir) (*EncryptionRotation, error) {
	path := dir.EncryptionRotation()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var r EncryptionRotation
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	hint := "it is written by 'hardway rotate encryption-key' only; restore it from your backup of the state directory"
	if err := dec.Decode(&r); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), hint)
	}
	if r.Kind != rotationKind || r.Done < 0 || r.Done > RotationStepCount {
		return nil, usererr.New(fmt.Errorf("%s: not a rotation record (kind %q, done %d)", path, r.Kind, r.Done), hint)
	}
	if why := checkKey(r.Provider, r.Key.Secret); why != "" || r.Key.Name == "" {
		return nil, usererr.New(fmt.Errorf("%s: the new key %q %s", path, r.Key.Name, why), hint)
	}
	if err := checkRotatable(&r.From); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// SaveRotation writes the progress file atomically (0600).
func SaveRotation(dir state.Dir, r *EncryptionRotation, now time.Time) error {
	r.Updated = now.UTC()
	data, err := yaml.Marshal(r)
	if err != nil {
		return err
	}
	return fsutil.WriteFile(dir.EncryptionRotation(), data, 0o600)
}

// FinishRotation removes the progress file: the rotation is complete.
func FinishRotation(dir state.Dir) error {
	if err := os.Remove(dir.EncryptionRotation()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SameEncryptionConfig reports whether data, parsed, marshals to want:
// the same config whatever its formatting.
func SameEncryptionConfig(data, want []byte) bool {
	if bytes.Equal(data, want) {
		return true
	}
	c, err := ParseEncryptionConfig("local", data)
	if err != nil {
		return false
	}
	b, err := c.Marshal()
	return err == nil && bytes.Equal(b, want)
}

// --- retired keys --------------------------------------------------------

// RetiredKey is a key a rotation took off the hosts.
type RetiredKey struct {
	Provider string    `yaml:"provider"`
	Name     string    `yaml:"name"`
	Secret   string    `yaml:"secret"`
	Retired  time.Time `yaml:"retired"`
}

func (k RetiredKey) String() string { return KeyRef(k.Provider, k.Name) + ":<redacted>" }

type retiredFile struct {
	Keys []RetiredKey `yaml:"keys"`
}

const retiredHeader = `# Encryption keys that once encrypted this cluster's Secrets, retired by
# 'hardway rotate encryption-key'. No apiserver uses them any more; an etcd
# backup made before a key was retired needs it to decrypt its Secrets: list
# it (provider, name, secret) after the first provider of the encryption
# config of the apiserver that serves the restored data. Never delete this file.
`

// LoadRetiredKeys reads the retired keys; none when the file does not exist.
func LoadRetiredKeys(dir state.Dir) ([]RetiredKey, error) {
	path := dir.RetiredEncryptionKeys()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var f retiredFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), "restore it from your backup of the state directory")
	}
	return f.Keys, nil
}

// RetireKeys adds keys to the retired keys (atomically, 0600); a key
// already there (same provider and secret) is kept as it is. Nothing is ever
// removed from the file.
func RetireKeys(dir state.Dir, keys []RetiredKey, now time.Time) error {
	have, err := LoadRetiredKeys(dir)
	if err != nil {
		return err
	}
	changed := false
	for _, k := range keys {
		if slices.ContainsFunc(have, func(h RetiredKey) bool { return sameKey(h, k) }) {
			continue
		}
		k.Retired = now.UTC()
		have = append(have, k)
		changed = true
	}
	if !changed {
		return nil
	}
	data, err := yaml.Marshal(retiredFile{Keys: have})
	if err != nil {
		return err
	}
	return fsutil.WriteFile(dir.RetiredEncryptionKeys(), append([]byte(retiredHeader), data...), 0o600)
}

func sameKey(a, b RetiredKey) bool {
	return a.Provider == b.Provider && subtle.ConstantTimeCompare([]byte(a.Secret), []byte(b.Secret)) == 1
}

// --- the guard of up -------------------------------------------------------

// CheckEncryptionState is what `up` checks before it pushes the state
// directory's encryption config: that config must not encrypt with a key a
// rotation retired (a restored old copy would make the hosts write with a
// key that is meant to be gone, and drop the key the current Secrets need),
// and while a rotation is under way it must be what the rotation left there,
// so that `up` pushes the same config instead of undoing a step. note
// describes a rotation under way ("" when none).
func CheckEncryptionState(dir state.Dir) (note string, err error) {
	data, err := os.ReadFile(dir.EncryptionConfig())
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // the identity checks name a missing config
	}
	if err != nil {
		return "", err
	}
	local, err := ParseEncryptionConfig(dir.EncryptionConfig(), data)
	if err != nil {
		return "", err
	}
	retired, err := LoadRetiredKeys(dir)
	if err != nil {
		return "", err
	}
	if p, k, ok := local.writeKey(); ok {
		for _, r := range retired {
			if sameKey(r, RetiredKey{Provider: p, Secret: k.Secret}) {
				return "", usererr.New(fmt.Errorf("%s encrypts with %s, a key retired by a rotation on %s; pushing it would undo the rotation",
					dir.EncryptionConfig(), KeyRef(p, k.Name), r.Retired.Format("2006-01-02")),
					"an old copy of encryption-config.yaml was restored? Put the current one back (your backup of the state\n"+
						"directory, or 'hardway state pull <control-plane host>' into an empty directory)")
			}
		}
	}
	rot, err := LoadRotation(dir)
	if err != nil || rot == nil {
		return "", err
	}
	if !slices.ContainsFunc(rot.allowedLocal(), func(want []byte) bool { return SameEncryptionConfig(data, want) }) {
		return "", usererr.New(fmt.Errorf("an encryption-key rotation to %s is under way (%d of %d steps done) and %s is not what it left there",
			rot.NewKeyRef(), rot.Done, RotationStepCount, dir.EncryptionConfig()),
			"'hardway rotate encryption-key' finishes the rotation (it writes encryption-config.yaml itself);\n"+
				"do not edit encryption-config.yaml or encryption-rotation.yaml by hand")
	}
	return fmt.Sprintf("an encryption-key rotation to %s is under way (%d of %d steps done); 'hardway rotate encryption-key' finishes it",
		rot.NewKeyRef(), rot.Done, RotationStepCount), nil
}

// StepName is "3 key-first".
func StepName(step int) string {
	if step < 1 || step > RotationStepCount {
		return strconv.Itoa(step)
	}
	return strconv.Itoa(step) + " " + RotationSteps[step]
}

// describeKeys lists keys without secrets: "secretbox/key1, secretbox/key2".
func describeKeys(keys []RetiredKey) string {
	var s []string
	for _, k := range keys {
		s = append(s, KeyRef(k.Provider, k.Name))
	}
	return strings.Join(s, ", ")
}

// OldKeyRefs is the old keys without secrets, for messages.
func (r *EncryptionRotation) OldKeyRefs() string { return describeKeys(r.OldKeys()) }

// EncryptionConfigHash is how an apiserver names the encryption config it
// loaded (its metric apiserver_encryption_config_controller_last_config_info):
// the SHA-256 of the file's bytes.
func EncryptionConfigHash(data []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(data)) }
