package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// A CA rotation replaces a CA with trust bundles, in the documented order,
// so that every member and client trusts whatever its peers present at
// every moment:
//
//  1. trust-both: a new CA is made; the bundle (old + new) goes to everything
//     that verifies the CA's certificates, restarted one host at a time;
//  2. reissue: the CA's leaves are reissued from the new CA and rolled out,
//     host by host;
//  3. drop-old: the bundle becomes the new CA alone, rolled out again.
//
// The progress is a record in the state directory (0600: it holds the new
// CA's key until the CA files are written), so that a run that dies at any
// point is finished by the next one. The old CA's files are kept under
// <state>/pki/retired/, so that older backups still make sense.

// The rows of CATargets (--which).
const (
	WhichEtcd       = "etcd"
	WhichFrontProxy = "front-proxy"
	WhichKubernetes = "kubernetes"
)

// FrontProxyTrustBundle is what --requestheader-client-ca-file trusts.
const FrontProxyTrustBundle = "front-proxy-trust-bundle"

// CATrustBundle is what trusts the cluster CA: the apiservers' and
// controller-managers' --client-ca-file, the apiservers'
// --kubelet-certificate-authority, the controller-managers' --root-ca-file
// (so kube-root-ca.crt in every namespace, which pods trust the API with),
// the kubelets' clientCAFile and every kubeconfig's certificate-authority-
// data. The cluster CA's certificate normally; the old and the new CA
// during 'hardway rotate ca --which kubernetes'. Signing stays the CA's
// (--cluster-signing-cert-file).
const CATrustBundle = "ca-trust-bundle"

// CATarget is one row of the table of CAs 'hardway rotate ca' rotates.
type CATarget struct {
	Which  string // --which
	CA     string // the CA made anew
	Bundle string // the trust bundle's name in <state>/pki (.crt)
	// Trusted says who trusts the bundle, for --help and the plan.
	Trusted string
}

// CATargets is the table.
func CATargets() []CATarget {
	return []CATarget{

		{Which: WhichEtcd, CA: EtcdCA, Bundle: EtcdTrustBundle,
			Trusted: "etcd (--trusted-ca-file, --peer-trusted-ca-file) and the apiservers (--etcd-cafile)"},
		{Which: WhichFrontProxy, CA: FrontProxyCA, Bundle: FrontProxyTrustBundle,
			Trusted: "the apiservers and controller-managers (--requestheader-client-ca-file; the apiserver publishes it to extension apiservers in kube-system/extension-apiserver-authentication)"},
		{Which: WhichKubernetes, CA: CA, Bundle: CATrustBundle,
			Trusted: "the apiservers (--client-ca-file, --kubelet-certificate-authority), the controller-managers (--client-ca-file, --root-ca-file: kube-root-ca.crt in every namespace), the kubelets (clientCAFile) and every kubeconfig"},
	}
}

// LookupCATarget finds a row of CATargets.
func LookupCATarget(which string) (CATarget, error) {
	var names []string
	for _, t := range CATargets() {
		if t.Which == which {
			return t, nil
		}
		names = append(names, t.Which)
	}
	return CATarget{}, usererr.WithCode(fmt.Errorf("--which %q: no such CA to rotate", which), usererr.CodeUsage,
		"rotate one of: "+strings.Join(names, ", "))
}

// Leaves are the table rows the target's CA signs.
func (t CATarget) Leaves() []string {
	var out []string
	for _, c := range Table() {
		if c.CA == t.CA {
			out = append(out, c.Name)
		}
	}
	return out
}

// The phases of a CA rotation (CARotation.Done counts them).
const (
	PhaseTrustBoth = 1
	PhaseReissue   = 2
	PhaseDropOld   = 3
)

// CAPhases names the phases (index 1..3).
var CAPhases = [...]string{"", "trust-both", "reissue", "drop-old"}

const caRotationKind = "CARotation"

// CARotation is the progress record.
type CARotation struct {
	Kind    string    `yaml:"kind"`
	Which   string    `yaml:"which"`
	Started time.Time `yaml:"started"`
	Updated time.Time `yaml:"updated"`
	Done    int       `yaml:"done"` // phases done, 0..3
	// OldCA is the CA that signed the leaves before: the CA itself, or for
	// etcd in a cluster made before the etcd CA, the cluster CA (which
	// stays the cluster CA: only etcd stops trusting it).
	OldCA   string `yaml:"oldCA"`
	OldCert string `yaml:"oldCert"` // PEM
	NewCert string `yaml:"newCert"` // PEM
	NewKey  string `yaml:"newKey"`  // PEM
}

