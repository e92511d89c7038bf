package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// `hardway state pull`: the hosts are a backup of the state directory.
// Every file hardway pushed from it is on some host (the manifests say
// where), so inverting the manifests rebuilds it: the identity (CAs with
// their keys, the service-account pair, the encryption config with all its
// keys) from one named control-plane host, every other file from the hosts
// that hold it, copies compared. A following `up` then has nothing to do.

// PullOptions tune PullState.
type PullOptions struct {
	From  string // the control-plane host the identity comes from
	Force bool   // overwrite local files that differ
}

// Pull statuses of one file.
const (
	PullPulled    = "pulled"    // written from a host
	PullUnchanged = "unchanged" // the local file already held exactly this
	PullExtracted = "extracted" // a client certificate or key taken out of a pulled kubeconfig
	PullIssued    = "issued"    // no host holds it: issued from the pulled CA (pki)
	PullSkipped   = "skipped"   // not pulled; Note says why
)

// PulledFile is what PullState did with one file of the state directory.
type PulledFile struct {
	Path   string   `json:"path"` // relative to the state directory
	Status string   `json:"status"`
	From   []string `json:"from,omitempty"` // hosts whose copy it is (all agreeing)
	Note   string   `json:"note,omitempty"`
}

// PullResult is the summary of a pull; it never holds file contents.
type PullResult struct {
	State       string       `json:"state"`
	From        string       `json:"from"`
	Files       []PulledFile `json:"files"`
	Unreachable []string     `json:"unreachable,omitempty"`
	Notes       []string     `json:"notes,omitempty"`
}

// Count is the number of files with status s.
func (r *PullResult) Count(s string) int {
	n := 0
	for _, f := range r.Files {
		if f.Status == s {
			n++
		}
	}
	return n
}

// pullCopy is one host's copy of a state file.
type pullCopy struct {
	host string
	path string // on the host
	data []byte
}

// pullItem is one state file and every copy of it found.
type pullItem struct {
	local    string // absolute path in the state directory
	rel      string
	mode     os.FileMode
	identity bool
	// optional: the etcd CA, which a cluster made before it does not
	// have on any host; only then is its absence no loss.
	optional bool
	copies   []pullCopy
	// damaged: the hosts whose copy is not a valid file of its kind,
	// host -> why; those copies are never pulled.
	damaged map[string]string
}

