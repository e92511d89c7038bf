package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// The names of the steps of `hardway up` (--only, --skip, the daemon's
// repairs).
const (
	StepPreflight    = "preflight"
	StepPKI          = "pki"
	StepFetch        = "fetch"
	StepRender       = "render"
	StepPush         = "push"
	StepEtcd         = "etcd"
	StepControlPlane = "control-plane"
	StepRBAC         = "rbac"
)

// StepDocs are the steps' names and docs, for `hardway up --help`: the
// steps themselves, so the two cannot drift apart.
func StepDocs() []plan.Step {
	steps := New(&inventory.Inventory{}, Options{}).Steps()
	for i := range steps {
		steps[i].Plan = nil
	}
	return steps
}

// Steps are the steps of `hardway up`, in order.
func (c *Cluster) Steps() []plan.Step { return c.guarded(c.upgradeGuarded(c.upSteps())) }

// upgradeGuarded makes the first step refuse while an upgrade is half-way
// (the record in the state directory): a plain up would move every host
// that is left at once, with no drain. The upgrade's own phases are runs
// of up (Options.Upgrading).
func (c *Cluster) upgradeGuarded(steps []plan.Step) []plan.Step {
	if c.opt.Upgrading || len(steps) == 0 || steps[0].Plan == nil {
		return steps
	}
	p := steps[0].Plan
	steps[0].Plan = func(ctx context.Context, earlier plan.Planned) ([]plan.Action, error) {
		rec, err := LoadUpgrade(c.opt.State)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			return nil, usererr.New(errors.New(rec.Summary()),
				"'hardway upgrade apply' finishes it (it goes on where it stopped); until then up would move every host left at once, without draining the workers")
		}
		return p(ctx, earlier)
	}
	return steps
}

// upSteps are the steps of `hardway up`, before guarded wraps them.
func (c *Cluster) upSteps() []plan.Step {
	return []plan.Step{
		{Name: StepPreflight, Doc: "SSH with verified host keys; Linux, systemd, arch, clock skew, ports, free disk and the etcd disk's fsync latency", Plan: c.planPreflight},
		{Name: StepIdentity, Doc: "the hosts' CAs, service-account key and encryption key match the state directory (reads only)", Plan: c.planIdentity},
		c.hostStep(),
		{Name: StepPKI, Doc: "CA, certificates, service-account key, encryption config, kubeconfigs (reused when valid)", Plan: c.planPKI},
		{Name: StepFetch, Doc: "release binaries, verified against published checksums and hardway.lock", Plan: c.planFetch},
		{Name: StepRender, Doc: "systemd units and configs for the inventory's versions", Plan: c.planRender},
		{Name: StepPush, Doc: "every file, atomically; files already equal are not sent (releases.fetchOn: hosts: each host downloads the release files itself, checked against hardway.lock before install)", Plan: c.planPush},
		{Name: StepEtcd, Doc: "start members (all together on a new cluster) or restart them one at a time, keeping quorum; check health and the member list", Plan: c.planEtcd},
		{Name: StepControlPlane, Doc: "kube-apiserver, kube-controller-manager, kube-scheduler: stopped ones start on every host at once (each host apiserver first); running ones whose files changed restart host by host, waiting for /readyz or /healthz before the next", Plan: c.planControlPlane},
		{Name: StepRBAC, Doc: "the RBAC that lets the apiserver reach kubelets (server-side apply)", Plan: c.planRBAC},
		c.WorkersStep(),
		c.DNSStep(),
	}
}

// --- pki ---------------------------------------------------------------

