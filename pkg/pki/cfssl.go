package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/cloudflare/cfssl/config"
	"github.com/cloudflare/cfssl/csr"
	cferr "github.com/cloudflare/cfssl/errors"
	"github.com/cloudflare/cfssl/helpers"
	"github.com/cloudflare/cfssl/initca"
	cflog "github.com/cloudflare/cfssl/log"
	"github.com/cloudflare/cfssl/signer"
	"github.com/cloudflare/cfssl/signer/local"
)

func init() {
	// cfssl logs every step through its own global logger, to stderr, at
	// info level; hardway prints its own results and cfssl's errors come
	// back as values anyway.
	cflog.Level = cflog.LevelFatal
}

// cfsslError turns cfssl's errors, whose Error() is a JSON document
// ({"code":5300,"message":"..."}), into their message; the original stays
// reachable with errors.As.
type cfsslError struct{ e *cferr.Error }

func (c cfsslError) Error() string { return c.e.Message }
func (c cfsslError) Unwrap() error { return c.e }

// wrapCFSSL adds context to an error that may come from cfssl.
func wrapCFSSL(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var ce *cferr.Error
	if errors.As(err, &ce) {
		err = cfsslError{ce}
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// keyRequest maps an inventory algorithm to cfssl's key request.
func keyRequest(alg string) (*csr.KeyRequest, error) {
	switch alg {
	case "ecdsa-p256":
		return &csr.KeyRequest{A: "ecdsa", S: 256}, nil
	case "rsa-2048":
		return &csr.KeyRequest{A: "rsa", S: 2048}, nil
	case "rsa-3072":
		return &csr.KeyRequest{A: "rsa", S: 3072}, nil
	case "rsa-4096":
		return &csr.KeyRequest{A: "rsa", S: 4096}, nil
	}
	return nil, fmt.Errorf("unknown key algorithm %q (use ecdsa-p256, rsa-2048, rsa-3072 or rsa-4096)", alg)
}

// algorithmOf names a public key the way the inventory does; "" for keys
// hardway never makes.
func algorithmOf(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return "ecdsa-p256"
		}
		return "ecdsa-" + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("rsa-%d", k.N.BitLen())
	}
	return fmt.Sprintf("%T", pub)
}

// newCA makes a self-signed CA with cfssl's initca.
func newCA(e Entry, alg string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	kr, err := keyRequest(alg)
	if err != nil {
		return nil, nil, err
	}
	req := &csr.CertificateRequest{
		CN:         e.CN,
		KeyRequest: kr,
		// initca parses Expiry with time.ParseDuration: hours, not days.
		CA: &csr.CAConfig{Expiry: fmt.Sprintf("%dh", int64(validity/time.Hour))},
	}
	for _, o := range e.Org {
		req.Names = append(req.Names, csr.Name{O: o})
	}
	certPEM, _, keyPEM, err = initca.New(req)
	if err != nil {
		return nil, nil, wrapCFSSL(err, "create %s", e.Name)
	}
	return certPEM, keyPEM, nil
}

// issuer signs leaves with one CA.
type issuer struct {
	name   string
	alg    string // of the keys it makes for leaves
	cert   *x509.Certificate
	key    crypto.Signer
	signer *local.Signer
	policy *config.Signing
}

// newIssuer builds a cfssl local signer for ca whose policy has one profile
// per table row it signs. Sign must name an existing profile: cfssl silently
// falls back to the default profile for an unknown name, so the default has
// no usages at all and cfssl refuses to sign with it.
func newIssuer(name string, cert *x509.Certificate, key crypto.Signer, alg string, validity time.Duration) (*issuer, error) {
	kr, err := keyRequest(alg)
	if err != nil {
		return nil, err
	}
	policy := &config.Signing{
		Profiles: map[string]*config.SigningProfile{},
		// Expiry is required of a default profile by cfssl's validation.
		Default: &config.SigningProfile{Expiry: validity, ExpiryString: validity.String()},
	}
	for _, c := range Table() {
		// etcd's rows are signed by the cluster CA in a cluster made
		// before the etcd CA existed (EntriesIn).
		if c.CA != name && (name != CA || c.CA != EtcdCA) {
			continue
		}
		policy.Profiles[c.Name] = &config.SigningProfile{
			Usage: append(keyUsages(kr), c.Usages...),
			// A profile built in Go, not loaded from JSON, never has
			// ExpiryString parsed: without Expiry it would fall back to
			// the default profile's lifetime.
			Expiry:       validity,
			ExpiryString: validity.String(),
		}
	}
	s, err := local.NewSigner(key, cert, signer.DefaultSigAlgo(key), policy)
	if err != nil {
		return nil, wrapCFSSL(err, "load %s as a signer", name)
	}
	return &issuer{name: name, alg: alg, cert: cert, key: key, signer: s, policy: policy}, nil
}

// keyUsages are the key usages a leaf's key type calls for: RSA keys may
// encipher the TLS key exchange (RSA key transport); ECDSA keys only sign, so
// key encipherment would be wrong for them (as mkcert reasons).
func keyUsages(kr *csr.KeyRequest) []string {
	if kr.A == "rsa" {
		return []string{"digital signature", "key encipherment"}
	}
	return []string{"digital signature"}
}

// issue makes a new key and a certificate for e signed by is, valid from now
// for validity but never beyond the CA.
func (is *issuer) issue(e Entry, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if _, ok := is.policy.Profiles[e.Row]; !ok {
		return nil, nil, fmt.Errorf("sign %s: %s has no profile %q", e.Name, is.name, e.Row)
	}
	kr, err := keyRequest(is.alg)
	if err != nil {
		return nil, nil, err
	}
	req := &csr.CertificateRequest{CN: e.CN, KeyRequest: kr, Hosts: e.SANs}
	for _, o := range e.Org {
		req.Names = append(req.Names, csr.Name{O: o})
	}
	csrPEM, keyPEM, err := csr.ParseRequest(req)
	if err != nil {
		return nil, nil, wrapCFSSL(err, "key and request for %s", e.Name)
	}
	// Backdated a little so that a host whose clock lags does not reject
	// a certificate made a moment ago.
	notBefore := now.Add(-5 * time.Minute).Truncate(time.Second)
	notAfter := now.Add(validity).Truncate(time.Second)
	if notAfter.After(is.cert.NotAfter) {
		notAfter = is.cert.NotAfter
	}
	certPEM, err = is.signer.Sign(signer.SignRequest{
		Request:   string(csrPEM),
		Hosts:     e.SANs,
		Profile:   e.Row,
		NotBefore: notBefore,
		NotAfter:  notAfter,
	})
	if err != nil {
		return nil, nil, wrapCFSSL(err, "sign %s with %s", e.Name, is.name)
	}
	return certPEM, keyPEM, nil
}

// parseCert reads the first certificate of a PEM file.
func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// parseKey reads a PEM private key (PKCS#1, SEC 1 or PKCS#8).
func parseKey(data []byte) (crypto.Signer, error) {
	k, err := helpers.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, wrapCFSSL(err, "parse private key")
	}
	return k, nil
}

// keyMatches reports whether key is the private half of cert's public key.
func keyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := key.Public().(equaler)
	return ok && pub.Equal(cert.PublicKey)
}

// parsePublicKey reads a PEM "PUBLIC KEY" (PKIX).
func parsePublicKey(data []byte) (crypto.PublicKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("no PEM public key")
	}
	return x509.ParsePKIXPublicKey(b.Bytes)
}