// Target is the record's row of CATargets.
func (r *CARotation) Target() CATarget {
	t, _ := LookupCATarget(r.Which)
	return t
}

// Describe says what the rotation does, without a key.
func (r *CARotation) Describe() string {
	return fmt.Sprintf("%s: from %s (%s) to a new %s (%s)", r.Which, r.OldCA, certID([]byte(r.OldCert)), r.Target().CA, certID([]byte(r.NewCert)))
}

// certID is a certificate's CN and serial, for messages.
func certID(pemBytes []byte) string {
	c, err := parseCert(pemBytes)
	if err != nil {
		return "unreadable"
	}
	return fmt.Sprintf("CN %s, serial %s", c.Subject.CommonName, c.SerialNumber.Text(16))
}

// StartCARotation prepares a rotation of which: a new CA in memory (key of
// the inventory's algorithm, the inventory's caValidity). It writes nothing.
func StartCARotation(inv *inventory.Inventory, dir state.Dir, which string, now time.Time) (*CARotation, error) {
	t, err := LookupCATarget(which)
	if err != nil {
		return nil, err
	}
	old := t.CA
	if t.Which == WhichEtcd {
		if old, err = EtcdSigner(dir); err != nil {
			return nil, err
		}
	}
	oldPEM, err := os.ReadFile(dir.Cert(old))
	if err != nil {
		return nil, usererr.New(fmt.Errorf("read the CA to rotate: %w", err), "run 'hardway up' first (or 'hardway state pull' when the state directory was lost)")
	}
	if _, err := os.Stat(dir.Key(old)); err != nil {
		return nil, usererr.New(fmt.Errorf("the key of %s: %w", old, err), PullHint(inv))
	}
	var e Entry
	for _, x := range Entries(inv) {
		if x.Name == t.CA {
			e = x
		}
	}
	certPEM, keyPEM, err := newCA(e, inv.PKI.Algorithm, inv.PKI.CAValidity.D())
	if err != nil {
		return nil, err
	}
	return &CARotation{Kind: caRotationKind, Which: which, Started: now.UTC(), Updated: now.UTC(),
		OldCA: old, OldCert: string(oldPEM), NewCert: string(certPEM), NewKey: string(keyPEM)}, nil
}

// Bundle is the trust bundle while phase runs (or after it, for Done): old
// and new until the leaves are reissued, then the new CA alone.
func (r *CARotation) Bundle(phase int) []byte {
	if phase >= PhaseDropOld {
		return []byte(r.NewCert)
	}
	return joinPEM([]byte(r.OldCert), []byte(r.NewCert))
}

// RetiredDir is where a rotation keeps the CAs it replaced.
func RetiredDir(dir state.Dir) string { return filepath.Join(dir.PKIDir(), "retired") }

// retiredBase is the retired copy's path without .crt/.key.
func (r *CARotation) retiredBase(dir state.Dir) string {
	c, err := parseCert([]byte(r.OldCert))
	serial := "unknown"
	if err == nil {
		serial = c.SerialNumber.Text(16)
	}
	return filepath.Join(RetiredDir(dir), r.OldCA+"-"+serial)
}

// StateChanges lists what the state directory lacks for phase (the new CA's
// files, the retired copy of the old one, the bundle of the phase); none
// when it holds it all. It only reads.
func (r *CARotation) StateChanges(dir state.Dir, phase int) []string {
	t := r.Target()
	var out []string
	if r.OldCA == t.CA && !exists(r.retiredBase(dir)+".crt") {
		out = append(out, fmt.Sprintf("keep the old %s in %s.{crt,key}", t.CA, r.retiredBase(dir)))
	}
	if !fsutil.SameContent(dir.Cert(t.CA), []byte(r.NewCert)) || !fsutil.SameContent(dir.Key(t.CA), []byte(r.NewKey)) {
		out = append(out, fmt.Sprintf("write the new %s to %s", t.CA, dir.Cert(t.CA)))
	}
	if !fsutil.SameContent(dir.Cert(t.Bundle), r.Bundle(phase)) {
		what := "old + new CA"
		if phase >= PhaseDropOld {
			what = "the new CA alone"
		}
		out = append(out, fmt.Sprintf("write %s (%s)", dir.Cert(t.Bundle), what))
	}
	return out
}

