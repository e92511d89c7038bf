package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/remotetest"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

const etcdTar = "etcd-v3.6.16-linux-amd64.tar.gz"

// hostFetchCluster is three fresh hosts with releases.fetchOn: hosts and a
// release set whose Kubernetes binaries and etcd tarball are on https, and
// kubectl on the operator's disk (file://), all pinned in the set's lock.
func hostFetchCluster(t *testing.T, fetchOn string) *fakeCluster {
	t.Helper()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`releases:
  fetchOn: `+fetchOn+`
controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
  - {name: c3, address: 10.240.0.13}
`))
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() *hostModel {
		return &hostModel{units: map[string]remote.UnitState{}, markers: map[string]bool{},
			files: map[string]string{}, content: map[string]string{}, dirs: map[string]string{}}
	}
	fc := newFakeCluster(t, inv, Options{State: generated(t, inv)}, models(inv, fresh))
	if err := fc.ensureRendered(context.Background()); err != nil {
		t.Fatal(err)
	}
	set := &release.Set{LockPath: "/repo/hardway.lock", Lock: &release.Lock{}}
	cache := t.TempDir()
	add := func(a release.Artifact) {
		a.Arch = "amd64"
		data := append(platform.FakeELF("amd64"), "bytes of "+a.Name...)
		a.SHA256 = fmt.Sprintf("%x", sha256.Sum256(data))
		a.Size = int64(len(data))
		a.Path = filepath.Join(cache, a.Name)
		if err := os.WriteFile(a.Path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		set.Artifacts = append(set.Artifacts, a)
		set.Lock.Artifacts = append(set.Lock.Artifacts, release.LockEntry{Name: a.Name, Arch: a.Arch, URL: a.URL, Member: a.Member, SHA256: a.SHA256})
	}
	tarURL := "https://github.example/etcd/v3.6.16/" + etcdTar
	add(release.Artifact{Name: etcdTar, URL: tarURL})
	for _, f := range fc.manifest("c1").Files {
		if f.Source == nil || f.Source.Kind != units.SourceBinary {
			continue
		}
		n := f.Source.Name
		switch {
		case slices.Contains(release.EtcdBinaries, n):
			add(release.Artifact{Name: n, URL: tarURL, Member: "etcd-v3.6.16-linux-amd64/" + n, Install: true})
		case n == "kubectl":
			add(release.Artifact{Name: n, URL: "file:///mirror/kubernetes/" + n, Install: true})
		default:
			add(release.Artifact{Name: n, URL: "https://dl.example/release/v1.36.3/bin/linux/amd64/" + n, Install: true})
		}
	}
	fc.setReleaseSet(set)
	return fc
}

// With fetchOn: hosts, push plans one download per URL per host (the etcd
// tarball once for its three members), pushes what is on the operator's disk
// and everything else as before, and its plan only reads; each download is
// one command carrying the lock's pins, and sends no file content.
func TestHostFetchPlan(t *testing.T) {
	fc := hostFetchCluster(t, inventory.FetchOnHosts)
	ctx := context.Background()
	as, err := fc.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fetches, kubectlPush []plan.Action
	for _, a := range as {
		if a.Host != "c1" {
			continue
		}
		if strings.HasPrefix(a.Desc, "fetch on the host ") {
			fetches = append(fetches, a)
		}
		if strings.HasPrefix(a.Desc, "write /usr/local/bin/kubectl ") {
			kubectlPush = append(kubectlPush, a)
		}
		if strings.HasPrefix(a.Desc, "write /usr/local/bin/kube-apiserver ") || strings.HasPrefix(a.Desc, "write /usr/local/bin/etcd ") {
			t.Errorf("pushed although the host fetches it: %s", a.Desc)
		}
	}
	// etcd's tarball, apiserver, controller-manager, scheduler
	if len(fetches) != 4 || len(kubectlPush) != 1 {
		t.Fatalf("c1: %d fetches, %d kubectl pushes:\n%s", len(fetches), len(kubectlPush), strings.Join(descs(as), "\n"))
	}
	var etcdFetch plan.Action
	for _, a := range fetches {
		if strings.Contains(a.Desc, etcdTar) {
			etcdFetch = a
		}
		if !a.Parallel || a.Kind != plan.Write || !strings.Contains(a.Desc, "sha256 checked on the host against hardway.lock") {
			t.Errorf("fetch action: %+v", a)
		}
	}
	for _, p := range []string{"/usr/local/bin/etcd", "/usr/local/bin/etcdctl", "/usr/local/bin/etcdutl"} {
		if !strings.Contains(etcdFetch.Desc, p) {
			t.Errorf("the etcd tarball's fetch does not install %s: %s", p, etcdFetch.Desc)
		}
	}
	if !slices.Contains(etcdFetch.Restarts, units.Etcd) {
		t.Errorf("etcd fetch restarts %v", etcdFetch.Restarts)
	}
	for _, h := range fc.Inv.ControlPlane {
		cmds := fc.commands(h.Name)
		assertReadOnly(t, h.Name, cmds)
		for _, c := range cmds {
			if strings.Contains(c, "curl") || strings.Contains(c, "wget") {
				t.Errorf("%s: the plan downloads: %q", h.Name, c)
			}
		}
	}

	before := len(fc.hosts["c1"].Calls())
	if err := etcdFetch.Do(ctx); err != nil {
		t.Fatal(err)
	}
	calls := fc.hosts["c1"].Calls()[before:]
	if len(calls) != 1 || len(calls[0].Stdin) != 0 {
		t.Fatalf("the fetch ran %d commands (stdin %d bytes)", len(calls), len(calls[0].Stdin))
	}
	cmd := calls[0].Cmd
	set := fc.releaseSet()
	for _, n := range append([]string{etcdTar}, release.EtcdBinaries...) {
		a, _ := set.Get("amd64", n)
		if !strings.Contains(cmd, a.SHA256) {
			t.Errorf("the host command lacks %s's pin", n)
		}
	}
	marker := "touch -- " + path.Join(restartDir, units.Etcd)
	for _, want := range []string{marker, "sha256sum", "tar -xzf", "https://github.example/etcd/v3.6.16/" + etcdTar, sumsCache} {
		if !strings.Contains(cmd, want) {
			t.Errorf("the host command lacks %q:\n%s", want, cmd)
		}
	}
	if strings.Index(cmd, marker) > strings.Index(cmd, "\nget ") || strings.LastIndex(cmd, "check ") > strings.Index(cmd, "mv -f") {
		t.Errorf("order: markers, download, every check, then install:\n%s", cmd)
	}
}

