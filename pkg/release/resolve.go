// Package release gets the Kubernetes and etcd release binaries a cluster is
// built from: it resolves versions, downloads from the official sites or a
// mirror with the same layout, verifies every file against its published
// checksum and against the lock file, and keeps them in a content-addressed
// cache. Nothing leaves this package unverified: an artifact without a
// published checksum is an error, never "unverified".
package release

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/hashicorp/go-version"
	"golang.org/x/sync/errgroup"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
)

// Options say what to resolve and how.
type Options struct {
	Kubernetes       string // as written in the inventory: "v1.36.3" or a minor "1.36"
	Etcd             string // "v3.6.16"
	Arch             string // amd64 or arm64: the inventory's, of the hosts and images that name none
	KubernetesMirror string // base URL: <base>/release/vX.Y.Z/bin/linux/<arch>/<bin>
	EtcdMirror       string // base URL: <base>/vX.Y.Z/etcd-vX.Y.Z-linux-<arch>.tar.gz
	Workers          bool   // also kubelet, kube-proxy, the worker components and the images

	// The architectures the control-plane hosts and the workers use (empty:
	// Arch alone): the set holds the control-plane binaries and etcd for
	// each of the first, the worker binaries and images for each of the
	// second.
	ControlPlaneArches []string
	WorkerArches       []string

	// Worker components (with Workers): versions, and base URLs laid out like
	// their official GitHub release downloads. Empty versions take the
	// inventory's tested defaults for the Kubernetes minor.
	WorkerVersions   inventory.WorkerVersions
	ContainerdMirror string
	RuncMirror       string
	CNIPluginsMirror string
	CrictlMirror     string
	Images           []inventory.Image // docker-archive tarballs for the workers
	// APIServerLB (with Workers): also Traefik, the workers' node-local
	// apiserver load balancer, from TraefikMirror (its GitHub release layout).
	APIServerLB   bool
	TraefikMirror string

	LockPath   string // hardway.lock
	CacheDir   string // "": DefaultCacheDir()
	Offline    bool   // use the cache only
	UpdateLock bool   // re-resolve and rewrite the lock instead of enforcing it
	Jobs       int    // parallel downloads; default 4
	// NoLockWrite leaves the lock file alone: the set's Lock says what it
	// should hold (a plan only reads; writing it is an action). Nor does
	// it record hashed blobs in the cache's stat memo.
	NoLockWrite bool

	Fetcher  *Fetcher // nil: defaults
	Progress Progress // nil: silent
}

// OptionsFor fills Options from an inventory.
func OptionsFor(inv *inventory.Inventory) Options {
	o := Options{
		Kubernetes:       inv.KubernetesVersion,
		Etcd:             inv.EtcdVersion,
		Arch:             inv.Arch,
		KubernetesMirror: inv.Releases.Kubernetes,
		EtcdMirror:       inv.Releases.Etcd,
		Workers:          len(inv.Workers) > 0,
		LockPath:         inv.LockPath(),
		WorkerVersions:   inv.WorkerVersions(),
		ContainerdMirror: inv.Releases.Containerd,
		RuncMirror:       inv.Releases.Runc,
		CNIPluginsMirror: inv.Releases.CNIPlugins,
		CrictlMirror:     inv.Releases.Crictl,
		Images:           inv.Images,
		APIServerLB:      inv.NodeLocalLB(),
		TraefikMirror:    inv.Releases.Traefik,
	}
	o.ControlPlaneArches, o.WorkerArches = inv.ArchesOf(inv.ControlPlane), inv.ArchesOf(inv.Workers)
	return o
}

// Set is the result: every artifact verified and in the cache.
type Set struct {
	Kubernetes  string                    `json:"kubernetes"`
	Etcd        string                    `json:"etcd"`
	Workers     *inventory.WorkerVersions `json:"workers,omitempty"` // set when the inventory has workers
	Arch        string                    `json:"arch"`              // the inventory's arch
	Arches      []string                  `json:"arches"`            // every arch the artifacts are for, sorted
	LockPath    string                    `json:"lockPath"`
	LockWritten bool                      `json:"lockWritten"`
	CacheDir    string                    `json:"cacheDir"`
	Artifacts   []Artifact                `json:"artifacts"`
	Lock        *Lock                     `json:"-"`
}

