package pki

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cloudflare/cfssl/config"
	"golang.org/x/sync/errgroup"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// Status is what Generate did with one file.
type Status string

const (
	Created  Status = "created"  // did not exist
	Reused   Status = "reused"   // valid; not touched
	Reissued Status = "reissued" // a leaf made again from the same CA; Reason says why
	Replaced Status = "replaced" // a CA made again because --replace-ca asked for it
	Updated  Status = "updated"  // a derived file (kubeconfig, public key) rewritten; Reason says why
)

// Kinds of results.
const (
	KindCA               = "ca"
	KindCertificate      = "certificate"
	KindKeyPair          = "key-pair"
	KindEncryptionConfig = "encryption-config"
	KindKubeconfig       = "kubeconfig"
	KindTrustBundle      = "trust-bundle" // what etcd and its clients trust (etcdca.go)
)

// Result is the outcome for one entry of the state directory.
type Result struct {
	Name     string    `json:"name"`
	Kind     string    `json:"kind"`
	CN       string    `json:"cn,omitempty"`
	SANs     []string  `json:"sans,omitempty"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	Status   Status    `json:"status"`
	Reason   string    `json:"reason,omitempty"` // why reissued, replaced or updated
	Note     string    `json:"note,omitempty"`   // something to act on that hardway will not do by itself
	Path     string    `json:"path"`
}

// Options tune Generate.
type Options struct {
	// ReplaceCA names the CAs to make anew ("ca", "front-proxy-ca", or
	// "all"); every leaf they signed is then reissued. Nothing else ever
	// replaces a CA.
	ReplaceCA []string
	// NewServiceAccountKey and NewEncryptionKey allow making a missing
	// service-account key pair or encryption config although other state
	// exists beside it (see identityGuard): both break a running cluster.
	NewServiceAccountKey bool
	NewEncryptionKey     bool
	// LegacyEtcd signs etcd's certificates with the cluster CA and makes
	// no etcd CA, as hardway did before the etcd CA existed. No command
	// sets it: the end-to-end tests build with it the single-CA cluster
	// that 'hardway rotate ca --which etcd' migrates. In a state directory
	// made that way, later runs keep it so by themselves (EtcdSigner).
	LegacyEtcd bool
	// Now is the clock; nil means time.Now. Tests move it to reach a
	// renewal window.
	Now func() time.Time
}

// Generate creates what is missing in the state directory and reuses what is
// valid: the CAs, every leaf of the table, the service-account key pair, the
// encryption config and the kubeconfigs, in that order. The results follow
// the same order.
func Generate(ctx context.Context, inv *inventory.Inventory, dir state.Dir, opts Options) ([]Result, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	t := now()
	if _, err := keyRequest(inv.PKI.Algorithm); err != nil {
		return nil, err
	}
	replace, err := replaceSet(opts.ReplaceCA)
	if err != nil {
		return nil, err
	}
	// Before anything is written: a lost identity is never made anew here.
	if err := identityGuard(inv, dir, opts, replace); err != nil {
		return nil, err
	}
	for _, d := range []string{string(dir), dir.PKIDir(), dir.KubeconfigDir()} {
		if err := privateDir(d); err != nil {
			return nil, err
		}
	}

	// The one writer of a state directory under a CA rotation is the
	// rotation: it alone knows which CA each host trusts at the moment.
	if err := GuardCARotation(dir); err != nil {
		return nil, err
	}
	signer, err := EtcdSigner(dir)
	if err != nil {
		return nil, err
	}
	if opts.LegacyEtcd {
		signer = CA
	}
	entries := entriesWith(inv, signer)
	var results []Result
	issuers := map[string]*issuer{}
	var leaves []Entry
	for _, e := range entries {
		if !e.IsCA() {
			leaves = append(leaves, e)
			continue
		}
		r, is, err := ensureCA(e, entries, inv, dir, t, replace[e.Name])
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		issuers[e.Name] = is
	}
	for _, t := range CATargets() {
		by := t.CA
		if t.Which == WhichEtcd {
			by = signer
		}
		tb, err := ensureTrustBundle(dir, t, by)
		if err != nil {
			return nil, err
		}
		results = append(results, tb)
	}

	// Key generation dominates (RSA-4096 especially) and the leaves are
	// independent once the CAs exist.
	leafResults := make([]Result, len(leaves))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, e := range leaves {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			r, err := ensureLeaf(e, issuers[e.CA], inv, dir, t)
			leafResults[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	results = append(results, leafResults...)

	sa, err := ensureServiceAccount(inv, dir, opts.NewServiceAccountKey)
	if err != nil {
		return nil, err
	}
	results = append(results, sa)
	enc, err := ensureEncryptionConfig(inv, dir)
	if err != nil {
		return nil, err
	}
	results = append(results, enc)
	kcs, err := ensureKubeconfigs(inv, dir)
	if err != nil {
		return nil, err
	}
	return append(results, kcs...), nil
}

func replaceSet(names []string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, n := range names {
		switch n {
		case "all":
			set[CA], set[FrontProxyCA], set[EtcdCA] = true, true, true
		case CA, FrontProxyCA, EtcdCA:
			set[n] = true
		default:
			return nil, usererr.WithCode(fmt.Errorf("--replace-ca: unknown CA %q", n), usererr.CodeUsage,
				"name "+CA+", "+FrontProxyCA+", "+EtcdCA+" or all (to replace the etcd CA without downtime: hardway rotate ca --which etcd)")
		}
	}
	return set, nil
}

// privateDir makes d (mode 0700) or tightens it: it holds private keys.
func privateDir(d string) error {
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", d, err)
	}
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", d, err)
		}
	}
	return nil
}

func replaceHint(inv *inventory.Inventory, ca string) string {
	return PullHint(inv) + fmt.Sprintf("; to start a new %s on purpose\n"+
		"(every certificate it signed is reissued and must be pushed to every host), run:\n"+
		"hardway certs generate --replace-ca=%s", ca, ca)
}

// ensureCA loads and checks a CA, or creates it when neither its files nor
// any certificate it signed exist, or when replace says so.
func ensureCA(e Entry, entries []Entry, inv *inventory.Inventory, dir state.Dir, now time.Time, replace bool) (Result, *issuer, error) {
	certPath, keyPath := dir.Cert(e.Name), dir.Key(e.Name)
	res := Result{Name: e.Name, Kind: KindCA, CN: e.CN, Path: certPath}
	certPEM, certErr := readOptional(certPath)
	keyPEM, keyErr := readOptional(keyPath)
	if err := errors.Join(certErr, keyErr); err != nil {
		return res, nil, err
	}

	switch {
	case replace || (certPEM == nil && keyPEM == nil):
		if !replace {
			if signed := signedLeavesOnDisk(e.Name, entries, dir); len(signed) > 0 {
				return res, nil, usererr.Errorf(replaceHint(inv, e.Name),
					"%s: %s.crt and %s.key are missing but certificates it signed are there (%s)",
					dir.PKIDir(), e.Name, e.Name, strings.Join(signed, ", "))
			}
		}
		var err error
		certPEM, keyPEM, err = newCA(e, inv.PKI.Algorithm, inv.PKI.CAValidity.D())
		if err != nil {
			return res, nil, err
		}
		if err := dir.WritePair(e.Name, certPEM, keyPEM); err != nil {
			return res, nil, err
		}
		res.Status = Created
		if replace {
			res.Status, res.Reason = Replaced, "--replace-ca"
		}
	case keyPEM == nil:
		return res, nil, usererr.Errorf(replaceHint(inv, e.Name), "%s is missing next to %s", keyPath, certPath)
	case certPEM == nil:
		return res, nil, usererr.Errorf(replaceHint(inv, e.Name), "%s is missing next to %s", certPath, keyPath)
	default:
		res.Status = Reused
	}

	cert, key, err := checkCAFiles(e.Name, certPEM, keyPEM)
	if err != nil {
		return res, nil, usererr.New(fmt.Errorf("%s: %w", certPath, err), replaceHint(inv, e.Name))
	}
	if !now.Before(cert.NotAfter) {
		return res, nil, usererr.Errorf(
			fmt.Sprintf("a new CA means new certificates everywhere: hardway certs generate --replace-ca=%s, then push them", e.Name),
			"%s expired on %s", certPath, cert.NotAfter.Format(time.DateOnly))
	}
	res.NotAfter = cert.NotAfter
	var notes []string
	if dueForRenewal(cert, now) {
		notes = append(notes, fmt.Sprintf("expires in %s: plan a CA rotation (--replace-ca=%s)", days(cert.NotAfter.Sub(now)), e.Name))
	}
	if a := algorithmOf(cert.PublicKey); a != inv.PKI.Algorithm {
		notes = append(notes, fmt.Sprintf("key is %s, the inventory asks for %s: only --replace-ca=%s changes a CA's key", a, inv.PKI.Algorithm, e.Name))
	}
	res.Note = strings.Join(notes, "; ")
	is, err := newIssuer(e.Name, cert, key, inv.PKI.Algorithm, inv.PKI.LeafValidity.D())
	return res, is, err
}

// checkCAFiles parses a CA's files and checks that they are a usable CA.
func checkCAFiles(name string, certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("unreadable certificate: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s.key: %w", name, err)
	}
	switch {
	case !keyMatches(cert, key):
		return nil, nil, fmt.Errorf("%s.key is not the key of this certificate", name)
	case !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, nil, errors.New("not a CA certificate")
	case cert.CheckSignatureFrom(cert) != nil:
		return nil, nil, errors.New("not self-signed")
	}
	return cert, key, nil
}

// signedLeavesOnDisk lists the certificates of ca's leaves that exist.
func signedLeavesOnDisk(ca string, entries []Entry, dir state.Dir) []string {
	var out []string
	for _, e := range entries {
		if e.CA == ca {
			if _, err := os.Stat(dir.Cert(e.Name)); err == nil {
				out = append(out, e.Name)
			}
		}
	}
	return out
}

// ensureLeaf reuses e's files when they pass every check, and otherwise
// issues e from is.
func ensureLeaf(e Entry, is *issuer, inv *inventory.Inventory, dir state.Dir, now time.Time) (Result, error) {
	res := Result{Name: e.Name, Kind: KindCertificate, CN: e.CN, SANs: e.SANs, Path: dir.Cert(e.Name)}
	cert, reason, err := inspectLeaf(e, is.cert, inv.PKI.Algorithm, dir, now)
	if err != nil {
		return res, err
	}
	if cert != nil && reason == "" {
		res.Status, res.NotAfter = Reused, cert.NotAfter
		return res, nil
	}
	certPEM, keyPEM, err := is.issue(e, now, inv.PKI.LeafValidity.D())
	if err != nil {
		return res, err
	}
	if err := dir.WritePair(e.Name, certPEM, keyPEM); err != nil {
		return res, err
	}
	c, err := parseCert(certPEM)
	if err != nil {
		return res, fmt.Errorf("%s: cfssl returned an unreadable certificate: %w", e.Name, err)
	}
	res.NotAfter = c.NotAfter
	res.Status = Created
	if reason != "" {
		res.Status, res.Reason = Reissued, reason
	}
	return res, nil
}

// inspectLeaf decides whether e's files on disk can be reused. It returns the
// certificate when one exists (nil: there is nothing to reuse, create it) and
// the reason to reissue it ("" to reuse). The checks go from "unusable" to
// "due", so the reason shown is the most serious one.
func inspectLeaf(e Entry, ca *x509.Certificate, alg string, dir state.Dir, now time.Time) (*x509.Certificate, string, error) {
	certPEM, err := readOptional(dir.Cert(e.Name))
	if err != nil || certPEM == nil {
		return nil, "", err
	}
	keyPEM, err := readOptional(dir.Key(e.Name))
	if err != nil {
		return nil, "", err
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		// Still "exists": what replaces it is a reissue, not a first issue.
		return &x509.Certificate{}, "unreadable certificate: " + err.Error(), nil
	}
	if keyPEM == nil {
		return cert, "key missing", nil
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return cert, "unreadable key", nil
	}
	if !keyMatches(cert, key) {
		return cert, "key does not match the certificate", nil
	}
	if cert.CheckSignatureFrom(ca) != nil {
		return cert, "not signed by the current " + e.CA, nil
	}
	if why := subjectDiff(e, cert); why != "" {
		return cert, why, nil
	}
	if why := usageDiff(e, cert); why != "" {
		return cert, why, nil
	}
	if why := sanDiff(e.SANs, CertSANs(cert), true); why != "" {
		return cert, "SANs changed: " + why, nil
	}
	if a := algorithmOf(cert.PublicKey); a != alg {
		return cert, fmt.Sprintf("key algorithm changed (%s → %s)", a, alg), nil
	}
	if !now.Before(cert.NotAfter) {
		return cert, "expired on " + cert.NotAfter.Format(time.DateOnly), nil
	}
	if now.Before(cert.NotBefore) {
		return cert, "not valid before " + cert.NotBefore.Format(time.RFC3339), nil
	}
	if dueForRenewal(cert, now) {
		return cert, fmt.Sprintf("renewal window: expires in %s", days(cert.NotAfter.Sub(now))), nil
	}
	return cert, "", nil
}

func subjectDiff(e Entry, c *x509.Certificate) string {
	if c.Subject.CommonName != e.CN {
		return fmt.Sprintf("CN changed (%s → %s)", c.Subject.CommonName, e.CN)
	}
	have, want := slices.Sorted(slices.Values(c.Subject.Organization)), slices.Sorted(slices.Values(e.Org))
	if !slices.Equal(have, want) {
		return fmt.Sprintf("O changed (%s → %s)", strings.Join(have, ","), strings.Join(want, ","))
	}
	return ""
}

func usageDiff(e Entry, c *x509.Certificate) string {
	var want []x509.ExtKeyUsage
	for _, u := range e.Usages {
		want = append(want, config.ExtKeyUsage[u])
	}
	have := slices.Clone(c.ExtKeyUsage)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(have, want) || c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		return "key usages changed"
	}
	return ""
}

// CertSANs are a certificate's DNS and IP SANs, normalized as Entries does.
func CertSANs(c *x509.Certificate) []string {
	s := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	return normalizeSANs(s)
}

// sanDiff describes how have differs from want: the SANs missing and, when
// exact, the SANs that should no longer be there. "" when they agree.
func sanDiff(want, have []string, exact bool) string {
	var missing, extra []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	if exact {
		for _, h := range have {
			if !slices.Contains(want, h) {
				extra = append(extra, h)
			}
		}
	}
	var parts []string
	if len(missing) > 0 {
		sort.Strings(missing)
		parts = append(parts, "missing "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		parts = append(parts, "no longer in the inventory "+strings.Join(extra, ", "))
	}
	return strings.Join(parts, "; ")
}

// MinRenewalWindow is the shortest renewal window of a certificate that
// lives long enough to have one.
const MinRenewalWindow = 30 * 24 * time.Hour

// RenewalWindow is how long before its expiry a certificate is reissued:
// the last third of its lifetime, at least the last 30 days, but never more
// than half its lifetime — so that a freshly issued short-lived certificate
// is not already due. For the default one-year leaves that is the last 121
// days; for the ten-year CAs the last 3.3 years (a warning only: CAs are
// never replaced without --replace-ca).
func RenewalWindow(c *x509.Certificate) time.Duration {
	life := c.NotAfter.Sub(c.NotBefore)
	w := max(life/3, MinRenewalWindow)
	return min(w, life/2)
}

func dueForRenewal(c *x509.Certificate, now time.Time) bool {
	return c.NotAfter.Sub(now) < RenewalWindow(c)
}

// days renders a duration in whole days, as kubeadm's check-expiration does.
func days(d time.Duration) string {
	if d < 24*time.Hour && d > -24*time.Hour {
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// readOptional reads a file; a missing file is (nil, nil).
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