func (c *Cluster) planPKI(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	if err := pki.GuardIdentity(c.Inv, c.opt.State, c.pkiOptions()); err != nil {
		return nil, err
	}
	var todo []string
	for _, r := range pki.Check(c.Inv, c.opt.State, time.Now()) {
		// Errors (missing, broken, not covering) and a leaf's warnings
		// (renewal window, stale SANs) are what Generate acts on; a CA's
		// warning is a note for the user, never an automatic replacement.
		if r.State == pki.CheckFailed || (r.State == pki.CheckWarning && r.Kind == pki.KindCertificate && r.CA != "") {
			why := "missing"
			if len(r.Problems) > 0 {
				why = r.Problems[0]
			}
			todo = append(todo, fmt.Sprintf("%s (%s)", r.Name, why))
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	desc := fmt.Sprintf("generate %d file(s) in %s", len(todo), c.opt.State)
	diff := strings.Join(todo, "\n")
	return []plan.Action{{Kind: plan.Reissue, Desc: desc, Diff: diff, Do: func(ctx context.Context) error {
		rs, err := pki.Generate(ctx, c.Inv, c.opt.State, c.pkiOptions())
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Status != pki.Reused {
				line := fmt.Sprintf("[pki] %s %s", r.Status, r.Name)
				if r.Reason != "" {
					line += ": " + r.Reason
				}
				c.logf("%s", line)
			}
			if r.Note != "" {
				c.logf("[pki] note: %s: %s", r.Name, r.Note)
			}
		}
		return nil
	}}}, nil
}

// --- fetch -------------------------------------------------------------

func (c *Cluster) releaseOptions(offline bool) release.Options {
	o := c.opt.Release
	if o.Kubernetes == "" {
		keep := o
		o = release.OptionsFor(c.Inv)
		o.CacheDir, o.UpdateLock, o.Jobs = keep.CacheDir, keep.UpdateLock, keep.Jobs
		o.Offline = keep.Offline
	}
	if offline {
		o.Offline = true
	}
	return o
}

// lookupSet looks the release set up in the cache the way a plan may
// (offline; neither the lock nor the stat memo written), once per run: the
// fetch step's plan and the plans made ahead of it that need the set (see
// planSet) share one lookup, which hashes what the memo cannot vouch for
// (image tarballs' layers, say) instead of each doing it again.
func (c *Cluster) lookupSet(ctx context.Context) (*release.Set, error) {
	c.lookupMu.Lock()
	defer c.lookupMu.Unlock()
	if c.lookedUp {
		return c.lookupRes, c.lookupErr
	}
	o := c.releaseOptions(true)
	o.NoLockWrite, o.Progress = true, nil
	set, err := release.Resolve(ctx, o)
	if err != nil && ctx.Err() != nil {
		return nil, err // cut short by its caller (a plan made ahead and dropped): no answer
	}
	c.lookupRes, c.lookupErr, c.lookedUp = set, err, true
	return set, err
}

func (c *Cluster) planFetch(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	set, err := c.lookupSet(ctx)
	if err == nil {
		// Found in the cache: remembered in memory for push. The lock is
		// written by an action, when it is new or moves (--update-lock).
		c.setReleaseSet(set)
		data, err := set.Lock.Marshal()
		if err != nil {
			return nil, err
		}
		if fsutil.SameContent(set.LockPath, data) {
			return nil, nil
		}
		return []plan.Action{{Kind: plan.Write, Desc: "write " + set.LockPath + " (Kubernetes " + set.Kubernetes + ", etcd " + set.Etcd + ")",
			Do: func(context.Context) error { _, err := release.WriteLock(set.LockPath, set.Lock); return err }}}, nil
	}
	if c.opt.Release.Offline {
		return nil, err
	}
	// Only "not in the cache yet" is something a download fixes; a lock
	// mismatch or a bad version must stop here.
	if !errors.Is(err, release.ErrNotCached) {
		return nil, err
	}
	msg := err.Error()
	first := strings.SplitN(msg, "\n", 2)[0]
	return []plan.Action{{Kind: plan.Download, Desc: "download and verify release binaries (" + first + ")", Do: func(ctx context.Context) error {
		o := c.releaseOptions(false)
		o.Progress = c.opt.Progress
		set, err := release.Resolve(ctx, o)
		if err != nil {
			return err
		}
		c.setReleaseSet(set)
		return nil
	}}}, nil
}

// planSet makes sure a plan that needs the release set has it: the fetch
// step's plan finds it in the cache, and a plan made ahead of that one
// (plan.Runner.Ahead) makes the same lookup (offline; the lock is not
// written). Were anything to fetch, the fetch step would plan actions and
// the plans made ahead would be dropped. Not found: the set stays nil and
// whatever needs it says so.
func (c *Cluster) planSet(ctx context.Context) {
	if c.releaseSet() != nil {
		return
	}
	if set, err := c.lookupSet(ctx); err == nil {
		c.setReleaseSet(set)
	}
}

// --- render ------------------------------------------------------------

func (c *Cluster) planRender(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}
	return c.recordPodSubnets()
}

