package pki

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// The apiserver's encryption-at-rest configuration. The field names are
// those of k8s.io/apiserver's apiserver.config.k8s.io/v1 types (that module
// is not a dependency; the tests pin the names against the documented
// format).
const (
	EncryptionAPIVersion = "apiserver.config.k8s.io/v1"
	EncryptionKind       = "EncryptionConfiguration"
	encryptionKeyName    = "key1"
	encryptionKeyBytes   = 32
)

// EncryptionConfig is an EncryptionConfiguration.
type EncryptionConfig struct {
	Kind       string           `yaml:"kind"`
	APIVersion string           `yaml:"apiVersion"`
	Resources  []ResourceConfig `yaml:"resources"`
}

// ResourceConfig is the providers for a list of resources; the first
// provider encrypts, every provider decrypts.
type ResourceConfig struct {
	Resources []string         `yaml:"resources"`
	Providers []ProviderConfig `yaml:"providers"`
}

// ProviderConfig holds exactly one provider.
type ProviderConfig struct {
	Secretbox *KeysConfig `yaml:"secretbox,omitempty"`
	AESGCM    *KeysConfig `yaml:"aesgcm,omitempty"`
	AESCBC    *KeysConfig `yaml:"aescbc,omitempty"`
	KMS       *yaml.Node  `yaml:"kms,omitempty"` // accepted as written by hand, never generated
	Identity  *struct{}   `yaml:"identity,omitempty"`
}

// KeysConfig is a provider's keys, the first one used for writing.
type KeysConfig struct {
	Keys []Key `yaml:"keys"`
}

// Key is a named key: base64 of the raw key bytes. Its String hides the secret.
type Key struct {
	Name   string `yaml:"name"`
	Secret string `yaml:"secret"`
}

func (k Key) String() string { return k.Name + ":<redacted>" }

// name returns the provider's name and keys.
func (p ProviderConfig) name() (string, *KeysConfig) {
	switch {
	case p.Secretbox != nil:
		return "secretbox", p.Secretbox
	case p.AESGCM != nil:
		return "aesgcm", p.AESGCM
	case p.AESCBC != nil:
		return "aescbc", p.AESCBC
	case p.KMS != nil:
		return "kms", nil
	case p.Identity != nil:
		return "identity", nil
	}
	return "", nil
}

// Provider is the provider that encrypts secrets: the first one listed for them.
func (c *EncryptionConfig) Provider() string {
	for _, r := range c.Resources {
		if slices.Contains(r.Resources, "secrets") && len(r.Providers) > 0 {
			n, _ := r.Providers[0].name()
			return n
		}
	}
	return ""
}

// validKeyLengths are the raw key sizes the apiserver accepts per provider.
var validKeyLengths = map[string][]int{
	"secretbox": {32},
	"aesgcm":    {16, 24, 32},
	"aescbc":    {16, 24, 32},
}

// NewEncryptionConfig returns a config for secrets with provider first,
// holding a fresh 32-byte key from crypto/rand, and identity last so that
// secrets written before encryption was turned on stay readable.
func NewEncryptionConfig(provider string) (*EncryptionConfig, error) {
	return newEncryptionConfig(provider, encryptionKeyName)
}

// newEncryptionConfig is NewEncryptionConfig with the key's name chosen.
func newEncryptionConfig(provider, keyName string) (*EncryptionConfig, error) {
	if _, ok := validKeyLengths[provider]; !ok {
		return nil, fmt.Errorf("unknown encryption provider %q (use secretbox, aesgcm or aescbc)", provider)
	}
	raw := make([]byte, encryptionKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	keys := &KeysConfig{Keys: []Key{{Name: keyName, Secret: base64.StdEncoding.EncodeToString(raw)}}}
	var p ProviderConfig
	switch provider {
	case "secretbox":
		p.Secretbox = keys
	case "aesgcm":
		p.AESGCM = keys
	case "aescbc":
		p.AESCBC = keys
	}
	return &EncryptionConfig{
		Kind:       EncryptionKind,
		APIVersion: EncryptionAPIVersion,
		Resources: []ResourceConfig{{
			Resources: []string{"secrets"},
			Providers: []ProviderConfig{p, {Identity: &struct{}{}}},
		}},
	}, nil
}

// Marshal renders the config as YAML.
func (c *EncryptionConfig) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LoadEncryptionConfig reads and validates an encryption config file.
func LoadEncryptionConfig(path string) (*EncryptionConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read encryption config: %w", err)
	}
	return ParseEncryptionConfig(path, data)
}

const encryptionHint = "the apiserver cannot start with this file. Restore it from your backup, or put the base64 of\n" +
	"32 random bytes there (head -c 32 /dev/urandom | base64). hardway never overwrites it: the key\n" +
	"decrypts every secret the cluster has stored."

