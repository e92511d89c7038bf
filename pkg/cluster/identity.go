package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// The cluster's identity: the two CAs, the service-account key pair and the
// encryption config. Certificates, tokens and every Secret stored in etcd
// depend on them, so `up` never replaces them on a host without being told
// (--replace-identity). A state directory that lost them, or belongs to
// another cluster, is found here, before any step writes anything.

// StepIdentity is the name of the guard step.
const StepIdentity = "identity"

// IsIdentity reports whether a file copied from the state directory is part
// of the cluster's identity.
func IsIdentity(s *units.Source) bool {
	if s == nil {
		return false
	}
	switch s.Kind {
	case units.SourceCert, units.SourceKey:
		// The cluster CA's trust bundle too: it is all of the cluster CA a
		// worker holds (its kubelet's clientCAFile), and equals the CA but
		// during a rotation, when up does not run.
		return s.Name == pki.CA || s.Name == pki.CATrustBundle || s.Name == pki.FrontProxyCA || s.Name == pki.EtcdCA || (s.Kind == units.SourceKey && s.Name == pki.ServiceAccount)
	case units.SourcePublicKey:
		return s.Name == pki.ServiceAccount
	case units.SourceEncryptionConfig:
		return true
	}
	return false
}

// IdentityMismatch is one identity file on one host that the local state
// directory does not match.
type IdentityMismatch struct {
	Host  string `json:"host"`
	Path  string `json:"path"`  // on the host
	Local string `json:"local"` // in the state directory
	// Missing: the state directory has no such file (lost, or new).
	Missing bool `json:"missing,omitempty"`
	// Damaged: the host's copy is not a valid file of its kind (truncated,
	// emptied, a literal placeholder). With the state directory's copy at
	// hand that is drift, which up repairs; it is never a source for state
	// pull.
	Damaged bool   `json:"damaged,omitempty"`
	Why     string `json:"why"`
}

// blocks reports whether m stops up: a damaged copy is drift that the state
// directory repairs, unless the state directory lacks the file too.
func (m IdentityMismatch) blocks() bool { return !m.Damaged || m.Missing }

// identityDamage says why data, a host's copy of the identity file from s,
// is not a valid file of its kind ("" when it is).
func identityDamage(s *units.Source, data []byte) string {
	switch s.Kind {
	case units.SourceCert:
		return pki.CertificateDamage(data)
	case units.SourcePublicKey:
		return pki.PublicKeyDamage(data)
	case units.SourceKey:
		return pki.PrivateKeyDamage(data)
	case units.SourceEncryptionConfig:
		return pki.EncryptionConfigDamage(data)
	}
	return ""
}

// HostDialer returns the connection to an inventory host.
type HostDialer func(ctx context.Context, host string) (remote.Host, error)

// CompareIdentity reads the public half of every identity file on every
// host of ms (certificates, the service-account public key, the encryption
// config: private keys never travel for this) and compares it with the
// state directory. A host without the file is a new host and fine. A host
// that cannot be reached is listed in unreachable and not compared. It only
// reads.
func CompareIdentity(ctx context.Context, ms []*units.Manifest, st state.Dir, dial HostDialer) (mm []IdentityMismatch, unreachable []string, err error) {
	perHost := make([][]IdentityMismatch, len(ms))
	down := make([]string, len(ms))
	err = remote.ForEach(ctx, ms, hostsAtOnce, func(ctx context.Context, m *units.Manifest) error {
		i := slices.Index(ms, m)
		var files []units.File
		var paths []string
		// A host that holds the cluster CA itself is compared by it; its
		// trust bundle (the same certificate) would only say it twice.
		holdsCA := slices.ContainsFunc(m.Files, func(f units.File) bool {
			return f.Source != nil && f.Source.Kind == units.SourceCert && f.Source.Name == pki.CA
		})
		for _, f := range m.Files {
			if holdsCA && f.Source != nil && f.Source.Name == pki.CATrustBundle {
				continue
			}
			if IsIdentity(f.Source) && f.Source.Kind != units.SourceKey {
				files = append(files, f)
				paths = append(paths, f.Path)
			}
		}
		if len(files) == 0 {
			return nil
		}
		h, err := dial(ctx, m.Host)
		if err != nil {
			down[i] = fmt.Sprintf("%s (%v)", m.Host, err)
			return nil
		}
		got, err := remote.ReadFiles(ctx, h, paths)
		if err != nil {
			return err
		}
		for j, f := range files {
			if !got[j].Exists {
				continue // a new host: nothing to lose there
			}
			local := f.Source.LocalPath(st)
			rel, _ := filepath.Rel(string(st), local)
			mis := IdentityMismatch{Host: m.Host, Path: f.Path, Local: rel}
			damage := identityDamage(f.Source, got[j].Data)
			want, err := os.ReadFile(local)
			if errors.Is(err, os.ErrNotExist) {
				mis.Missing, mis.Why = true, "the host has it, the state directory does not"
				if damage != "" {
					mis.Damaged, mis.Why = true, "the host's copy is damaged ("+damage+") and the state directory has none"
				}
				perHost[i] = append(perHost[i], mis)
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", local, err)
			}
			if d := identityDamage(f.Source, want); d != "" {
				mis.Why = "the state directory's copy " + rel + " is damaged (" + d + ")"
				perHost[i] = append(perHost[i], mis)
				continue
			}
			if damage != "" {
				// Nothing can be signed or encrypted with a copy that does
				// not parse: the state directory's is the cluster's.
				mis.Damaged, mis.Why = true, "the host's copy is damaged ("+damage+")"
				perHost[i] = append(perHost[i], mis)
				continue
			}
			switch f.Source.Kind {
			case units.SourceCert:
				if !pki.SameCertificate(want, got[j].Data) {
					mis.Why = "another certificate than " + rel
				}
			case units.SourcePublicKey:
				if !pki.SamePublicKey(want, got[j].Data) {
					mis.Why = "another key than " + rel
				}
			case units.SourceEncryptionConfig:
				if ok, why := pki.EncryptionCompatible(want, got[j].Data); !ok {
					mis.Why = why
				}
			}
			if mis.Why != "" {
				perHost[i] = append(perHost[i], mis)
			}
		}
		return nil
	})
	for i := range ms {
		mm = append(mm, perHost[i]...)
		if down[i] != "" {
			unreachable = append(unreachable, down[i])
		}
	}
	return mm, unreachable, err
}