// ensureRendered renders the manifests once; checks call it concurrently.
func (c *Cluster) ensureRendered(context.Context) error {
	c.renderMu.Lock()
	defer c.renderMu.Unlock()
	if c.manifests != nil {
		return nil
	}
	pods, _, err := podnet.ForInventory(c.opt.State, c.Inv)
	if err != nil {
		return err
	}
	ms, err := units.Render(c.Inv, pods)
	if err != nil {
		return err
	}
	m := map[string]*units.Manifest{}
	for i := range ms {
		m[ms[i].Host] = &ms[i]
	}
	c.manifests = m
	return nil
}

// ensureSet finds the release set in the cache once (for verify, which never
// downloads); a missing set shows as an error where a binary is needed.
func (c *Cluster) ensureSet(ctx context.Context) {
	c.renderMu.Lock()
	defer c.renderMu.Unlock()
	if c.set != nil {
		return
	}
	o := c.releaseOptions(true)
	o.Progress = nil
	if set, err := release.Resolve(ctx, o); err == nil {
		c.set = set
	}
}

// --- push --------------------------------------------------------------

// restartDir holds one marker file per component whose files changed and
// that has not been restarted since: a run that fails between push and
// restart leaves the markers, and the next run finishes the job.
const restartDir = units.HardwayDataDir + "/restart"

// sumsCache is the host's stat cache of file digests (see remote.CompareCached).
const sumsCache = units.HardwayDataDir + "/sums"

// remoteFiles turns a host's manifest into remote files, resolving copied
// files to the state directory or the release cache.
func (c *Cluster) remoteFiles(m *units.Manifest) ([]remote.File, error) {
	set := c.releaseSet()
	var out []remote.File
	for _, f := range m.Files {
		owner, group, _ := strings.Cut(f.Owner, ":")
		rf := remote.File{Path: f.Path, Mode: f.Mode, Owner: owner, Group: group, Data: f.Content}
		if f.Source != nil {
			if f.Source.Kind == units.SourceBinary {
				if set == nil {
					return nil, usererr.New(errors.New("the release binaries are not in the cache"), "run 'hardway fetch' first, or 'hardway up' without --offline")
				}
				a, ok := set.Get(m.Arch, f.Source.Name)
				if !ok {
					return nil, fmt.Errorf("release set has no %s for %s", f.Source.Name, m.Arch)
				}
				if err := checkMachine(m, f, a); err != nil {
					return nil, err
				}
				rf.Source, rf.Size, rf.SHA256 = a.Path, a.Size, a.SHA256
			} else {
				rf.Source = f.Source.LocalPath(c.opt.State)
				if _, err := os.Stat(rf.Source); err != nil {
					return nil, usererr.New(fmt.Errorf("%s needs %s: %w", f.Path, rf.Source, err), "run 'hardway certs generate' (or 'hardway up' without --skip pki)")
				}
			}
		}
		out = append(out, rf)
	}
	return out, nil
}

