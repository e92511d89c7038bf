package pki

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// etcd's own CA, and clusters made before it existed.
//
// A new cluster gets etcd-ca, which signs etcd-server-<host>, etcd-peer-<host>
// and apiserver-etcd-client. A cluster made by an earlier hardway has no
// etcd-ca: its etcd trusts the cluster CA, and its etcd certificates are
// signed by it. Making an etcd CA for it behind the user's back would replace
// what the running etcd trusts and cut it off from its peers and the
// apiservers, so such a state directory keeps signing etcd's certificates
// with the cluster CA ("legacy") until 'hardway rotate ca --which etcd'
// migrates it with trust bundles, host by host. verify warns meanwhile.
//
// What etcd and the apiservers trust for etcd is one file, the trust bundle
// (<state>/pki/etcd-trust-bundle.crt): the signing CA's certificate, or
// during a rotation the old and the new CA. The hosts get it as etcd's
// --trusted-ca-file and --peer-trusted-ca-file and the apiservers'
// --etcd-cafile. Generate keeps it equal to the signing CA; a CA rotation
// writes it itself.

// EtcdTrustBundle is the name (in <state>/pki, .crt) of what etcd and its
// clients trust.
const EtcdTrustBundle = "etcd-trust-bundle"

// etcdLeafRows are the table rows etcd-ca signs.
func etcdLeafRows() []string {
	var out []string
	for _, c := range Table() {
		if c.CA == EtcdCA {
			out = append(out, c.Name)
		}
	}
	return out
}

// EtcdSigner names the CA that signs etcd's certificates in dir: EtcdCA, or
// CA for a state directory made before the etcd CA existed. It only reads.
// A state directory whose etcd certificates are signed by neither (its
// etcd-ca files were lost) is an error: a new etcd CA would not be trusted
// by the running etcd.
func EtcdSigner(dir state.Dir) (string, error) {
	if exists(dir.Cert(EtcdCA)) || exists(dir.Key(EtcdCA)) {
		return EtcdCA, nil // ensureCA names a half-missing pair
	}
	caPEM, err := readOptional(dir.Cert(CA))
	if err != nil || caPEM == nil {
		return EtcdCA, err // a new cluster (or one whose CA is missing: identityGuard says so)
	}
	ca, err := parseCert(caPEM)
	if err != nil {
		return EtcdCA, nil // ensureCA names it
	}
	leaves, err := etcdLeavesOnDisk(dir)
	if err != nil || len(leaves) == 0 {
		return EtcdCA, err
	}
	var foreign []string
	for _, p := range leaves {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		c, err := parseCert(b)
		if err != nil || c.CheckSignatureFrom(ca) != nil {
			foreign = append(foreign, filepath.Base(p))
		}
	}
	switch {
	case len(foreign) == 0:
		return CA, nil
	case len(foreign) == len(leaves):
		return "", usererr.New(fmt.Errorf("%s: %s.crt and %s.key are missing, and etcd's certificates there (%s) are not signed by the cluster CA: refusing to make a new etcd CA",
			dir.PKIDir(), EtcdCA, EtcdCA, shortList(foreign)), PullHint(nil))
	}
	// Some signed by the cluster CA, some not: the cluster CA's are what a
	// legacy cluster has; the others are reissued from it (inspectLeaf).
	return CA, nil
}

// etcdLeavesOnDisk lists the certificates of etcd's rows that exist in dir,
// for any host (not only the inventory's: a state directory is judged by
// what it holds).
func etcdLeavesOnDisk(dir state.Dir) ([]string, error) {
	var out []string
	for _, row := range etcdLeafRows() {
		for _, pat := range []string{dir.Cert(row), dir.Cert(row + "-*")} {
			m, err := filepath.Glob(pat)
			if err != nil {
				return nil, err
			}
			out = append(out, m...)
		}
	}
	return out, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// EtcdLegacy reports whether etcd's certificates in dir are signed by the
// cluster CA (a cluster made before the etcd CA).
func EtcdLegacy(dir state.Dir) (bool, error) {
	s, err := EtcdSigner(dir)
	return s == CA, err
}

// EntriesIn is Entries for the state directory dir: in a legacy state
// directory etcd's rows are signed by the cluster CA and there is no etcd
// CA to make.
func EntriesIn(inv *inventory.Inventory, dir state.Dir) ([]Entry, error) {
	signer, err := EtcdSigner(dir)
	if err != nil {
		return nil, err
	}
	return entriesWith(inv, signer), nil
}

func entriesWith(inv *inventory.Inventory, etcdSigner string) []Entry {
	all := Entries(inv)
	if etcdSigner == EtcdCA {
		return all
	}
	out := all[:0:0]
	for _, e := range all {
		switch {
		case e.Name == EtcdCA:
			continue
		case e.CA == EtcdCA:
			e.CA = etcdSigner
		}
		out = append(out, e)
	}
	return out
}

// ensureTrustBundle writes t's trust bundle as the signing CA's
// certificate when it differs, unless a rotation of t is under way (the
// rotation writes it, phase by phase).
func ensureTrustBundle(dir state.Dir, t CATarget, signer string) (Result, error) {
	path := dir.Cert(t.Bundle)
	res := Result{Name: t.Bundle, Kind: KindTrustBundle, Path: path, Status: Reused}
	if rot, err := LoadCARotation(dir, t.Which); err != nil || rot != nil {
		return res, err
	}
	want, err := os.ReadFile(dir.Cert(signer))
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.Bundle, err)
	}
	have, err := readOptional(path)
	if err != nil {
		return res, err
	}
	if bytes.Equal(have, want) {
		return res, nil
	}
	if err := fsutil.WriteFile(path, want, 0o644); err != nil {
		return res, err
	}
	res.Status, res.Reason = Created, ""
	if have != nil {
		res.Status, res.Reason = Updated, "trusts "+signer
	}
	return res, nil
}

// joinPEM concatenates certificates into a bundle, one newline between.
func joinPEM(certs ...[]byte) []byte {
	var parts []string
	for _, c := range certs {
		parts = append(parts, strings.TrimSpace(string(c)))
	}
	return []byte(strings.Join(parts, "\n") + "\n")
}