// Artifact is one verified file in the cache.
type Artifact struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
	URL     string `json:"url"`
	Member  string `json:"member,omitempty"` // path inside the archive at URL
	SHA256  string `json:"sha256"`
	SHA512  string `json:"sha512"`
	Size    int64  `json:"size"`
	Path    string `json:"path"`    // the cached file; read it, never run it in place
	Install bool   `json:"install"` // a binary for /usr/local/bin/<Name>
	Source  string `json:"source"`  // cache, download, extract
	// Image is set for "image:<name>" artifacts: the tarball is a
	// docker-archive holding that image.
	Image *ImageInfo `json:"image,omitempty"`
}

// Get returns the artifact named name for arch: a host gets the one of
// its own architecture.
func (s *Set) Get(arch, name string) (Artifact, bool) {
	for _, a := range s.Artifacts {
		if a.Name == name && a.Arch == arch {
			return a, true
		}
	}
	return Artifact{}, false
}

// Images are the "image:<name>" artifacts, by arch, each arch's in the
// inventory's order.
func (s *Set) Images() []Artifact {
	var out []Artifact
	for _, a := range s.Artifacts {
		if a.Image != nil {
			out = append(out, a)
		}
	}
	return out
}

// Binaries are the artifacts installed as /usr/local/bin/<Name>.
func (s *Set) Binaries() []Artifact {
	var out []Artifact
	for _, a := range s.Artifacts {
		if a.Install {
			out = append(out, a)
		}
	}
	return out
}

func (a Artifact) lockEntry() LockEntry {
	return LockEntry{Name: a.Name, Version: a.Version, Arch: a.Arch, URL: a.URL, Member: a.Member, SHA256: a.SHA256, SHA512: a.SHA512}
}

type resolver struct {
	opts  Options
	cache Cache
	f     *Fetcher
	prog  Progress
	lock  *Lock // the lock being enforced; nil on first resolve or --update-lock
}

// Resolve makes every artifact for opts available, verified, in the cache,
// and writes the lock when it is new or changes on purpose.
func Resolve(ctx context.Context, opts Options) (*Set, error) {
	r, err := newResolver(opts)
	if err != nil {
		return nil, err
	}
	return r.resolve(ctx)
}

func newResolver(opts Options) (*resolver, error) {
	if opts.CacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		opts.CacheDir = d
	}
	if opts.Jobs <= 0 {
		opts.Jobs = 4
	}
	if opts.LockPath == "" {
		return nil, errors.New("release: no lock path")
	}
	r := &resolver{opts: opts, cache: Cache{Dir: opts.CacheDir, Memo: !opts.NoLockWrite}, f: opts.Fetcher, prog: opts.Progress}
	if r.f == nil {
		r.f = &Fetcher{}
	}
	if r.prog == nil {
		r.prog = nopProgress{}
	}
	return r, nil
}