// checkMachine refuses a release binary for m's host that is not built for
// the host's architecture. The set holds each arch's files under their own
// name and arch, so this should never fire; it is what makes sure: a
// mirror that serves the amd64 build at the arm64 path (its checksum
// published beside it and pinned in the lock all the same) would otherwise
// install a kubelet that cannot start, and the host would only say "exec
// format error". It reads the ELF header of the operator's verified copy,
// before the push is planned; with releases.fetchOn: hosts the host
// installs those same bytes (the lock's sha256), so the check covers it
// too. Image tarballs are not binaries (their architecture is checked by
// pkg/release against the image config).
func checkMachine(m *units.Manifest, f units.File, a release.Artifact) error {
	if a.Image != nil {
		return nil
	}
	err := platform.CheckELF(a.Path, m.Arch)
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("%s: %s (%s %s from %s)", m.Host, f.Path, a.Name, a.Version, a.URL)
	var mm *platform.MismatchError
	switch {
	case errors.As(err, &mm):
		return usererr.New(fmt.Errorf("%s: %w, the host's architecture: nothing pushed", what, err),
			"the mirror serves another architecture's file at the "+m.Arch+" path: check releases in the inventory "+
				"(a mirror laid out like the official site keeps each architecture under its own path), then run 'hardway fetch --update-lock'; "+
				"if "+m.Host+" is not "+m.Arch+", set arch: on it in the inventory")
	case errors.Is(err, platform.ErrNotELF):
		return usererr.New(fmt.Errorf("%s is not a Linux binary: %w: nothing pushed", what, err),
			"the mirror serves something else than a release binary at that path: check releases in the inventory, then run 'hardway fetch --update-lock'")
	}
	return usererr.New(fmt.Errorf("%s: read the cached binary: %w", what, err), "run 'hardway fetch' to fill the cache again")
}

// planPush compares every file with what is on the hosts. Each write it
// plans names the components that read the file (Action.Restarts): the etcd
// and control-plane steps restart those, also in a dry run where nothing was
// written and no restart marker exists yet.
func (c *Cluster) planPush(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	var sel *pushSelect
	switch {
	case c.renewMode():
		sel = &pushSelect{keep: bySource(c.renewing), force: true, why: "renewed"}
	case c.opt.Scope != nil:
		sel = &pushSelect{keep: c.opt.Scope.keeps}
	}
	return c.planPushSelected(ctx, sel)
}

// pushSelect narrows a push to some files: of the state directory (certs
// renew, a CA rotation), or of some hosts and components (an upgrade
// phase's Scope); nil pushes everything.
type pushSelect struct {
	keep func(host string, f units.File) bool
	// force plans a write of every kept file even where the host's copy
	// equals the state directory's: in a dry run the state directory is
	// not rewritten yet, and the plan still shows the push and the
	// restarts it brings. why is the reason shown then.
	force bool
	why   string
}

// bySource keeps the files whose source keep keeps, on every host.
func bySource(keep func(*units.Source) bool) func(string, units.File) bool {
	return func(_ string, f units.File) bool { return keep(f.Source) }
}

// manifest is m with only the kept files and no directories (a cluster
// that holds the old files has them; a new file's parents are made as it
// is written).
func (s *pushSelect) manifest(m *units.Manifest) *units.Manifest {
	r := *m
	r.Files, r.Dirs = nil, nil
	for _, f := range m.Files {
		if s.keep(m.Host, f) {
			r.Files = append(r.Files, f)
		}
	}
	return &r
}