// PullState rebuilds the state directory from the hosts. Nothing is
// written until every host has been read and every conflict checked; a
// local file that differs is left alone unless Force. The caller holds the
// state directory's lock.
func (c *Cluster) PullState(ctx context.Context, o PullOptions) (*PullResult, error) {
	st := c.opt.State
	res := &PullResult{State: string(st), From: o.From}
	var cps []string
	for _, h := range c.Inv.ControlPlane {
		cps = append(cps, h.Name)
	}
	if !slices.Contains(cps, o.From) {
		return nil, usererr.WithCode(fmt.Errorf("--from %q: not a control-plane host of the inventory", o.From), usererr.CodeUsage,
			"the identity (CA keys, service-account key, encryption config) is only on control-plane hosts: one of "+strings.Join(cps, ", "))
	}
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}

	// Every state file every host holds, per host in inventory order.
	items := map[string]*pullItem{}
	type hostFiles struct {
		host  string
		files []units.File
	}
	var hosts []hostFiles
	for _, h := range c.Inv.Hosts() {
		m := c.manifests[h.Name]
		if m == nil {
			continue
		}
		hf := hostFiles{host: h.Name}
		for _, f := range m.Files {
			if f.Source == nil || f.Source.Kind == units.SourceBinary {
				continue
			}
			local := f.Source.LocalPath(st)
			if items[local] == nil {
				rel, _ := filepath.Rel(string(st), local)
				mode := os.FileMode(0o644)
				switch f.Source.Kind {
				case units.SourceKey, units.SourceKubeconfig, units.SourceEncryptionConfig:
					mode = 0o600
				}
				items[local] = &pullItem{local: local, rel: rel, mode: mode, identity: IsIdentity(f.Source), optional: f.Source.Optional}
			}
			hf.files = append(hf.files, f)
		}
		hosts = append(hosts, hf)
	}

	got := make([][]remote.Content, len(hosts))
	down := make([]error, len(hosts))
	err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, hf hostFiles) error {
		i := slices.IndexFunc(hosts, func(x hostFiles) bool { return x.host == hf.host })
		h, err := c.Host(ctx, hf.host)
		if err != nil {
			down[i] = err
			return nil
		}
		var paths []string
		for _, f := range hf.files {
			paths = append(paths, f.Path)
		}
		got[i], err = remote.ReadFiles(ctx, h, paths)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, hf := range hosts {
		if down[i] != nil {
			if hf.host == o.From {
				return nil, usererr.New(fmt.Errorf("state pull: %s: %w", hf.host, down[i]),
					"the identity comes from --from: name a control-plane host that is reachable")
			}
			res.Unreachable = append(res.Unreachable, fmt.Sprintf("%s (%v)", hf.host, down[i]))
			continue
		}
		for j, f := range hf.files {
			if got[i][j].Exists {
				it := items[f.Source.LocalPath(st)]
				if why := identityDamage(f.Source, got[i][j].Data); why != "" {
					if it.damaged == nil {
						it.damaged = map[string]string{}
					}
					it.damaged[hf.host] = why
					continue
				}
				it.copies = append(it.copies, pullCopy{host: hf.host, path: f.Path, data: got[i][j].Data})
			}
		}
	}

	// Decide each file's content.
	want := map[string][]byte{} // local path -> content
	var missingIdentity, damagedIdentity []string
	var locals []string
	for l := range items {
		locals = append(locals, l)
	}
	sort.Strings(locals)
	for _, l := range locals {
		it := items[l]
		pf := PulledFile{Path: it.rel}
		data, from, note, ok := choose(it, o.From)
		switch {
		case ok:
			want[l] = data
			pf.From, pf.Note = from, note
		case it.identity && it.optional && len(it.copies) == 0:
			continue // a cluster made before the etcd CA: none to pull
		case it.identity && it.damaged[o.From] != "":
			damagedIdentity = append(damagedIdentity, fmt.Sprintf("%s (%s)", it.rel, it.damaged[o.From]))
			continue
		case it.identity:
			missingIdentity = append(missingIdentity, it.rel)
			continue
		default:
			pf.Status, pf.Note = PullSkipped, note
		}
		res.Files = append(res.Files, pf)
	}
	if len(damagedIdentity) > 0 {
		return nil, usererr.New(fmt.Errorf("state pull: %s's copy is damaged: %s; nothing was written",
			o.From, strings.Join(damagedIdentity, ", ")), pullValidHint(items, cps, o.From))
	}
	if len(missingIdentity) > 0 {
		return nil, usererr.New(fmt.Errorf("state pull: %s does not hold %s: nothing was written",
			o.From, strings.Join(missingIdentity, ", ")), pullMissingHint(missingIdentity, cps, o.From))
	}

	// Client certificates live only inside kubeconfigs on the hosts.
	for _, k := range pki.Kubeconfigs(c.Inv) {
		kc, ok := want[st.Kubeconfig(k.Name)]
		if !ok {
			continue
		}
		certPath, keyPath := st.Cert(k.Cert), st.Key(k.Cert)
		if _, have := want[certPath]; have {
			continue
		}
		cert, key, err := clientCredentials(kc, k.User, want[st.Cert(pki.CA)])
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("kubeconfigs/%s.kubeconfig: %v: %s not extracted", k.Name, err, k.Cert))
			continue
		}
		want[certPath], want[keyPath] = cert, key
		for _, p := range []string{certPath, keyPath} {
			rel, _ := filepath.Rel(string(st), p)
			res.Files = append(res.Files, PulledFile{Path: rel, Status: PullExtracted, Note: "from kubeconfigs/" + k.Name + ".kubeconfig"})
		}
	}

	// Conflicts with what is there, before any write.
	var conflicts []string
	for i := range res.Files {
		f := &res.Files[i]
		if f.Status == PullSkipped {
			continue
		}
		p := filepath.Join(string(st), f.Path)
		old, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		case bytes.Equal(old, want[p]):
			f.Status = PullUnchanged
		case !o.Force:
			conflicts = append(conflicts, f.Path)
		}
	}
	if len(conflicts) > 0 {
		return nil, usererr.New(fmt.Errorf("state pull: %d local file(s) differ from the hosts' copies: %s; nothing was written",
			len(conflicts), strings.Join(conflicts, ", ")),
			"the state directory is not empty: move it away and pull into a new one, or pass --force to\n"+
				"replace these files with the hosts' copies (back them up first: they may be the only copy)")
	}

	for _, d := range []string{string(st), st.PKIDir(), st.KubeconfigDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, err
		}
	}
	for i := range res.Files {
		f := &res.Files[i]
		if f.Status == PullSkipped || f.Status == PullUnchanged {
			continue
		}
		p := filepath.Join(string(st), f.Path)
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".key") || strings.HasSuffix(p, ".kubeconfig") || p == st.EncryptionConfig() {
			mode = 0o600
		}
		if it := items[p]; it != nil {
			mode = it.mode
		}
		if err := fsutil.WriteFile(p, want[p], mode); err != nil {
			return res, err
		}
		if f.Status == "" {
			f.Status = PullPulled
		}
	}

	// What no host holds (kube-proxy's certificate without workers, a
	// host that could not be reached) is issued from the pulled CA, as
	// `up` would; pki refuses anything that would need a new identity.
	rs, err := pki.Generate(ctx, c.Inv, st, pki.Options{})
	if err != nil {
		return res, err
	}
	for _, r := range rs {
		if r.Status == pki.Reused {
			continue
		}
		rel, _ := filepath.Rel(string(st), r.Path)
		note := string(r.Status)
		if r.Reason != "" {
			note += ": " + r.Reason
		}
		res.Files = append(res.Files, PulledFile{Path: rel, Status: PullIssued, Note: note})
	}
	sort.SliceStable(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	return res, nil
}