func (r *resolver) resolve(ctx context.Context) (*Set, error) {
	o := r.opts
	k8sReq, err := ParseRequested(o.Kubernetes, true)
	if err != nil {
		return nil, usererr.Errorf("set kubernetesVersion to an exact version (v1.36.3) or a minor (1.36)", "kubernetes version: %w", err)
	}
	etcdReq, err := ParseRequested(o.Etcd, false)
	if err != nil {
		return nil, usererr.Errorf("set etcdVersion to an exact version such as v3.6.16", "etcd version: %w", err)
	}
	if !o.UpdateLock {
		if r.lock, err = ReadLock(o.LockPath); err != nil {
			return nil, err
		}
	}
	var k8sTag string
	if r.lock != nil {
		if err := checkLockVersions(r.lock, o.LockPath, k8sReq, etcdReq); err != nil {
			return nil, err
		}
		k8sTag = r.lock.Kubernetes
	} else {
		v := k8sReq.V
		if k8sReq.Minor {
			if o.Offline {
				return nil, notCached(usererr.Errorf("write an exact kubernetesVersion, or run 'hardway fetch' once with network access to pin the minor in "+usererr.Quote(o.LockPath),
					"kubernetes %s is a minor, and resolving it needs the mirror; --offline has no lock to read it from", o.Kubernetes))
			}
			if v, err = r.f.resolveMinor(ctx, o.KubernetesMirror, k8sReq); err != nil {
				return nil, err
			}
		}
		k8sTag = Tag(v)
	}
	etcdTag := Tag(etcdReq.V)
	if o.Workers {
		if err := r.workerVersions(k8sTag); err != nil {
			return nil, err
		}
		o = r.opts
	}
	specs := plan(o, k8sTag, etcdTag)
	if r.lock != nil {
		if err := checkLockEntries(r.lock, o.LockPath, specs); err != nil {
			return nil, err
		}
	}

	arts := make([]Artifact, len(specs))
	if o.Offline {
		if err := r.fromCache(specs, arts); err != nil {
			return nil, err
		}
	} else if err := r.download(ctx, specs, arts); err != nil {
		return nil, err
	}
	if err := r.extract(specs, arts); err != nil {
		return nil, err
	}
	if err := inspectImages(r.cache, specs, arts); err != nil {
		return nil, err
	}

	_, _, arches := o.archesOf()
	set := &Set{Kubernetes: k8sTag, Etcd: etcdTag, Arch: o.Arch, Arches: arches, LockPath: o.LockPath, CacheDir: o.CacheDir, Artifacts: arts}
	if o.Workers {
		w := o.WorkerVersions
		if !o.APIServerLB {
			w.Traefik = "" // not part of this set
		}
		set.Workers = &w
	}
	// The lock is what this set holds: an architecture new to the
	// inventory is pinned now, on its first resolve, as a first worker's
	// components are; one no host uses any more leaves it.
	set.Lock = &Lock{Kubernetes: k8sTag, Etcd: etcdTag}
	for _, a := range arts {
		e := a.lockEntry()
		// The lock keeps the URL the bytes first came from: a mirror that
		// serves the same bytes elsewhere changes nothing worth a diff.
		if old, ok := r.lock.Entry(a.Arch, a.Name); ok {
			e.URL = old.URL
		}
		set.Lock.Artifacts = append(set.Lock.Artifacts, e)
	}
	set.Lock.setArches()
	if o.NoLockWrite {
		return set, nil
	}
	if set.LockWritten, err = WriteLock(o.LockPath, set.Lock); err != nil {
		return nil, err
	}
	return set, nil
}

// checkLockVersions refuses to use a lock pinned to other versions than
// the inventory asks for: moving is done on purpose, with --update-lock.
// Architectures are not compared here: each entry is pinned per arch, and
// one the lock lacks is pinned on its first resolve (checkLockEntries
// compares the entries it has).
func checkLockVersions(l *Lock, lockPath string, k8s, etcd Requested) error {
	hint := "to move to what the inventory says, run 'hardway fetch --update-lock' and commit " + usererr.Quote(lockPath) +
		"; to stay, set the inventory back to what the lock pins"
	lk, err := version.NewSemver(strings.TrimPrefix(l.Kubernetes, "v"))
	if err != nil {
		return usererr.Errorf(hint, "%s: kubernetes %q is not a version", lockPath, l.Kubernetes)
	}
	if !k8s.Satisfies(lk) {
		return usererr.Errorf(hint, "the inventory asks for Kubernetes %s but %s pins %s", k8s.Raw, lockPath, l.Kubernetes)
	}
	le, err := version.NewSemver(strings.TrimPrefix(l.Etcd, "v"))
	if err != nil {
		return usererr.Errorf(hint, "%s: etcd %q is not a version", lockPath, l.Etcd)
	}
	if !etcd.Satisfies(le) {
		return usererr.Errorf(hint, "the inventory asks for etcd %s but %s pins %s", etcd.Raw, lockPath, l.Etcd)
	}
	return nil
}