func (c *Cluster) planPushSelected(ctx context.Context, sel *pushSelect) ([]plan.Action, error) {
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}
	c.planSet(ctx)
	// Hosts are compared in parallel; the plan lists them in inventory order.
	hosts := c.pushHosts()
	perHost := make([]hostPush, len(hosts))
	err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		hp, err := c.planPushHost(ctx, h, sel)
		perHost[indexOf(hosts, h.Name)] = hp
		return err
	})
	if err != nil {
		return nil, err
	}
	// Every host's directories first, then every host's writes: the runner
	// takes a run of Parallel actions together, and a directory action (not
	// Parallel: a host's files wait for their directories) between two hosts'
	// writes would make the push go host by host.
	var dirs, writes []plan.Action
	for _, hp := range perHost {
		dirs = append(dirs, hp.dirs...)
		writes = append(writes, hp.writes...)
	}
	return append(dirs, writes...), nil
}

// hostPush is one host's part of the push: the actions that must come
// first (directories, the old admin kubeconfig's removal), one at a time,
// and the writes, which run side by side with every host's.
type hostPush struct{ dirs, writes []plan.Action }

func (c *Cluster) planPushHost(ctx context.Context, h inventory.Host, sel *pushSelect) (hostPush, error) {
	var hp hostPush
	m := c.manifest(h.Name)
	if sel != nil {
		m = sel.manifest(m)
		if len(m.Files) == 0 {
			return hp, nil
		}
	}
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		return hp, err
	}
	files, err := c.remoteFiles(m)
	if err != nil {
		return hp, err
	}
	dirs := append([]units.Dir{{Path: restartDir, Mode: 0o700, Owner: "root:root"}}, m.Dirs...)
	var dirPaths []string
	for _, d := range dirs {
		dirPaths = append(dirPaths, d.Path)
	}
	// The old admin kubeconfig is looked for in the same command: Inspect
	// stats any path it is given with the directories ("missing" or not).
	lookAdmin := sel == nil && c.mayHaveOldAdmin(m)
	if lookAdmin {
		dirPaths = append(dirPaths, units.AdminKubeconfig)
	}
	// One command reads every directory's and file's stat and the stat
	// cache, which makes a converged host's check one stat per file
	// instead of reading every binary; verify reads them all.
	res, got, err := remote.Inspect(ctx, sh, files, sumsCache, dirPaths)
	if err != nil {
		return hp, err
	}
	for i, d := range dirs {
		want := fmt.Sprintf("%o %s", d.Mode.Perm(), d.Owner)
		if got[i] == want {
			continue
		}
		owner := d.Owner
		hp.dirs = append(hp.dirs, plan.Action{Host: sh.Name(), Kind: plan.Write, Desc: fmt.Sprintf("directory %s (%04o %s; now %s)", d.Path, d.Mode.Perm(), owner, got[i]),
			Do: func(ctx context.Context) error {
				u, g, _ := strings.Cut(owner, ":")
				_, err := sh.Run(ctx, fmt.Sprintf("install -d -m %o -o %s -g %s %s", d.Mode.Perm(), remote.Quote(u), remote.Quote(g), remote.Quote(d.Path)), nil)
				return err
			}})
	}
	if lookAdmin && got[len(dirs)] != "missing" {
		hp.dirs = append(hp.dirs, c.oldAdminKubeconfigAction(sh))
	}
	// A host that already holds part of the identity and lacks a file of it,
	// or holds another private key beside the same public half (the identity
	// step compared those), has drifted: the write is a repair.
	holdsIdentity := false
	for i, r := range res {
		holdsIdentity = holdsIdentity || !r.Content && IsIdentity(m.Files[i].Source)
	}
	fetch := c.newHostFetch(h.Name, m.Arch)
	for i, r := range res {
		why := r.Why
		if !r.Changed() {
			// certs renew, a CA rotation: in a dry run the state directory
			// is not rewritten yet, so the host's copy still equals it; the
			// plan shows the push and the restarts it brings all the same.
			if sel == nil || !sel.force {
				continue
			}
			why = sel.why
		}
		f, mf := files[i], m.Files[i]
		desc := fmt.Sprintf("write %s (%04o, %s)", f.Path, f.Mode.Perm(), why)
		if mf.Apply != "" {
			desc += ", then " + mf.Apply
		}
		if sel == nil && !c.opt.ReplaceIdentity && r.Content && holdsIdentity && IsIdentity(mf.Source) &&
			(r.Why == "missing" || mf.Source.Kind == units.SourceKey) {
			desc = fmt.Sprintf("repair %s (%04o, %s; from the state directory: the cluster's keys do not change)", f.Path, f.Mode.Perm(), why)
		}
		diff := ""
		if mf.Content != nil && r.Content && r.Why != "missing" {
			diff = c.shortDiff(ctx, sh, f.Path, mf.Content)
		}
		var markers []string
		for _, comp := range mf.Components {
			markers = append(markers, path.Join(restartDir, comp))
		}
		attrsOnly := !r.Content
		if r.Content {
			// releases.fetchOn: hosts: the host downloads it (hostfetch.go).
			if ok, err := fetch.add(mf, f, markers); err != nil {
				return hp, err
			} else if ok {
				continue
			}
		}
		// Files are written side by side (Parallel, one lane each): the
		// directories above come first, and no write depends on another.
		hp.writes = append(hp.writes, plan.Action{Host: h.Name, Kind: plan.Write, Desc: desc, Diff: diff, Restarts: mf.Components,
			Parallel: true, Lane: f.Path, Do: func(ctx context.Context) error {
				// The markers first, in the same command: if the write
				// succeeds and the run dies before the restart, the next
				// run still restarts. The cache entry then spares the next
				// plan reading the file.
				return remote.Put(ctx, sh, f, remote.PutOptions{Markers: markers, Cache: sumsCache, AttrsOnly: attrsOnly, Then: mf.Apply})
			}})
	}
	hp.writes = append(hp.writes, fetch.actions(sh)...)
	return hp, nil
}

