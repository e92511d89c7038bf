package pki

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// `hardway certs renew`: reissue named leaves from the existing CAs, now,
// whatever their residual life. 'up' already reissues a leaf inside its
// renewal window; renew is for doing it on the user's schedule (a leaked key,
// a planned maintenance, a leaf a check names).

// ResolveLeaves turns what the user named into the leaves of the table, in
// table order: an entry's name ("etcd-server-controller-1"), a row's name
// for all its hosts ("etcd-server"), or all with all. A CA or an unknown
// name is a usage error that lists what can be renewed.
func ResolveLeaves(inv *inventory.Inventory, names []string, all bool) ([]Entry, error) {
	entries := Entries(inv)
	var leaves []string
	for _, e := range entries {
		if !e.IsCA() {
			leaves = append(leaves, e.Name)
		}
	}
	switch {
	case all && len(names) > 0:
		return nil, usererr.WithCode(errors.New("certs renew: name certificates or pass --all, not both"), usererr.CodeUsage,
			"hardway certs renew --all, or hardway certs renew "+leaves[0])
	case !all && len(names) == 0:
		return nil, usererr.WithCode(errors.New("certs renew: no certificate named"), usererr.CodeUsage,
			"name one or more of: "+strings.Join(leaves, ", ")+"; or pass --all")
	}
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, e := range entries {
			if e.Name == n || e.Row == n {
				if e.IsCA() {
					return nil, usererr.WithCode(fmt.Errorf("certs renew: %s is a CA: renew reissues leaves only, from the existing CAs", n), usererr.CodeUsage,
						"a new CA means every certificate it signed changes on every host: hardway certs generate --replace-ca="+n+", then hardway up")
				}
				want[e.Name], found = true, true
			}
		}
		if !found {
			return nil, usererr.WithCode(fmt.Errorf("certs renew: no certificate %q in the table for this inventory", n), usererr.CodeUsage,
				"name one or more of: "+strings.Join(leaves, ", ")+" (or a row such as etcd-server for every host)")
		}
	}
	var out []Entry
	for _, e := range entries {
		if !e.IsCA() && (all || want[e.Name]) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Renewed is one leaf Renew reissued.
type Renewed struct {
	Name      string    `json:"name"`
	OldSerial string    `json:"oldSerial,omitempty"` // "" when there was none on disk
	Serial    string    `json:"serial"`
	NotAfter  time.Time `json:"notAfter"`
}

// Renew reissues leaves from the CAs in dir (never making or replacing a
// CA: a missing one is an error) and rewrites the kubeconfigs that embed
// them. Everything else in the state directory is left as it is. The caller
// holds the state directory's lock.
func Renew(ctx context.Context, inv *inventory.Inventory, dir state.Dir, leaves []Entry, now time.Time) ([]Renewed, error) {
	if err := GuardIdentity(inv, dir, Options{}); err != nil {
		return nil, err
	}
	// Who signs each leaf follows the state directory (etcd's leaves in a
	// cluster made before the etcd CA: the cluster CA).
	entries, err := EntriesIn(inv, dir)
	if err != nil {
		return nil, err
	}
	leaves = slices.Clone(leaves)
	for i, l := range leaves {
		for _, e := range entries {
			if e.Name == l.Name {
				leaves[i].CA = e.CA
			}
		}
	}
	issuers := map[string]*issuer{}
	for _, e := range entries {
		if !e.IsCA() || !slices.ContainsFunc(leaves, func(l Entry) bool { return l.CA == e.Name }) {
			continue
		}
		for _, p := range []string{dir.Cert(e.Name), dir.Key(e.Name)} {
			if _, err := os.Stat(p); err != nil {
				return nil, usererr.New(fmt.Errorf("certs renew: %s: %w", p, err),
					"renew signs with the existing CA: "+PullHint(inv))
			}
		}
		// Loads and checks the CA (never creates one: both files exist).
		_, is, err := ensureCA(e, nil, inv, dir, now, false)
		if err != nil {
			return nil, err
		}
		issuers[e.Name] = is
	}
	var out []Renewed
	for _, e := range leaves {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r := Renewed{Name: e.Name}
		if b, err := readOptional(dir.Cert(e.Name)); err == nil && b != nil {
			if c, err := parseCert(b); err == nil {
				r.OldSerial = c.SerialNumber.Text(16)
			}
		}
		certPEM, keyPEM, err := issuers[e.CA].issue(e, now, inv.PKI.LeafValidity.D())
		if err != nil {
			return out, err
		}
		if err := dir.WritePair(e.Name, certPEM, keyPEM); err != nil {
			return out, err
		}
		c, err := parseCert(certPEM)
		if err != nil {
			return out, fmt.Errorf("%s: cfssl returned an unreadable certificate: %w", e.Name, err)
		}
		r.Serial, r.NotAfter = c.SerialNumber.Text(16), c.NotAfter
		out = append(out, r)
	}
	if _, err := ensureKubeconfigs(inv, dir); err != nil {
		return out, err
	}
	return out, nil
}

// KubeconfigsOf are the kubeconfigs that embed the leaf named name.
func KubeconfigsOf(inv *inventory.Inventory, name string) []string {
	var out []string
	for _, k := range Kubeconfigs(inv) {
		if k.Cert == name {
			out = append(out, k.Name)
		}
	}
	return out
}

// RenewHint is the fix for a leaf whose expiry a check reports (expired,
// not yet valid, inside its renewal window): the command that reissues it
// from the existing CA, pushes it and restarts what uses it. "" for
// anything else (a CA, a missing file, SANs that do not cover the
// inventory: 'hardway up' fixes those with everything they touch).
func RenewHint(r CheckResult) string {
	if r.Kind != KindCertificate || r.CA == "" || !expiryProblem(r.Problems) {
		return ""
	}
	return "run 'hardway certs renew " + r.Name + "': it reissues it from the existing CA, pushes it and restarts what uses it, " +
		"host by host ('hardway up' reissues leaves inside their renewal window too)"
}

func expiryProblem(ps []string) bool {
	for _, p := range ps {
		for _, s := range []string{"expired on", "not valid before", "inside its renewal window"} {
			if strings.HasPrefix(p, s) {
				return true
			}
		}
	}
	return false
}