// fromCache fills arts from the cache alone and names everything missing.
func (r *resolver) fromCache(specs []spec, arts []Artifact) error {
	if r.lock == nil {
		return notCached(usererr.Errorf("run 'hardway fetch' once with network access, or 'hardway fetch --from-bundle FILE' from a bundle made elsewhere",
			"--offline needs %s to know which bytes to use, and there is none", r.opts.LockPath))
	}
	var missing []string
	for i, s := range specs {
		if s.SumKind == sumMember {
			continue // extracted from the archive if absent
		}
		e, ok := r.lock.Entry(s.Arch, s.Name)
		if !ok {
			missing = append(missing, fmt.Sprintf("%s %s %s: not in %s", s.Name, s.Version, s.Arch, r.opts.LockPath))
			continue
		}
		d, p, ok, err := r.cache.lookup(e.SHA256)
		switch {
		case errors.Is(err, errCorrupted):
			missing = append(missing, fmt.Sprintf("%s %s %s (sha256 %s): corrupted in the cache, removed", s.Name, s.Version, s.Arch, e.SHA256))
		case err != nil:
			return fmt.Errorf("%s: %w", s.Name, err)
		case !ok:
			missing = append(missing, fmt.Sprintf("%s %s %s (sha256 %s): not in the cache %s", s.Name, s.Version, s.Arch, e.SHA256, r.opts.CacheDir))
		case d.SHA512 != e.SHA512:
			return mismatchError(r.opts.LockPath, s.Name, p, "sha512", e.SHA512, d.SHA512)
		default:
			arts[i] = artifactOf(s, d, p, "cache")
			r.prog.Done(s.Label, s.Version+": cached")
		}
	}
	if len(missing) > 0 {
		return notCached(usererr.Errorf("run 'hardway fetch' with network access, or 'hardway fetch --from-bundle FILE', to fill the cache",
			"--offline: %d artifact(s) missing:\n  %s", len(missing), strings.Join(missing, "\n  ")))
	}
	return nil
}

// workerVersions fills in the worker component versions the options leave
// empty from the tested table, and checks the ones given.
func (r *resolver) workerVersions(k8sTag string) error {
	k, _ := version.NewSemver(strings.TrimPrefix(k8sTag, "v"))
	def, _ := inventory.DefaultWorkerVersions(k)
	w := &r.opts.WorkerVersions
	for _, f := range []struct {
		v        *string
		def, fld string
	}{{&w.Containerd, def.Containerd, "containerdVersion"}, {&w.Runc, def.Runc, "runcVersion"},
		{&w.CNIPlugins, def.CNIPlugins, "cniPluginsVersion"}, {&w.Crictl, def.Crictl, "crictlVersion"},
		{&w.Traefik, def.Traefik, "traefikVersion"}} {
		if *f.v == "" {
			*f.v = f.def
		}
		req, err := ParseRequested(*f.v, false)
		if err != nil {
			return usererr.Errorf("set "+f.fld+" to an exact version such as "+f.def, "%s: %w", f.fld, err)
		}
		*f.v = Tag(req.V)
	}
	mirrors := []struct{ url, fld string }{{r.opts.ContainerdMirror, "containerd"}, {r.opts.RuncMirror, "runc"},
		{r.opts.CNIPluginsMirror, "cniPlugins"}, {r.opts.CrictlMirror, "crictl"}}
	if r.opts.APIServerLB {
		mirrors = append(mirrors, struct{ url, fld string }{r.opts.TraefikMirror, "traefik"})
	}
	for _, m := range mirrors {
		if m.url == "" {
			return fmt.Errorf("release: no mirror for %s (releases.%s)", m.fld, m.fld)
		}
	}
	return nil
}

// checkLockEntries refuses a lock that pins another version of an artifact
// than the inventory asks for (a worker component's version moved), or
// another image under the same name, before anything is downloaded.
func checkLockEntries(l *Lock, lockPath string, specs []spec) error {
	for _, s := range specs {
		e, ok := l.Entry(s.Arch, s.Name)
		if !ok {
			continue
		}
		hint := "to move to what the inventory says, run 'hardway fetch --update-lock' and commit " + usererr.Quote(lockPath) +
			"; to stay, set the inventory back to what the lock pins"
		if e.Version != s.Version {
			return usererr.Errorf(hint, "the inventory asks for %s %s but %s pins %s", s.Label, s.Version, lockPath, e.Version)
		}
		if s.SumKind == sumInline && e.SHA256 != s.Sum {
			return mismatchError(lockPath, s.Name, "the inventory's images entry", "sha256", e.SHA256, s.Sum)
		}
	}
	return nil
}

func artifactOf(s spec, d Digests, p, source string) Artifact {
	return Artifact{Name: s.Name, Version: s.Version, Arch: s.Arch, URL: s.URL, Member: s.Member,
		SHA256: d.SHA256, SHA512: d.SHA512, Size: d.Size, Path: p, Install: s.Install, Source: source}
}