// shortDiff is a unified-ish diff of a text file on the host against want,
// at most 20 lines: enough to see which flag changed.
func (c *Cluster) shortDiff(ctx context.Context, sh remote.Host, p string, want []byte) string {
	old, err := sh.Run(ctx, "head -c 65536 "+remote.Quote(p), nil)
	if err != nil || bytes.IndexByte(old, 0) >= 0 {
		return ""
	}
	a, b := lineSet(old), lineSet(want)
	var out []string
	for _, l := range strings.Split(string(old), "\n") {
		if !b[l] && strings.TrimSpace(l) != "" {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(string(want), "\n") {
		if !a[l] && strings.TrimSpace(l) != "" {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("… %d more lines", len(out)-20))
	}
	return strings.Join(out, "\n")
}

func lineSet(b []byte) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		m[l] = true
	}
	return m
}

func clearRestart(ctx context.Context, sh remote.Host, comp string) error {
	_, err := sh.Run(ctx, "rm -f "+remote.Quote(path.Join(restartDir, comp)), nil)
	return err
}

// oldAdminKubeconfigAction removes the admin kubeconfig an earlier hardway
// (or this one with pki.adminKubeconfigOnHosts) put on a control-plane host
// that the inventory no longer wants it on: it is system:masters, and a
// copy nobody asked for is a copy more to steal. Reading is the plan; rm
// is the action. Only hardway's own path in hardway's own directory.
// mayHaveOldAdmin says whether to look for it on m's host.
func (c *Cluster) mayHaveOldAdmin(m *units.Manifest) bool {
	if !slices.Contains(m.Components, units.APIServer) {
		return false
	}
	_, wanted := m.File(units.AdminKubeconfig)
	return !wanted
}

// oldAdminKubeconfigAction removes it (planPushHost found it there).
func (c *Cluster) oldAdminKubeconfigAction(sh remote.Host) plan.Action {
	return plan.Action{Host: sh.Name(), Kind: plan.Write,
		Desc: "remove " + units.AdminKubeconfig + " (system:masters; pki.adminKubeconfigOnHosts is off)",
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, "rm -f "+units.AdminKubeconfig, nil)
			return err
		}}
}