// ApplyState writes what StateChanges lists: the old CA's retired copy
// first (its files are about to be overwritten), then the new CA (key
// first), then the bundle.
func (r *CARotation) ApplyState(dir state.Dir, phase int) error {
	t := r.Target()
	if r.OldCA == t.CA && !exists(r.retiredBase(dir)+".crt") {
		if !fsutil.SameContent(dir.Cert(t.CA), []byte(r.OldCert)) {
			return fmt.Errorf("%s is no longer the old %s and no retired copy is there", dir.Cert(t.CA), t.CA)
		}
		key, err := os.ReadFile(dir.Key(t.CA))
		if err != nil {
			return err
		}
		if err := privateDir(RetiredDir(dir)); err != nil {
			return err
		}
		if err := fsutil.WriteFile(r.retiredBase(dir)+".key", key, 0o600); err != nil {
			return err
		}
		if err := fsutil.WriteFile(r.retiredBase(dir)+".crt", []byte(r.OldCert), 0o644); err != nil {
			return err
		}
	}
	if !fsutil.SameContent(dir.Cert(t.CA), []byte(r.NewCert)) || !fsutil.SameContent(dir.Key(t.CA), []byte(r.NewKey)) {
		if err := dir.WritePair(t.CA, []byte(r.NewCert), []byte(r.NewKey)); err != nil {
			return err
		}
	}
	return fsutil.WriteFile(dir.Cert(t.Bundle), r.Bundle(phase), 0o644)
}

// UnsignedLeaves are the target's leaves in dir (for inv's hosts) that the
// new CA did not sign: what phase 2 reissues.
func (r *CARotation) UnsignedLeaves(inv *inventory.Inventory, dir state.Dir) ([]Entry, error) {
	ca, err := parseCert([]byte(r.NewCert))
	if err != nil {
		return nil, err
	}
	rows := r.Target().Leaves()
	var out []Entry
	for _, e := range Entries(inv) {
		if !slices.Contains(rows, e.Row) {
			continue
		}
		b, err := readOptional(dir.Cert(e.Name))
		if err != nil {
			return nil, err
		}
		if b != nil {
			if c, err := parseCert(b); err == nil && c.CheckSignatureFrom(ca) == nil {
				continue
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// LoadCARotation reads the record of which; nil when none is under way.
func LoadCARotation(dir state.Dir, which string) (*CARotation, error) {
	path := dir.CARotation(which)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	hint := "it is written by 'hardway rotate ca' only; restore it from your backup of the state directory"
	var r CARotation
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), hint)
	}
	if r.Kind != caRotationKind || r.Which != which || r.Done < 0 || r.Done > PhaseDropOld {
		return nil, usererr.New(fmt.Errorf("%s: not a CA rotation record of %s (kind %q, which %q, done %d)", path, which, r.Kind, r.Which, r.Done), hint)
	}
	cert, err := parseCert([]byte(r.NewCert))
	if err == nil {
		var key crypto.Signer
		key, err = parseKey([]byte(r.NewKey))
		if err == nil && !keyMatches(cert, key) {
			err = errors.New("the new key does not match the new certificate")
		}
	}
	if err == nil {
		_, err = parseCert([]byte(r.OldCert))
	}
	if err != nil {
		return nil, usererr.New(fmt.Errorf("%s: %w", path, err), hint)
	}
	return &r, nil
}

// SaveCARotation writes the record atomically (0600).
func SaveCARotation(dir state.Dir, r *CARotation, now time.Time) error {
	r.Updated = now.UTC()
	data, err := yaml.Marshal(r)
	if err != nil {
		return err
	}
	return fsutil.WriteFile(dir.CARotation(r.Which), data, 0o600)
}

// FinishCARotation removes the record: the rotation is complete.
func FinishCARotation(dir state.Dir, which string) error {
	if err := os.Remove(dir.CARotation(which)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// CARotationsUnderWay lists the rotations recorded in dir, for the guards
// of pki and up.
func CARotationsUnderWay(dir state.Dir) ([]*CARotation, error) {
	var out []*CARotation
	for _, t := range CATargets() {
		r, err := LoadCARotation(dir, t.Which)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// GuardCARotation refuses to go on while a CA rotation is under way: the
// state directory then holds a new CA whose leaves are not all out yet, and
// only the rotation knows the order that keeps every member trusted.
func GuardCARotation(dir state.Dir) error {
	rs, err := CARotationsUnderWay(dir)
	if err != nil || len(rs) == 0 {
		return err
	}
	r := rs[0]
	return usererr.New(fmt.Errorf("a CA rotation is under way (%s; %d of %d phases done)", r.Describe(), r.Done, PhaseDropOld),
		fmt.Sprintf("finish it first: hardway rotate ca --which %s", r.Which))
}

// ParseCertificate parses a PEM certificate (the first of a bundle).
func ParseCertificate(pemBytes []byte) (*x509.Certificate, error) { return parseCert(pemBytes) }