// download gets every non-member artifact, a bounded number at a time.
func (r *resolver) download(ctx context.Context, specs []spec, arts []Artifact) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.opts.Jobs)
	sums := &sumFiles{f: r.f, files: map[string]*sumFile{}}
	for i, s := range specs {
		if s.SumKind == sumMember {
			continue
		}
		g.Go(func() error {
			a, err := r.obtain(gctx, s, sums)
			if err != nil {
				return err
			}
			arts[i] = a
			return nil
		})
	}
	err := g.Wait()
	Finish(r.prog)
	return err
}

// obtain gets one artifact: its published digest first (required), then
// the cache if the mirror's file has not changed since, else a download.
func (r *resolver) obtain(ctx context.Context, s spec, sums *sumFiles) (Artifact, error) {
	entry, locked := r.lock.Entry(s.Arch, s.Name)
	pub, err := sums.published(ctx, s)
	if err != nil {
		return Artifact{}, err
	}
	// The published digest must be the one locked: a mirror that changed
	// both the file and its checksum is caught here, before any download.
	if locked {
		want := entry.SHA512
		if pub.kind == "sha256" {
			want = entry.SHA256
		}
		if pub.hex != want {
			return Artifact{}, mismatchError(r.opts.LockPath, s.Name, s.SumURL, "published "+pub.kind, want, pub.hex)
		}
	}
	check := func(d Digests) error {
		got := d.SHA512
		if pub.kind == "sha256" {
			got = d.SHA256
		}
		if got != pub.hex {
			if s.SumKind == sumInline {
				return usererr.Errorf("the file is damaged or not the one the inventory names; check the images entry's url and sha256",
					"%s %s: the sha256 of %s does not match the inventory's:\n  inventory %s\n  got       %s",
					s.Name, s.Version, s.URL, pub.hex, got)
			}
			return usererr.Errorf("the mirror's file is damaged or tampered with; try again later or use another mirror",
				"%s %s: the %s of %s does not match the published %s:\n  published %s\n  got       %s",
				s.Name, s.Version, pub.kind, s.URL, path.Base(s.SumURL), pub.hex, got)
		}
		if locked && (d.SHA256 != entry.SHA256 || d.SHA512 != entry.SHA512) {
			if d.SHA256 != entry.SHA256 {
				return mismatchError(r.opts.LockPath, s.Name, s.URL, "sha256", entry.SHA256, d.SHA256)
			}
			return mismatchError(r.opts.LockPath, s.Name, s.URL, "sha512", entry.SHA512, d.SHA512)
		}
		return nil
	}

	fingerprint := r.f.Probe(ctx, s.URL)
	cached := func() (Artifact, bool, error) {
		key := entry.SHA256
		src, haveSrc := r.cache.readSource(s.URL)
		if key == "" && pub.kind == "sha256" {
			key = pub.hex
		}
		if key == "" && haveSrc && src.SHA512 == pub.hex {
			key = src.SHA256
		}
		d, p, ok, err := r.cache.lookup(key)
		if errors.Is(err, errCorrupted) || !ok {
			return Artifact{}, false, nil
		}
		if err != nil {
			return Artifact{}, false, err
		}
		if err := check(d); err != nil {
			return Artifact{}, false, nil
		}
		// The cached copy is trusted while the mirror's file looks the same;
		// when it changed, download again so a tampered mirror is noticed.
		if fingerprint != "" && (!haveSrc || src.Fingerprint != fingerprint) {
			return Artifact{}, false, nil
		}
		return artifactOf(s, d, p, "cache"), true, nil
	}
	if a, ok, err := cached(); err != nil || ok {
		if ok {
			r.prog.Done(s.Label, s.Version+": cached")
		}
		return a, err
	}

	ul, err := r.cache.lockURL(ctx, s.URL)
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	defer ul.release()
	// Another process may have finished it while this one waited.
	if a, ok, err := cached(); err != nil || ok {
		if ok {
			r.prog.Done(s.Label, s.Version+": cached")
		}
		return a, err
	}
	for attempt := 0; ; attempt++ {
		p, err := r.cache.openPartial(s.URL)
		if err != nil {
			return Artifact{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		resumed := p.resumed
		err = r.f.Download(ctx, s.URL, p, func(have, total int64) { r.prog.Update(s.Label, have, total) })
		if err != nil {
			p.close() // keep what arrived: the next run resumes from it
			if IsNotFound(err) {
				return Artifact{}, usererr.Errorf("check "+fieldOr(s.Field, "releases")+" in the inventory: is "+s.Version+" for "+s.Arch+" on that mirror?",
					"%s %s: %w", s.Name, s.Version, err)
			}
			return Artifact{}, fmt.Errorf("%s %s: %w", s.Name, s.Version, err)
		}
		d := p.h.sum()
		if err := check(d); err != nil {
			p.discard()
			if resumed > 0 && attempt == 0 {
				continue // the old partial may be what is wrong: once more from scratch
			}
			return Artifact{}, err
		}
		bp, err := p.commit(r.cache, d)
		if err != nil {
			return Artifact{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		if err := r.cache.writeSource(source{URL: s.URL, Fingerprint: fingerprint, Digests: d}); err != nil {
			return Artifact{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		r.prog.Done(s.Label, fmt.Sprintf("%s: downloaded and verified (%s)", s.Version, humanSize(d.Size)))
		return artifactOf(s, d, bp, "download"), nil
	}
}

// extract fills in the members of archives from the (verified) archives.
func (r *resolver) extract(specs []spec, arts []Artifact) error {
	archives := map[string]Artifact{}
	for _, a := range arts {
		if a.Name != "" && a.Member == "" {
			archives[key(a.Arch, a.Name)] = a
		}
	}
	byArchive := map[string][]int{} // by key(arch, archive)
	for i, s := range specs {
		if s.SumKind == sumMember {
			k := key(s.Arch, s.Archive)
			byArchive[k] = append(byArchive[k], i)
		}
	}
	names := make([]string, 0, len(byArchive))
	for n := range byArchive {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, ak := range names {
		idx := byArchive[ak]
		an := specs[idx[0]].Archive
		need := false
		for _, i := range idx {
			s := specs[i]
			e, ok := r.lock.Entry(s.Arch, s.Name)
			if !ok {
				need = true
				continue
			}
			d, p, ok, err := r.cache.lookup(e.SHA256)
			if err != nil && !errors.Is(err, errCorrupted) {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			if !ok || d.SHA512 != e.SHA512 {
				need = true
				continue
			}
			arts[i] = artifactOf(s, d, p, "cache")
		}
		if !need {
			continue
		}
		ar, ok := archives[ak]
		if !ok {
			return fmt.Errorf("release: %s not obtained", an)
		}
		var wanted []string
		for _, i := range idx {
			wanted = append(wanted, specs[i].Member)
		}
		got, err := extractMembers(ar.Path, an, specs[idx[0]].Field, wanted, r.cache.tmpDir())
		if err != nil {
			return err
		}
		var firstErr error
		for _, i := range idx {
			s := specs[i]
			x := got[s.Member]
			if e, ok := r.lock.Entry(s.Arch, s.Name); ok && firstErr == nil {
				if x.SHA256 != e.SHA256 {
					firstErr = mismatchError(r.opts.LockPath, s.Name, an+":"+s.Member, "sha256", e.SHA256, x.SHA256)
				} else if x.SHA512 != e.SHA512 {
					firstErr = mismatchError(r.opts.LockPath, s.Name, an+":"+s.Member, "sha512", e.SHA512, x.SHA512)
				}
			}
		}
		if firstErr != nil {
			for _, x := range got {
				removeQuiet(x.tmp)
			}
			return firstErr
		}
		for _, i := range idx {
			s := specs[i]
			x := got[s.Member]
			p, err := r.cache.commitFile(x.tmp, x.Digests)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			arts[i] = artifactOf(s, x.Digests, p, "extract")
			r.prog.Done(s.Label, fmt.Sprintf("%s: unpacked from %s (%s)", s.Version, an, humanSize(x.Size)))
		}
	}
	return nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// ErrNotCached marks an --offline failure that a download would fix: the
// lock or an artifact is not in the cache yet. Callers test it with
// errors.Is instead of reading the message.
var ErrNotCached = errors.New("not in the cache")

type notCachedError struct{ err error }

func notCached(err error) error               { return notCachedError{err} }
func (e notCachedError) Error() string        { return e.err.Error() }
func (e notCachedError) Unwrap() error        { return e.err }
func (e notCachedError) Is(target error) bool { return target == ErrNotCached }
