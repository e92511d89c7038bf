package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// releases.fetchOn: hosts. Instead of streaming each release file from the
// operator's cache to every host (the operator's link then carries the
// release set once per host), the push step has each host download what it
// lacks from the release URL itself. The host checks size and sha256 of every
// download against hardway.lock's pin with its own sha256sum before it
// unpacks or installs anything; a mismatch deletes the download and stops
// the run. Archives (etcd, containerd, CNI plugins, crictl, Traefik) are
// downloaded whole and their members unpacked on the host with tar and
// checked against their own pins, so the installed files are byte for byte
// the ones the operator's path installs. Files whose URL the hosts cannot
// use (file://, a path on the operator's machine) are pushed as before.

// hostFetches says whether artifact a is downloaded by the hosts.
func (c *Cluster) hostFetches(a release.Artifact) bool {
	if c.Inv.Releases.FetchOn != inventory.FetchOnHosts {
		return false
	}
	u, err := url.Parse(a.URL)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// hostFetch collects one host's downloads while its push is planned: one
// per URL, so an archive is downloaded once for all its members.
type hostFetch struct {
	c     *Cluster
	host  string
	arch  string // the host's: it downloads the artifacts for it
	order []string
	byURL map[string]*fetchAction
}

type fetchAction struct {
	dl       remote.Download
	markers  []string
	restarts []string
}

func (c *Cluster) newHostFetch(host, arch string) *hostFetch {
	return &hostFetch{c: c, host: host, arch: arch, byURL: map[string]*fetchAction{}}
}

// add takes file f of the manifest (rf is it resolved, markers its restart
// markers) when its content comes from an artifact the host downloads
// itself; false leaves it to the push.
func (hf *hostFetch) add(mf units.File, rf remote.File, markers []string) (bool, error) {
	set := hf.c.releaseSet()
	if mf.Source == nil || mf.Source.Kind != units.SourceBinary || set == nil {
		return false, nil
	}
	a, ok := set.Get(hf.arch, mf.Source.Name)
	if !ok || !hf.c.hostFetches(a) {
		return false, nil
	}
	// The pins are hardway.lock's: what the host checks is what the lock
	// file says, whatever the operator's cache holds.
	pin, err := lockPin(set, a)
	if err != nil {
		return false, err
	}
	file := remote.File{Path: rf.Path, Mode: rf.Mode, Owner: rf.Owner, Group: rf.Group, SHA256: pin.SHA256, Size: a.Size}
	dl := remote.Download{Name: a.Name, URL: a.URL, SHA256: pin.SHA256, Size: a.Size}
	member := ""
	if a.Member != "" {
		ar, ok := set.ArchiveOf(a)
		if !ok {
			return false, fmt.Errorf("release set: %s has no archive", a.Name)
		}
		arPin, err := lockPin(set, ar)
		if err != nil {
			return false, err
		}
		dl = remote.Download{Name: ar.Name, URL: ar.URL, SHA256: arPin.SHA256, Size: ar.Size, Archive: true}
		member = a.Member
	}
	fa := hf.byURL[dl.URL]
	if fa == nil {
		fa = &fetchAction{dl: dl}
		hf.byURL[dl.URL] = fa
		hf.order = append(hf.order, dl.URL)
	}
	fa.dl.Installs = append(fa.dl.Installs, remote.Install{File: file, Member: member})
	fa.markers = append(fa.markers, markers...)
	for _, comp := range mf.Components {
		if !slices.Contains(fa.restarts, comp) {
			fa.restarts = append(fa.restarts, comp)
		}
	}
	return true, nil
}

// lockPin is the lock's entry for a, which must agree with the set.
func lockPin(set *release.Set, a release.Artifact) (release.LockEntry, error) {
	e, ok := set.Lock.Entry(a.Arch, a.Name)
	if !ok || e.SHA256 != a.SHA256 {
		return e, usererr.Errorf("run 'hardway fetch' to pin the release set in "+usererr.Quote(set.LockPath),
			"%s is not pinned in %s (or pinned to other bytes than the cache holds)", a.Name, set.LockPath)
	}
	return e, nil
}

// actions are the host's downloads, each one command on the host.
func (hf *hostFetch) actions(sh remote.Host) []plan.Action {
	var out []plan.Action
	for _, u := range hf.order {
		fa := hf.byURL[u]
		var paths []string
		for _, in := range fa.dl.Installs {
			paths = append(paths, in.File.Path)
		}
		desc := fmt.Sprintf("fetch on the host %s → %s (from %s; sha256 checked on the host against %s before install)",
			fa.dl.Name, strings.Join(paths, ", "), u, lockName)
		out = append(out, plan.Action{Host: hf.host, Kind: plan.Write, Desc: desc, Restarts: fa.restarts,
			Parallel: true, Lane: u, Do: func(ctx context.Context) error {
				return hostFetchError(remote.FetchOnHost(ctx, sh, fa.dl, remote.PutOptions{Markers: fa.markers, Cache: sumsCache}))
			}})
	}
	return out
}

const lockName = release.LockFileName

// hostFetchError gives a failed download on a host its hint.
func hostFetchError(err error) error {
	var de *remote.DigestError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &de):
		return usererr.New(err, "the server at "+de.URL+" serves other bytes than "+lockName+" pins: do not use it. "+
			"Check the mirror in the inventory's releases (or the host's proxy), or set releases.fetchOn: operator to push this machine's verified copies")
	case errors.Is(err, remote.ErrNoFetchTool):
		return usererr.New(err, "install curl on the host, or set releases.fetchOn: operator to push the files over SSH")
	}
	return usererr.New(err, "the host could not download it: check that it reaches the release URL (DNS, proxy, firewall), "+
		"or set releases.fetchOn: operator to push the files over SSH")
}

// fetchToolsScript asks a host for the tools a host fetch runs (preflight).
func (c *Cluster) fetchToolsScript() string {
	if c.Inv.Releases.FetchOn != inventory.FetchOnHosts {
		return ""
	}
	return "for t in curl wget sha256sum tar gzip; do command -v $t >/dev/null 2>&1 && echo \"fetch-tool $t\"; done; true\n"
}

// fetchToolProblems names what a host lacks to fetch for itself.
func (c *Cluster) fetchToolProblems(out string) []string {
	if c.Inv.Releases.FetchOn != inventory.FetchOnHosts {
		return nil
	}
	have := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(l, "fetch-tool "); ok {
			have[strings.TrimSpace(t)] = true
		}
	}
	var p []string
	if !have["curl"] && !have["wget"] {
		p = append(p, "neither curl nor wget: releases.fetchOn: hosts needs one to download the release files (install curl, or set releases.fetchOn: operator)")
	}
	var missing []string
	for _, t := range []string{"sha256sum", "tar", "gzip"} {
		if !have[t] {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		p = append(p, "no "+strings.Join(missing, ", ")+": releases.fetchOn: hosts checks and unpacks the downloads with them (install coreutils, tar, gzip, or set releases.fetchOn: operator)")
	}
	return p
}