// The default (operator) pushes every file as before: no host downloads.
func TestHostFetchOffByDefault(t *testing.T) {
	fc := hostFetchCluster(t, inventory.FetchOnOperator)
	as, err := fc.planPush(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if strings.HasPrefix(a.Desc, "fetch on the host") {
			t.Fatalf("fetchOn: operator planned %s", a.Desc)
		}
	}
}

// A host that downloads other bytes than pinned: the action fails with the
// host's report and a hint that names the lock and the way back.
func TestHostFetchDigestMismatch(t *testing.T) {
	fc := hostFetchCluster(t, inventory.FetchOnHosts)
	ctx := context.Background()
	// c2 answers the download with its check's report (the fake answers
	// with the first expectation that matches: this one, then the model).
	c2 := remotetest.New(t, "c2")
	c2.ExpectMatch(`^# fetch kube-apiserver on the host`).
		Fails(65, "hardway-digest-mismatch\tkube-apiserver\t12\t"+strings.Repeat("ab", 32)+"\n")
	c2.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return fc.model["c2"].answer(cmd) })
	fc.hosts["c2"] = c2
	as, err := fc.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fetch plan.Action
	for _, a := range as {
		if a.Host == "c2" && strings.Contains(a.Desc, "fetch on the host kube-apiserver") {
			fetch = a
		}
	}
	if fetch.Do == nil {
		t.Fatalf("no fetch of kube-apiserver on c2:\n%s", strings.Join(descs(as), "\n"))
	}
	err = fetch.Do(ctx)
	var de *remote.DigestError
	if !errors.As(err, &de) || de.Got != strings.Repeat("ab", 32) || de.Host != "c2" {
		t.Fatalf("want a DigestError, got %v", err)
	}
	hint := usererr.HintOf(err)
	if !strings.Contains(hint, "serves other bytes than hardway.lock pins") || !strings.Contains(hint, "releases.fetchOn: operator") {
		t.Errorf("hint %q", hint)
	}
}

// Preflight names a host without curl or wget (or without sha256sum, tar,
// gzip) when the hosts fetch, and asks nothing when they do not.
func TestHostFetchPreflightTools(t *testing.T) {
	fc := hostFetchCluster(t, inventory.FetchOnHosts)
	if !strings.Contains(fc.fetchToolsScript(), "command -v $t") {
		t.Fatalf("script %q", fc.fetchToolsScript())
	}
	if p := fc.fetchToolProblems("fetch-tool wget\nfetch-tool sha256sum\nfetch-tool tar\nfetch-tool gzip\n"); len(p) != 0 {
		t.Errorf("wget is enough: %v", p)
	}
	p := fc.fetchToolProblems("fetch-tool sha256sum\nfetch-tool gzip\n")
	if len(p) != 2 || !strings.Contains(p[0], "neither curl nor wget") || !strings.Contains(p[0], "releases.fetchOn: operator") || !strings.Contains(p[1], "no tar") {
		t.Errorf("problems %q", p)
	}
	off := hostFetchCluster(t, inventory.FetchOnOperator)
	if off.fetchToolsScript() != "" || len(off.fetchToolProblems("")) != 0 {
		t.Error("fetchOn: operator asks for fetch tools")
	}
}

// A host without curl and wget: the fetch fails naming it, with the way out.
func TestHostFetchNoTool(t *testing.T) {
	fc := hostFetchCluster(t, inventory.FetchOnHosts)
	ctx := context.Background()
	c3 := remotetest.New(t, "c3")
	c3.ExpectMatch(`^# fetch kube-scheduler on the host`).Fails(69, "neither curl nor wget on this host\n")
	c3.ExpectMatch(`(?s).*`).AnyTimes().RespondWith(func(cmd string, _ []byte) (string, error) { return fc.model["c3"].answer(cmd) })
	fc.hosts["c3"] = c3
	as, err := fc.planPush(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Host == "c3" && strings.Contains(a.Desc, "fetch on the host kube-scheduler") {
			err = a.Do(ctx)
			if !errors.Is(err, remote.ErrNoFetchTool) || !strings.Contains(usererr.HintOf(err), "install curl on the host, or set releases.fetchOn: operator") {
				t.Fatalf("%v (hint %q)", err, usererr.HintOf(err))
			}
			return
		}
	}
	t.Fatalf("no fetch of kube-scheduler on c3:\n%s", strings.Join(descs(as), "\n"))
}
