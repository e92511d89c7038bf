package pki

import (
	"bytes"
	"crypto"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// The cluster's identity is what no rerun may make anew without being told:
// the two CAs (every certificate chains to them), the service-account key
// pair (every token is signed with it) and the encryption config (every
// Secret in etcd is encrypted with it). A missing one next to other state
// means the state directory lost it, not that the cluster is new: the hosts
// still hold the old one, and a new one would break the cluster.

// IdentityNames are the names of the identity items, for messages.
var IdentityNames = []string{CA, FrontProxyCA, ServiceAccount, "encryption-config"}

// stateFiles lists the files of the state directory that belong to a
// cluster (certificates, keys, kubeconfigs, the encryption config),
// relative to it. Logs and the lock file do not count.
func stateFiles(dir state.Dir) ([]string, error) {
	var out []string
	for _, d := range []string{dir.PKIDir(), dir.KubeconfigDir()} {
		es, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		for _, e := range es {
			n := e.Name()
			if e.Type().IsRegular() && !strings.HasPrefix(n, ".") &&
				(strings.HasSuffix(n, ".crt") || strings.HasSuffix(n, ".key") || strings.HasSuffix(n, ".pub") || strings.HasSuffix(n, ".kubeconfig")) {
				out = append(out, filepath.Join(filepath.Base(d), n))
			}
		}
	}
	if _, err := os.Stat(dir.EncryptionConfig()); err == nil {
		out = append(out, filepath.Base(dir.EncryptionConfig()))
	}
	slices.Sort(out)
	return out, nil
}

// others is files without the given ones, at most a few for a message.
func others(files []string, self ...string) []string {
	var out []string
	for _, f := range files {
		if !slices.Contains(self, f) {
			out = append(out, f)
		}
	}
	return out
}

func shortList(files []string) string {
	const keep = 4
	if len(files) <= keep {
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:keep], ", "), len(files)-keep)
}

// PullHint is the first thing to try when the state directory lost part of
// the cluster's identity: the control-plane hosts still have it.
func PullHint(inv *inventory.Inventory) string {
	host := "<control-plane host>"
	if inv != nil && len(inv.ControlPlane) > 0 {
		host = usererr.Quote(inv.ControlPlane[0].Name)
	}
	return fmt.Sprintf("the hosts still hold it: 'hardway state pull %s' rebuilds the state directory from them\n"+
		"(or restore your backup of the state directory)", host)
}

// identityGuard refuses, before Generate writes anything, to create an
// identity item when other state exists beside it, unless opts asks for it
// by name.
func identityGuard(inv *inventory.Inventory, dir state.Dir, opts Options, replace map[string]bool) error {
	files, err := stateFiles(dir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil // a new cluster: everything is created
	}
	rel := func(p string) string { r, _ := filepath.Rel(string(dir), p); return r }
	missing := func(p string) bool { _, err := os.Stat(p); return errors.Is(err, fs.ErrNotExist) }

	var msgs, purposes []string
	for _, ca := range []string{CA, FrontProxyCA} {
		crt, key := rel(dir.Cert(ca)), rel(dir.Key(ca))
		if replace[ca] || !missing(dir.Cert(ca)) || !missing(dir.Key(ca)) {
			continue // present (checked by ensureCA) or replaced on purpose
		}
		if o := others(files, crt, key); len(o) > 0 {
			msgs = append(msgs, fmt.Sprintf("%s: %s and %s are missing but other state is there (%s): refusing to make a new %s",
				dir, crt, key, shortList(o), ca))
			purposes = append(purposes, fmt.Sprintf("hardway certs generate --replace-ca=%s  (every certificate it signed is reissued and must reach every host)", ca))
		}
	}
	saKey, saPub := rel(dir.Key(ServiceAccount)), rel(PublicKeyPath(dir, ServiceAccount))
	if missing(dir.Key(ServiceAccount)) && !opts.NewServiceAccountKey {
		if o := others(files, saKey, saPub); len(o) > 0 {
			msgs = append(msgs, fmt.Sprintf("%s: %s is missing but other state is there (%s): refusing to make a new service-account key",
				dir, saKey, shortList(o)))
			purposes = append(purposes, "hardway certs generate --new-service-account-key  (invalidates every service-account token the cluster has issued)")
		}
	}
	enc := rel(dir.EncryptionConfig())
	if missing(dir.EncryptionConfig()) && !opts.NewEncryptionKey {
		if o := others(files, enc); len(o) > 0 {
			msgs = append(msgs, fmt.Sprintf("%s: %s is missing but other state is there (%s): refusing to make a new encryption key",
				dir, enc, shortList(o)))
			purposes = append(purposes, "hardway certs generate --new-encryption-key  (every Secret already stored in etcd becomes unreadable)")
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return usererr.New(errors.New(strings.Join(msgs, "\n")),
		PullHint(inv)+";\nonly to start anew on purpose:\n  "+strings.Join(purposes, "\n  "))
}

// SameCertificate reports whether two PEM files hold the same certificate.
func SameCertificate(a, b []byte) bool {
	if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
		return true
	}
	ca, err1 := parseCert(a)
	cb, err2 := parseCert(b)
	return err1 == nil && err2 == nil && ca.Equal(cb)
}

// SamePublicKey reports whether two PEM files hold the same public key.
func SamePublicKey(a, b []byte) bool {
	if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
		return true
	}
	pa, err1 := parsePublicKey(a)
	pb, err2 := parsePublicKey(b)
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := pa.(equaler)
	return err1 == nil && err2 == nil && ok && e.Equal(pb)
}