// IdentityError explains the mismatches that stop up, and what to do next.
// from is the control-plane host a state pull should read ("" when no
// reachable one holds valid copies); damaged are the hosts whose copies are
// damaged, which a hint never suggests. Damaged copies are listed too: up
// repairs them once the rest is settled.
func IdentityError(mm []IdentityMismatch, from string, damaged []string) error {
	allMissing := true
	var lines []string
	for _, m := range mm {
		if m.blocks() {
			allMissing = allMissing && m.Missing
		}
		lines = append(lines, fmt.Sprintf("  %s: %s: %s", m.Host, m.Path, m.Why))
	}
	replace := "To replace the hosts' identity with this state directory's on purpose (every certificate,\n" +
		"service-account token and stored Secret made with the old one stops working): hardway up --replace-identity"
	// Where the state comes back from: a host with valid copies, or the
	// backup when no reachable host holds them.
	source := "restore it from your backup (no reachable control-plane host holds valid copies to pull)"
	if from != "" {
		source = fmt.Sprintf("run 'hardway state pull %s'", from)
		if len(damaged) > 0 {
			source += fmt.Sprintf(" (not from %s: damaged copies)", strings.Join(damaged, ", "))
		}
	}
	if allMissing {
		return usererr.New(fmt.Errorf("the hosts hold the cluster's identity (CA, service-account key, encryption key) "+
			"but the state directory does not; nothing was written:\n%s", strings.Join(lines, "\n")),
			fmt.Sprintf("the state directory was lost (or this is a fresh clone): %s,\n"+
				"then run 'hardway up' again.\n%s", source, replace))
	}
	return usererr.New(fmt.Errorf("the hosts' cluster identity differs from the state directory's; nothing was written:\n%s",
		strings.Join(lines, "\n")),
		fmt.Sprintf("check that -i and --state name the right cluster. If the hosts are right, move the state\n"+
			"directory away and %s.\n%s", source, replace))
}

// pullFrom picks the host a hint names for state pull, and the hosts it
// must not name: never one whose copies are damaged, nor one that could
// not be compared. It prefers the first control-plane host whose valid
// copies differ from the state directory's (the identity the hosts hold),
// else the first control-plane host with valid copies.
func (c *Cluster) pullFrom(mm []IdentityMismatch, unreachable []string) (from string, damaged []string) {
	bad := map[string]bool{}
	for _, m := range mm {
		if m.Damaged && !bad[m.Host] {
			bad[m.Host] = true
			damaged = append(damaged, m.Host)
		}
	}
	for _, u := range unreachable {
		name, _, _ := strings.Cut(u, " ")
		bad[name] = true
	}
	for _, h := range c.Inv.ControlPlane {
		if !bad[h.Name] && slices.ContainsFunc(mm, func(m IdentityMismatch) bool { return m.Host == h.Name && m.blocks() }) {
			return h.Name, damaged
		}
	}
	for _, h := range c.Inv.ControlPlane {
		if !bad[h.Name] {
			return h.Name, damaged
		}
	}
	return "", damaged
}

