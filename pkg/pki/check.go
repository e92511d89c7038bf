package pki

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
)

// CheckState is the verdict on one file.
type CheckState string

const (
	CheckOK      CheckState = "ok"
	CheckWarning CheckState = "warning" // usable, but act soon (renewal window, stale SANs)
	CheckFailed  CheckState = "error"   // missing, expired, broken or not covering the inventory
)

// CheckResult is what Check found for one entry.
type CheckResult struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"`
	CN       string     `json:"cn,omitempty"`
	CA       string     `json:"ca,omitempty"`
	NotAfter time.Time  `json:"notAfter,omitzero"`
	Residual string     `json:"residual,omitempty"` // time left, "364d"
	State    CheckState `json:"status"`
	Problems []string   `json:"problems,omitempty"`
	Path     string     `json:"path"`
}

func (r *CheckResult) fail(format string, args ...any) {
	r.State = CheckFailed
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *CheckResult) warn(format string, args ...any) {
	if r.State == CheckOK {
		r.State = CheckWarning
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// AnyFailed reports whether a result is an error (warnings do not count).
func AnyFailed(rs []CheckResult) bool {
	for _, r := range rs {
		if r.State == CheckFailed {
			return true
		}
	}
	return false
}

// Check inspects the state directory against inv without changing it: every
// certificate of the table (presence, key, chain, subject, usages, SAN
// coverage, expiry, renewal window), the service-account key pair, the
// encryption config and the kubeconfigs. It is kubeadm's
// "certs check-expiration" for the whole table.
func Check(inv *inventory.Inventory, dir state.Dir, now time.Time) []CheckResult {
	var out []CheckResult
	cas := map[string]*x509.Certificate{}
	entries, err := EntriesIn(inv, dir)
	if err != nil {
		out = append(out, CheckResult{Name: EtcdCA, Kind: KindCA, CN: "etcd-ca", State: CheckFailed, Problems: []string{err.Error()}, Path: dir.Cert(EtcdCA)})
		entries = entriesWith(inv, CA)
	}
	// Between a CA rotation's first phase and its second, the leaves are
	// still signed by the old CA, which everything still trusts: that is
	// the rotation's own order, not a fault (the rotation's warning says
	// what finishes it).
	oldCAs := map[string]oldCA{}
	if rs, err := CARotationsUnderWay(dir); err == nil {
		for _, r := range rs {
			if c, err := parseCert([]byte(r.OldCert)); err == nil && r.Done < PhaseReissue {
				oldCAs[r.Target().CA] = oldCA{cert: c, which: r.Which}
			}
		}
	}
	for _, e := range entries {
		r := CheckResult{Name: e.Name, Kind: KindCertificate, CN: e.CN, CA: e.CA, State: CheckOK, Path: dir.Cert(e.Name)}
		if e.IsCA() {
			r.Kind = KindCA
			cas[e.Name] = checkCA(&r, e, inv, dir, now)
		} else {
			checkLeaf(&r, e, cas[e.CA], oldCAs[e.CA], dir, now)
		}
		out = append(out, r)
	}
	out = append(out, checkServiceAccount(dir), checkEncryption(inv, dir))
	for _, k := range Kubeconfigs(inv) {
		out = append(out, checkKubeconfig(inv, dir, k))
	}
	return append(out, checkTrustBundles(dir)...)
}

// checkTrustBundles: each CA's trust bundle is its signing CA's certificate
// while no rotation of it is recorded (a rotation writes it phase by
// phase). A state directory made before a bundle existed lacks it: up's pki
// step writes it, and the push takes it to the hosts.
func checkTrustBundles(dir state.Dir) []CheckResult {
	var out []CheckResult
	for _, t := range CATargets() {
		r := CheckResult{Name: t.Bundle, Kind: KindTrustBundle, CA: t.CA, State: CheckOK, Path: dir.Cert(t.Bundle)}
		signer := t.CA
		if t.Which == WhichEtcd {
			s, err := EtcdSigner(dir)
			if err != nil {
				continue // the etcd CA's own result says why
			}
			signer, r.CA = s, s
		}
		have, err := readOptional(r.Path)
		switch rot, rerr := LoadCARotation(dir, t.Which); {
		case rerr != nil:
			r.fail("%v", rerr)
		case err != nil:
			r.fail("%v", err)
		case have == nil:
			r.fail("missing (hardway certs generate writes it from %s)", signer)
		case rot != nil:
			// The rotation's own: old + new, or the new CA alone.
		case !fsutil.SameContent(dir.Cert(signer), have):
			r.fail("differs from %s (hardway certs generate rewrites it; 'hardway rotate ca --which %s' is how a CA changes without downtime)", signer, t.Which)
		}
		out = append(out, r)
	}
	return out
}

func loadPair(r *CheckResult, dir state.Dir, name string) (*x509.Certificate, []byte) {
	certPEM, err := os.ReadFile(dir.Cert(name))
	if err != nil {
		if os.IsNotExist(err) {
			r.fail("missing")
		} else {
			r.fail("%v", err)
		}
		return nil, nil
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		r.fail("unreadable certificate: %v", err)
		return nil, nil
	}
	r.NotAfter = cert.NotAfter
	keyPEM, err := os.ReadFile(dir.Key(name))
	if err != nil {
		r.fail("key %s missing", dir.Key(name))
		return cert, nil
	}
	key, err := parseKey(keyPEM)
	switch {
	case err != nil:
		r.fail("unreadable key: %v", err)
	case !keyMatches(cert, key):
		r.fail("key does not match the certificate")
	}
	return cert, keyPEM
}

func checkExpiry(r *CheckResult, c *x509.Certificate, now time.Time, dueHint string) {
	left := c.NotAfter.Sub(now)
	r.Residual = days(left)
	switch {
	case left <= 0:
		r.Residual = "expired"
		r.fail("expired on %s", c.NotAfter.Format(time.DateOnly))
	case now.Before(c.NotBefore):
		r.fail("not valid before %s", c.NotBefore.Format(time.RFC3339))
	case dueForRenewal(c, now):
		r.warn("inside its renewal window (the last %s): %s", days(RenewalWindow(c)), dueHint)
	}
}

func checkCA(r *CheckResult, e Entry, inv *inventory.Inventory, dir state.Dir, now time.Time) *x509.Certificate {
	cert, keyPEM := loadPair(r, dir, e.Name)
	if cert == nil {
		return nil
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		r.fail("not a CA certificate")
	}
	if keyPEM == nil {
		r.Problems[len(r.Problems)-1] += ": no leaf can be reissued"
	}
	checkExpiry(r, cert, now, "plan a CA rotation (hardway certs generate --replace-ca="+e.Name+")")
	if a := algorithmOf(cert.PublicKey); a != inv.PKI.Algorithm {
		r.warn("key is %s, the inventory asks for %s", a, inv.PKI.Algorithm)
	}
	return cert
}

func checkLeaf(r *CheckResult, e Entry, ca *x509.Certificate, old oldCA, dir state.Dir, now time.Time) {
	cert, _ := loadPair(r, dir, e.Name)
	if cert == nil {
		return
	}
	if ca != nil && cert.CheckSignatureFrom(ca) != nil {
		if old.cert != nil && cert.CheckSignatureFrom(old.cert) == nil {
			r.warn("signed by the old %s: the CA rotation under way reissues it (hardway rotate ca --which %s)", e.CA, old.which)
		} else {
			r.fail("not signed by the current %s", e.CA)
		}
	}
	if why := subjectDiff(e, cert); why != "" {
		r.fail("%s", why)
	}
	if why := usageDiff(e, cert); why != "" {
		r.fail("%s", why)
	}
	have := CertSANs(cert)
	if why := sanDiff(e.SANs, have, false); why != "" {
		r.fail("does not cover the inventory: %s", why)
	}
	var extra []string
	for _, h := range have {
		if !slices.Contains(e.SANs, h) {
			extra = append(extra, h)
		}
	}
	if len(extra) > 0 {
		r.warn("SANs no longer in the inventory: %s (hardway certs generate reissues it)", strings.Join(extra, ", "))
	}
	checkExpiry(r, cert, now, "hardway certs renew "+e.Name+" reissues it")
}

// oldCA is the CA a rotation under way replaces, parsed once for every leaf
// it signed, and the rotation's --which.
type oldCA struct {
	cert  *x509.Certificate
	which string
}

func checkServiceAccount(dir state.Dir) CheckResult {
	r := CheckResult{Name: ServiceAccount, Kind: KindKeyPair, State: CheckOK, Path: dir.Key(ServiceAccount)}
	keyPEM, err := os.ReadFile(dir.Key(ServiceAccount))
	if err != nil {
		r.fail("key missing")
		return r
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		r.fail("unreadable key: %v", err)
		return r
	}
	pubPEM, err := os.ReadFile(PublicKeyPath(dir, ServiceAccount))
	if err != nil {
		r.fail("public key missing")
		return r
	}
	pub, err := parsePublicKey(pubPEM)
	if err != nil {
		r.fail("unreadable public key: %v", err)
		return r
	}
	// crypto.PublicKey is a defined type: Equal(any) would never match.
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if p, ok := key.Public().(equaler); !ok || !p.Equal(pub) {
		r.fail("public key does not match the private key")
	}
	return r
}

func checkEncryption(inv *inventory.Inventory, dir state.Dir) CheckResult {
	path := dir.EncryptionConfig()
	r := CheckResult{Name: "encryption-config", Kind: KindEncryptionConfig, State: CheckOK, Path: path}
	if _, err := os.Stat(path); err != nil {
		r.fail("missing")
		return r
	}
	c, err := LoadEncryptionConfig(path)
	if err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			r.fail("%s", l)
		}
		return r
	}
	if p := c.Provider(); p != inv.Encryption.Provider {
		r.warn("encrypts with %s, the inventory asks for %s", p, inv.Encryption.Provider)
	}
	return r
}

func checkKubeconfig(inv *inventory.Inventory, dir state.Dir, k Kubeconfig) CheckResult {
	path := dir.Kubeconfig(k.Name)
	r := CheckResult{Name: k.Name, Kind: KindKubeconfig, CN: k.User, State: CheckOK, Path: path}
	if _, err := os.Stat(path); err != nil {
		r.fail("missing")
		return r
	}
	want, err := RenderKubeconfig(inv, dir, k)
	if err != nil {
		r.fail("%v", err)
		return r
	}
	if !fsutil.SameContent(path, want) {
		r.fail("out of date (certificate or server changed): hardway certs generate rewrites it")
	}
	return r
}