// writeKey is the key that encrypts new Secrets: the first key of the first
// provider for secrets ("" when that provider is identity or kms).
func (c *EncryptionConfig) writeKey() (provider string, k Key, ok bool) {
	for _, r := range c.Resources {
		if slices.Contains(r.Resources, "secrets") && len(r.Providers) > 0 {
			name, keys := r.Providers[0].name()
			if keys == nil || len(keys.Keys) == 0 {
				return name, Key{}, false
			}
			return name, keys.Keys[0], true
		}
	}
	return "", Key{}, false
}

// hasKey reports whether c can decrypt with provider's key secret.
func (c *EncryptionConfig) hasKey(provider, secret string) bool {
	for _, r := range c.Resources {
		if !slices.Contains(r.Resources, "secrets") {
			continue
		}
		for _, p := range r.Providers {
			name, keys := p.name()
			if name != provider || keys == nil {
				continue
			}
			for _, k := range keys.Keys {
				if subtle.ConstantTimeCompare([]byte(k.Secret), []byte(secret)) == 1 {
					return true
				}
			}
		}
	}
	return false
}

// EncryptionCompatible says whether the local encryption config can take
// the place of the host's without losing a Secret: the key the host encrypts
// with now must be among the local config's keys. That holds for every step
// of a documented key rotation (add a key second, move it first, drop the
// old one after rewriting) and fails for a config made anew. why never
// contains a key.
func EncryptionCompatible(local, host []byte) (ok bool, why string) {
	hc, err := ParseEncryptionConfig("host", host)
	if err != nil {
		return false, "the host's copy is not a valid encryption config"
	}
	provider, k, has := hc.writeKey()
	if !has {
		return true, "" // the host writes unencrypted (or via KMS): no key to lose
	}
	lc, err := ParseEncryptionConfig("local", local)
	if err != nil {
		return false, "the local copy is not a valid encryption config"
	}
	if !lc.hasKey(provider, k.Secret) {
		return false, fmt.Sprintf("the key the host encrypts Secrets with (%s %q) is not in the local config", provider, k.Name)
	}
	return true, ""
}

// CheckHint is the hint for a failed check of the state directory. When any
// part of the identity is missing, 'hardway certs generate' would refuse (or, on an
// empty directory, make a new cluster identity), so it names state pull.
func CheckHint(inv *inventory.Inventory, dir state.Dir, r CheckResult) string {
	lost := false
	for _, p := range []string{dir.Cert(CA), dir.Key(CA), dir.Cert(FrontProxyCA), dir.Key(FrontProxyCA),
		dir.Key(ServiceAccount), dir.EncryptionConfig()} {
		if _, err := os.Stat(p); err != nil {
			lost = true
		}
	}
	if lost {
		return PullHint(inv) + "; 'hardway certs generate' would make a new cluster identity instead"
	}
	if h := RenewHint(r); h != "" {
		return h
	}
	return "run 'hardway certs generate' (or 'hardway up') to create or reissue it"
}

// GuardIdentity is the check Generate makes before it writes anything, for
// a plan to make first: an error when Generate with opts would make a new
// CA, service-account key or encryption config next to existing state.
func GuardIdentity(inv *inventory.Inventory, dir state.Dir, opts Options) error {
	replace, err := replaceSet(opts.ReplaceCA)
	if err != nil {
		return err
	}
	return identityGuard(inv, dir, opts, replace)
}

// A copy of an identity file on a host is either valid (it parses as what it
// should be) or damaged: truncated, emptied, a literal placeholder. A
// damaged copy is drift that the state directory's copy repairs, since
// nothing can have been signed or encrypted with it; a valid copy that
// differs is another cluster's identity, which only --replace-identity
// replaces. The Damage functions say why a copy is damaged, "" when it is
// valid, and never quote the content.

// CertificateDamage checks a PEM file of one or more certificates (a CA, or
// a trust bundle): every block a certificate, nothing else in the file.
func CertificateDamage(data []byte) string {
	rest := bytes.TrimSpace(data)
	if len(rest) == 0 {
		return "empty"
	}
	n := 0
	for len(rest) > 0 {
		b, r := pem.Decode(rest)
		if b == nil {
			if n == 0 {
				return "no PEM certificate (truncated or overwritten?)"
			}
			return fmt.Sprintf("not PEM after certificate %d (truncated?)", n)
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Sprintf("PEM block %d is %q, not a certificate", n+1, b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Sprintf("certificate %d does not parse", n+1)
		}
		n++
		rest = bytes.TrimSpace(r)
	}
	return ""
}

// PublicKeyDamage checks a PEM "PUBLIC KEY" file.
func PublicKeyDamage(data []byte) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "empty"
	}
	if _, err := parsePublicKey(data); err != nil {
		return "no PEM public key that parses (truncated or overwritten?)"
	}
	return ""
}

// PrivateKeyDamage checks a PEM private key. Only local copies and copies
// state pull has already read are checked: private keys never travel for a
// comparison.
func PrivateKeyDamage(data []byte) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "empty"
	}
	if _, err := parseKey(data); err != nil {
		return "no PEM private key that parses (truncated or overwritten?)"
	}
	return ""
}

// EncryptionConfigDamage checks an encryption config as the apiserver would
// read it: it parses and every key decodes to its provider's length. The
// reason is one of a few fixed phrases: a YAML error can quote a value, and
// a value here may be a key.
func EncryptionConfigDamage(data []byte) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "empty"
	}
	_, err := ParseEncryptionConfig("copy", data)
	switch {
	case err == nil:
		return ""
	case strings.Contains(err.Error(), "is not base64"):
		return "a key is not base64 (a literal ${ENCRYPTION_KEY}? the apiserver cannot start with it)"
	case strings.Contains(err.Error(), "bytes after base64 decoding"):
		return "a key has the wrong length for its provider"
	}
	return "not a valid EncryptionConfiguration"
}