// choose picks an item's content: the identity from the --from host, any
// other file from the copies when they agree (or from --from when it holds
// one). ok false: nothing to take (note says why).
func choose(it *pullItem, from string) (data []byte, hosts []string, note string, ok bool) {
	var fromCopy *pullCopy
	for i := range it.copies {
		if it.copies[i].host == from {
			fromCopy = &it.copies[i]
			break
		}
	}
	var differ []string
	if it.identity {
		if fromCopy == nil {
			return nil, nil, "", false
		}
		hosts = []string{from}
		for _, c := range it.copies {
			if c.host != from && !bytes.Equal(c.data, fromCopy.data) {
				differ = append(differ, c.host+":"+c.path)
			} else if c.host != from && !slices.Contains(hosts, c.host) {
				hosts = append(hosts, c.host)
			}
		}
		if len(differ) > 0 {
			note = "taken from " + from + "; differs on " + strings.Join(differ, ", ") + " ('hardway up' will stop there: decide which is right)"
		}
		var bad []string
		for h := range it.damaged {
			bad = append(bad, h)
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			note = strings.TrimPrefix(note+"; damaged on "+strings.Join(bad, ", ")+" ('hardway up' repairs it)", "; ")
		}
		return fromCopy.data, hosts, note, true
	}
	if len(it.copies) == 0 {
		return nil, nil, "no reachable host holds it ('hardway up' issues it anew from the CA)", false
	}
	first := it.copies[0]
	agree := true
	for _, c := range it.copies[1:] {
		if !bytes.Equal(c.data, first.data) {
			agree = false
		}
	}
	if agree {
		for _, c := range it.copies {
			if !slices.Contains(hosts, c.host) {
				hosts = append(hosts, c.host)
			}
		}
		return first.data, hosts, "", true
	}
	var where []string
	for _, c := range it.copies {
		where = append(where, c.host)
	}
	if fromCopy != nil {
		return fromCopy.data, []string{from}, "copies differ between " + strings.Join(where, ", ") + ": taken from " + from, true
	}
	return nil, nil, "copies differ between " + strings.Join(where, ", ") + ": not pulled ('hardway up' reissues it)", false
}

// clientCredentials takes the client certificate and key of user out of a
// kubeconfig, checking that it trusts the pulled CA.
func clientCredentials(kubeconfig []byte, user string, ca []byte) (cert, key []byte, err error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, nil, errors.New("unreadable kubeconfig")
	}
	ai := cfg.AuthInfos[user]
	if ai == nil || len(ai.ClientCertificateData) == 0 || len(ai.ClientKeyData) == 0 {
		return nil, nil, fmt.Errorf("no embedded credentials for %s", user)
	}
	for _, cl := range cfg.Clusters {
		if ca != nil && !pki.SameCertificate(cl.CertificateAuthorityData, ca) {
			return nil, nil, errors.New("it trusts another CA")
		}
	}
	return ai.ClientCertificateData, ai.ClientKeyData, nil
}

func pullMissingHint(missing, cps []string, from string) string {
	var others []string
	for _, h := range cps {
		if h != from {
			others = append(others, h)
		}
	}
	hint := "try another control-plane host"
	if len(others) > 0 {
		for i := range others {
			others[i] = usererr.Quote(others[i])
		}
		hint += " (--from " + strings.Join(others, ", --from ") + ")"
	}
	if slices.Contains(missing, "pki/front-proxy-ca.key") {
		hint += ".\nfront-proxy-ca.key reaches the hosts only since hardway pushes it for state pull: hosts set up\n" +
			"by an older version lack it. Then restore the state directory from your backup instead; the next\n" +
			"'hardway up' pushes the key, and later pulls work"
	}
	return hint
}

// pullValidHint names the control-plane hosts whose copies of every
// identity file are valid: the ones to pull from instead.
func pullValidHint(items map[string]*pullItem, cps []string, from string) string {
	var valid []string
	for _, h := range cps {
		ok := h != from
		for _, it := range items {
			if it.identity && it.damaged[h] != "" {
				ok = false
			}
		}
		if ok {
			valid = append(valid, "--from "+usererr.Quote(h))
		}
	}
	if len(valid) == 0 {
		return "no other control-plane host holds valid copies: restore the state directory from your backup"
	}
	return "pull from a host whose copies are valid: " + strings.Join(valid, ", ") +
		"; the next 'hardway up' then repairs the damaged copies"
}