func (c *Cluster) dialHost(ctx context.Context, name string) (remote.Host, error) {
	h, err := c.Host(ctx, name)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// planIdentity compares the hosts' identity with the state directory's.
// A mismatch stops the run before any step writes, unless ReplaceIdentity
// says to go on: then it is listed as one action per host (the push step
// does the writing).
func (c *Cluster) planIdentity(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}
	// A retired key is never pushed back as the write key, and during an
	// encryption-key rotation the state directory's config is what the
	// rotation left there: pushing it repeats a step, never undoes one.
	note, err := pki.CheckEncryptionState(c.opt.State)
	if err != nil {
		return nil, err
	}
	if note != "" {
		c.planf(ctx, "[%s] %s", StepIdentity, note)
	}
	// A CA rotation under way is finished by its own command: only it
	// knows which CA each host trusts at the moment.
	if err := pki.GuardCARotation(c.opt.State); err != nil {
		return nil, err
	}
	var ms []*units.Manifest
	for _, h := range c.Inv.Hosts() {
		if m := c.manifests[h.Name]; m != nil {
			ms = append(ms, m)
		}
	}
	mm, unreachable, err := CompareIdentity(ctx, ms, c.opt.State, c.dialHost)
	if err != nil {
		return nil, err
	}
	for _, u := range unreachable {
		c.planf(ctx, "[%s] not compared, unreachable: %s", StepIdentity, u)
	}
	if len(mm) == 0 {
		return nil, nil
	}
	blocking := slices.ContainsFunc(mm, IdentityMismatch.blocks)
	if blocking && !c.opt.ReplaceIdentity {
		from, damaged := c.pullFrom(mm, unreachable)
		return nil, IdentityError(mm, from, damaged)
	}
	var actions []plan.Action
	var hosts []string
	files := map[string][]string{}
	for _, m := range mm {
		if !m.blocks() {
			// The keys do not change: the push step rewrites the host's
			// copy from the state directory and the services that read it
			// restart behind the usual gates. This action is the record.
			actions = append(actions, plan.Action{Host: m.Host, Kind: plan.Write,
				Desc: fmt.Sprintf("repair %s: %s; rewritten from the state directory's %s (the cluster's keys do not change)", m.Path, m.Why, m.Local),
				Do:   func(context.Context) error { return nil }})
			continue
		}
		if files[m.Host] == nil {
			hosts = append(hosts, m.Host)
		}
		files[m.Host] = append(files[m.Host], m.Path)
	}
	for _, h := range hosts {
		actions = append(actions, plan.Action{Host: h, Kind: plan.Write,
			Desc: "replace the cluster identity (--replace-identity): " + strings.Join(files[h], ", "),
			// The push step writes the files; this action is the record.
			Do: func(context.Context) error { return nil }})
	}
	return actions, nil
}

// guarded makes every step after the identity step check the identity first
// (once per list of steps), so that --only or --skip can never reach a
// write around it. The daemon's repair, which runs a subset of the steps,
// is guarded the same way.
func (c *Cluster) guarded(steps []plan.Step) []plan.Step { return guardSteps(steps, c.planIdentity) }

func guardSteps(steps []plan.Step, identity func(context.Context, plan.Planned) ([]plan.Action, error)) []plan.Step {
	// The identity is compared once per run, by whichever step asks first
	// (plans may run at once, see plan.Runner.Ahead), and the others wait
	// for that answer. A comparison cut short by its caller's context (a
	// plan made ahead and dropped) is no answer: the next caller compares.
	var mu sync.Mutex
	var known bool
	var actions []plan.Action
	var err error
	check := func(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
		mu.Lock()
		defer mu.Unlock()
		if known {
			return actions, err
		}
		as, e := identity(ctx, earlier)
		if e != nil && ctx.Err() != nil {
			return as, e
		}
		actions, err, known = as, e, true
		return actions, err
	}
	out := make([]plan.Step, 0, len(steps))
	after := false
	for _, s := range steps {
		if s.Name == StepIdentity {
			s.Plan = check
			after = true
		} else if after {
			p := s.Plan
			s.Plan = func(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
				if _, err := check(ctx, earlier); err != nil {
					return nil, fmt.Errorf("[%s] %w", StepIdentity, err)
				}
				return p(ctx, earlier)
			}
		}
		out = append(out, s)
	}
	return out
}

// pkiOptions are the pki step's: a new service-account key or encryption
// key next to existing state only with --replace-identity.
func (c *Cluster) pkiOptions() pki.Options {
	return pki.Options{NewServiceAccountKey: c.opt.ReplaceIdentity, NewEncryptionKey: c.opt.ReplaceIdentity}
}