// ParseEncryptionConfig validates data as the apiserver would before using
// it: every problem is reported with its file:line:col. A key's value is
// never part of a message.
func ParseEncryptionConfig(display string, data []byte) (*EncryptionConfig, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", display, err), encryptionHint)
	}
	var c EncryptionConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", display, err), encryptionHint)
	}

	var problems []string
	add := func(n *yaml.Node, path, format string, args ...any) {
		line, col := 1, 1
		if n != nil {
			line, col = n.Line, n.Column
		}
		problems = append(problems, fmt.Sprintf("%s:%d:%d: %s: %s", display, line, col, path, fmt.Sprintf(format, args...)))
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		doc = doc.Content[0]
	}
	if c.Kind != EncryptionKind {
		add(nodeAt(doc, "kind"), "kind", "is %q, want %s", c.Kind, EncryptionKind)
	}
	if c.APIVersion != EncryptionAPIVersion {
		add(nodeAt(doc, "apiVersion"), "apiVersion", "is %q, want %s", c.APIVersion, EncryptionAPIVersion)
	}
	secrets := false
	for i, r := range c.Resources {
		rpath := fmt.Sprintf("resources[%d]", i)
		if slices.Contains(r.Resources, "secrets") {
			secrets = true
		}
		if len(r.Providers) == 0 {
			add(nodeAt(doc, "resources", i), rpath, "no providers")
		}
		for j, p := range r.Providers {
			ppath := fmt.Sprintf("%s.providers[%d]", rpath, j)
			pnode := nodeAt(doc, "resources", i, "providers", j)
			if pnode != nil && pnode.Kind == yaml.MappingNode && len(pnode.Content) != 2 {
				add(pnode, ppath, "exactly one provider per list entry")
			}
			name, keys := p.name()
			if name == "" {
				add(pnode, ppath, "no provider")
				continue
			}
			if j == 0 && name == "identity" && slices.Contains(r.Resources, "secrets") {
				add(pnode, ppath, "identity first: secrets would be stored unencrypted")
			}
			if keys == nil {
				continue
			}
			if len(keys.Keys) == 0 {
				add(nodeAt(doc, "resources", i, "providers", j, name), ppath+"."+name, "no keys")
			}
			seen := map[string]bool{}
			for k, key := range keys.Keys {
				kpath := fmt.Sprintf("%s.%s.keys[%d]", ppath, name, k)
				knode := nodeAt(doc, "resources", i, "providers", j, name, "keys", k)
				if key.Name == "" {
					add(knode, kpath+".name", "empty")
				} else if seen[key.Name] {
					add(nodeAt(knode, "name"), kpath+".name", "duplicate key name %q", key.Name)
				}
				seen[key.Name] = true
				if why := checkKey(name, key.Secret); why != "" {
					add(nodeAt(knode, "secret"), kpath+".secret", "key %q %s", key.Name, why)
				}
			}
		}
	}
	if !secrets {
		add(nodeAt(doc, "resources"), "resources", "no entry covers secrets")
	}
	if len(problems) > 0 {
		return nil, usererr.New(errors.New(strings.Join(problems, "\n")), encryptionHint)
	}
	return &c, nil
}

// checkKey says what is wrong with a key, without ever saying the key.
func checkKey(provider, secret string) string {
	raw, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		// A literal ${ENCRYPTION_KEY} lands here: the apiserver dies on it
		// with "illegal base64 data".
		return "is not base64 (an unexpanded shell variable?)"
	}
	ok := validKeyLengths[provider]
	if !slices.Contains(ok, len(raw)) {
		want := fmt.Sprint(ok[len(ok)-1])
		if len(ok) > 1 {
			want = fmt.Sprintf("%d, %d or %d", ok[0], ok[1], ok[2])
		}
		return fmt.Sprintf("is %d bytes after base64 decoding, %s needs %s", len(raw), provider, want)
	}
	return ""
}

// nodeAt follows mapping keys (string) and sequence indices (int) from n;
// nil when the path does not exist.
func nodeAt(n *yaml.Node, path ...any) *yaml.Node {
	for _, p := range path {
		if n == nil {
			return nil
		}
		switch p := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return nil
			}
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					next = n.Content[i+1]
					break
				}
			}
			n = next
		case int:
			if n.Kind != yaml.SequenceNode || p >= len(n.Content) {
				return nil
			}
			n = n.Content[p]
		}
	}
	return n
}

// ensureEncryptionConfig creates the config once and keeps it. A config
// whose provider differs from the inventory is kept too: changing it is a
// key rotation (see the note), not something to do behind the user's back.
func ensureEncryptionConfig(inv *inventory.Inventory, dir state.Dir) (Result, error) {
	path := dir.EncryptionConfig()
	res := Result{Name: "encryption-config", Kind: KindEncryptionConfig, Path: path}
	if _, err := os.Stat(path); err == nil {
		c, err := LoadEncryptionConfig(path)
		if err != nil {
			return res, err
		}
		res.Status = Reused
		if p := c.Provider(); p != inv.Encryption.Provider {
			res.Note = fmt.Sprintf("encrypts with %s, the inventory asks for %s: 'hardway rotate encryption-key' "+
				"moves every Secret to a new %s key without downtime", p, inv.Encryption.Provider, inv.Encryption.Provider)
		}
		return res, nil
	} else if !os.IsNotExist(err) {
		return res, err
	}
	// A config made anew (pki --new-encryption-key, or a first up) must not
	// reuse the name of a key a rotation retired: a Secret's prefix in etcd,
	// or in an old backup, would then name two different keys.
	retired, err := LoadRetiredKeys(dir)
	if err != nil {
		return res, err
	}
	name := encryptionKeyName
	if len(retired) > 0 {
		name = nextKeyName(&EncryptionConfig{}, retired)
	}
	c, err := newEncryptionConfig(inv.Encryption.Provider, name)
	if err != nil {
		return res, err
	}
	data, err := c.Marshal()
	if err != nil {
		return res, err
	}
	if err := fsutil.WriteFile(path, data, 0o600); err != nil {
		return res, err
	}
	res.Status = Created
	return res, nil
}
