package release

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func workerOpts(t *testing.T, m *mirror) Options {
	o := m.httpOpts(t, "v1.36.3")
	o.Workers = true
	o.APIServerLB = true // the default with workers and three control-plane hosts
	return o
}

func TestWorkerArtifacts(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, s)
	if s.Workers == nil || *s.Workers != testWorkers {
		t.Errorf("set's worker versions %+v", s.Workers)
	}
	// Every name of the shared contract is in the set, unpacked from the right file.
	for n, prefix := range map[string]string{
		"kubelet": "#!fake kubelet v1.36.3", "kube-proxy": "#!fake kube-proxy v1.36.3",
		"containerd": "#!fake containerd v2.4.2", "containerd-shim-runc-v2": "#!fake containerd-shim-runc-v2 v2.4.2",
		"ctr": "#!fake ctr v2.4.2", "runc": "#!fake runc v1.5.3", "crictl": "#!fake crictl v1.37.0",
		"cni-bridge": "#!fake bridge v1.10.0", "cni-host-local": "#!fake host-local v1.10.0",
		"cni-loopback": "#!fake loopback v1.10.0", "cni-portmap": "#!fake portmap v1.10.0",
	} {
		a, ok := s.Get("amd64", n)
		if !ok {
			t.Errorf("set has no %s", n)
			continue
		}
		if data, _ := os.ReadFile(a.Path); !strings.HasPrefix(string(data), prefix) {
			t.Errorf("%s holds %q, want %q...", n, data[:min(len(data), 30)], prefix)
		}
		if wantInstall := !strings.HasPrefix(n, CNIPrefix); a.Install != wantInstall {
			t.Errorf("%s: install %v, want %v", n, a.Install, wantInstall)
		}
	}
	if _, ok := s.Get("amd64", "containerd-stress"); ok {
		t.Error("containerd-stress taken out of the tarball")
	}
	if a, _ := s.Get("amd64", "runc"); a.URL != m.srv.URL+"/runc/v1.5.3/runc.amd64" {
		t.Errorf("runc URL %s", a.URL)
	}
	imgs := s.Images()
	if len(imgs) != 2 || imgs[0].Name != "image:registry.k8s.io/pause:3.10.2" || imgs[1].Name != "image:hardway.local/hello:v1" {
		t.Fatalf("images %v", imgs)
	}
	for _, a := range imgs {
		data, _ := os.ReadFile(a.Path)
		if a.Image.ID != imageID(t, data).String() || a.Image.Arch != "amd64" || a.Image.OS != "linux" || !strings.HasPrefix(a.Image.ID, "sha256:") {
			t.Errorf("%s: image info %+v", a.Name, a.Image)
		}
		if a.Install {
			t.Errorf("%s marked for install", a.Name)
		}
	}
	l, _ := ReadLock(o.LockPath)
	if e, ok := l.Entry("amd64", "cni-portmap"); !ok || e.Member != "portmap" || e.Version != "v1.10.0" {
		t.Errorf("lock entry for cni-portmap: %+v", e)
	}
	if e, ok := l.Entry("amd64", "image:registry.k8s.io/pause:3.10.2"); !ok || e.SHA256 != m.imageSHA256(t, "pause.tar") || e.Version != "3.10.2" {
		t.Errorf("lock entry for pause: %+v", e)
	}

	// Again: from the cache, image info and all.
	s2, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range s2.Artifacts {
		if a.Source != "cache" {
			t.Errorf("second run: %s from %s", a.Name, a.Source)
		}
		if (a.Image == nil) != (s.Artifacts[i].Image == nil) || a.Image != nil && *a.Image != *s.Artifacts[i].Image {
			t.Errorf("second run: %s image info %+v, first %+v", a.Name, a.Image, s.Artifacts[i].Image)
		}
	}
	if s2.LockWritten {
		t.Error("second run rewrote the lock")
	}
}

func TestWorkerChecksums(t *testing.T) {
	ctrd, runc, runcSums, cni, crictl := workerPaths(testWorkers, "amd64")
	other := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, m *mirror, o *Options)
		want  []string
	}{
		{"containerd bad sha256sum", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, ctrd+".sha256sum"), []byte(other+"  "+filepath.Base(ctrd)+"\n"))
		}, []string{"containerd-2.4.2-linux-amd64.tar.gz v2.4.2", "does not match the published", other}},
		{"containerd missing sha256sum", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, ctrd+".sha256sum"))
		}, []string{"containerd-2.4.2-linux-amd64.tar.gz", "no published checksum", ".sha256sum", "404", "installs nothing it cannot verify"}},
		{"containerd checksum of another file", func(t *testing.T, m *mirror, o *Options) {
			data, _ := os.ReadFile(filepath.Join(m.root, ctrd))
			writeFile(t, filepath.Join(m.root, ctrd+".sha256sum"), []byte(hexSHA256(data)+"  containerd-static-2.4.2-linux-amd64.tar.gz\n"))
		}, []string{"containerd-2.4.2-linux-amd64.tar.gz", "checksum of containerd-static", "releases.containerd"}},
		{"runc bad line", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, runcSums), []byte(other+"  runc.amd64\n"))
		}, []string{"runc v1.5.3", "does not match the published runc.sha256sum", other}},
		{"runc not listed", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, runcSums), []byte(other+"  runc.arm64\n"))
		}, []string{"runc v1.5.3", "runc.sha256sum has no line for runc.amd64"}},
		{"runc missing sums", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, runcSums))
		}, []string{"runc v1.5.3", "no published checksum", "runc.sha256sum"}},
		{"CNI bad sha512", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, cni+".sha512"), []byte(strings.Repeat("cd", 64)+"  "+filepath.Base(cni)+"\n"))
		}, []string{"cni-plugins-linux-amd64-v1.10.0.tgz v1.10.0", "sha512", "does not match the published", strings.Repeat("cd", 64)}},
		{"CNI missing sha512", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, cni+".sha512"))
		}, []string{"cni-plugins-linux-amd64-v1.10.0.tgz", "no published checksum", ".tgz.sha512"}},
		{"crictl bad sha256", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, crictl+".sha256"), []byte(other))
		}, []string{"crictl-v1.37.0-linux-amd64.tar.gz v1.37.0", "does not match the published", other}},
		{"crictl malformed sha256", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, crictl+".sha256"), []byte("<html>"))
		}, []string{"crictl-v1.37.0-linux-amd64.tar.gz", "not a sha256 digest"}},
		{"crictl missing sha256", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, crictl+".sha256"))
		}, []string{"crictl-v1.37.0-linux-amd64.tar.gz", "no published checksum"}},
		{"image bad SHA256SUMS", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, "images", "SHA256SUMS"), []byte(other+"  pause.tar\n"))
		}, []string{"image:registry.k8s.io/pause:3.10.2", "does not match the published SHA256SUMS", other}},
		{"image not in SHA256SUMS", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, "images", "SHA256SUMS"), []byte(other+"  coredns.tar\n"))
		}, []string{"image:registry.k8s.io/pause:3.10.2", "has no line for pause.tar", "sha256 in the inventory"}},
		{"image no SHA256SUMS", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, "images", "SHA256SUMS"))
		}, []string{"image:registry.k8s.io/pause:3.10.2", "no published checksum", "images/SHA256SUMS"}},
		{"image bad inline sha256", func(t *testing.T, m *mirror, o *Options) {
			o.Images[1].SHA256 = other
		}, []string{"image:hardway.local/hello:v1", "does not match the inventory's", other}},
		{"image is not a docker-archive", func(t *testing.T, m *mirror, o *Options) {
			m.addImage(t, "pause.tar", makeTarGz(t, []tarEntry{{hdr: tarHdr("pause"), body: []byte("x")}}), true)
		}, []string{"image:registry.k8s.io/pause:3.10.2", "not a docker-archive", "docker save"}},
		{"image holds another name", func(t *testing.T, m *mirror, o *Options) {
			m.addImage(t, "pause.tar", testImage(t, "registry.k8s.io/pause:3.9", "amd64", "pause"), true)
		}, []string{"image:registry.k8s.io/pause:3.10.2", "holds registry.k8s.io/pause:3.9, not registry.k8s.io/pause:3.10.2"}},
		{"image for another arch", func(t *testing.T, m *mirror, o *Options) {
			m.addImage(t, "pause.tar", testImage(t, "registry.k8s.io/pause:3.10.2", "arm64", "pause"), true)
		}, []string{"image:registry.k8s.io/pause:3.10.2", "linux/arm64", "workers it is listed for are linux/amd64", "set arch: arm64 on the images entry"}},
		{"CNI tarball with a link", func(t *testing.T, m *mirror, o *Options) {
			tgz := makeTarGz(t, []tarEntry{{hdr: tarHdr("./bridge"), body: []byte("b")},
				{hdr: tar.Header{Name: "./host-local", Typeflag: tar.TypeSymlink, Linkname: "/usr/bin/sh"}}})
			m.setSidecar(t, cni, tgz, ".sha512", hexSHA512, true)
		}, []string{"cni-plugins-linux-amd64-v1.10.0.tgz", "is a link", "releases.cniPlugins"}},
		{"containerd tarball without ctr", func(t *testing.T, m *mirror, o *Options) {
			tgz := makeTarGz(t, []tarEntry{{hdr: tarHdr("bin/containerd"), body: []byte("c")}, {hdr: tarHdr("bin/containerd-shim-runc-v2"), body: []byte("s")}})
			m.setSidecar(t, ctrd, tgz, ".sha256sum", hexSHA256, true)
		}, []string{"containerd-2.4.2-linux-amd64.tar.gz", "missing bin/ctr"}},
		{"runc 404", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, runc))
		}, []string{"runc v1.5.3", "404", "check releases.runc", "is v1.5.3 for amd64 on that mirror"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMirror(t, "v3.6.16", "v1.36.3")
			o := workerOpts(t, m)
			o.Fetcher.Attempts = 1
			tc.setup(t, m, &o)
			_, err := Resolve(ctx, o)
			wantErr(t, err, tc.want...)
			if _, err := os.Stat(o.LockPath); err == nil {
				t.Error("a failed resolve wrote the lock")
			}
		})
	}
}

func TestWorkerLockMismatch(t *testing.T) {
	ctrd, _, _, _, _ := workerPaths(testWorkers, "amd64")
	for _, tc := range []struct {
		name   string
		fresh  bool
		tamper func(t *testing.T, m *mirror, o *Options)
		want   func(m *mirror) []string
	}{
		{"containerd tarball and checksum replaced", true, func(t *testing.T, m *mirror, o *Options) {
			m.setSidecar(t, ctrd, makeTarGz(t, []tarEntry{{hdr: tarHdr("bin/containerd"), body: []byte("evil")}}), ".sha256sum", hexSHA256, true)
		}, func(m *mirror) []string {
			data, _ := os.ReadFile(filepath.Join(m.root, ctrd))
			return []string{"containerd-2.4.2-linux-amd64.tar.gz", "does not match", hexSHA256(data), "locked", "--update-lock"}
		}},
		{"image and SHA256SUMS replaced", false, func(t *testing.T, m *mirror, o *Options) {
			m.addImage(t, "pause.tar", testImage(t, "registry.k8s.io/pause:3.10.2", "amd64", "evil"), true)
		}, func(m *mirror) []string {
			return []string{"image:registry.k8s.io/pause:3.10.2", "published sha256", m.imageSHA256(nil, "pause.tar"), "--update-lock"}
		}},
		{"inventory names other image bytes", false, func(t *testing.T, m *mirror, o *Options) {
			o.Images[1].SHA256 = strings.Repeat("ef", 32)
		}, func(m *mirror) []string {
			return []string{"image:hardway.local/hello:v1", "the inventory's images entry", strings.Repeat("ef", 32), m.imageSHA256(nil, "hello.tar"), "--update-lock"}
		}},
		{"containerd version moved", false, func(t *testing.T, m *mirror, o *Options) {
			w := testWorkers
			w.Containerd = "v2.4.3"
			m.addWorkerComponents(t, w, "amd64")
			o.WorkerVersions = w
		}, func(m *mirror) []string {
			return []string{"asks for containerd v2.4.3", "pins v2.4.2", "--update-lock"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMirror(t, "v3.6.16", "v1.36.3")
			o := workerOpts(t, m)
			o.Fetcher.Attempts = 1
			if _, err := Resolve(ctx, o); err != nil {
				t.Fatal(err)
			}
			lock1, _ := os.ReadFile(o.LockPath)
			time.Sleep(10 * time.Millisecond)
			tc.tamper(t, m, &o)
			if tc.fresh {
				o.CacheDir = t.TempDir()
			}
			want := tc.want(m)
			// The locked digest is named too.
			l, _ := ParseLock("x", lock1)
			for _, e := range l.Artifacts {
				if strings.Contains(want[0], e.Name) && e.Name == want[0] {
					want = append(want, e.SHA256)
				}
			}
			_, err := Resolve(ctx, o)
			wantErr(t, err, want...)
			if lock2, _ := os.ReadFile(o.LockPath); string(lock1) != string(lock2) {
				t.Error("a refused resolve changed the lock")
			}
			// Moving on purpose works where the mirror is whole.
			if tc.name == "image and SHA256SUMS replaced" || tc.name == "containerd version moved" {
				o.UpdateLock = true
				if _, err := Resolve(ctx, o); err != nil {
					t.Fatalf("--update-lock: %v", err)
				}
			}
		})
	}
}

func TestWorkerOfflineAndBundle(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "release.tar")
	if err := WriteBundle(s, bundle); err != nil {
		t.Fatal(err)
	}
	m.srv.Close() // no network from here

	t.Run("offline from the cache", func(t *testing.T) {
		o := o
		o.Offline = true
		got, err := Resolve(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		checkSet(t, got)
		if !slices.Equal(names(got), names(s)) {
			t.Errorf("offline set %v, want %v", names(got), names(s))
		}
		if a, _ := got.Get("amd64", "image:hardway.local/hello:v1"); a.Image == nil || a.Source != "cache" {
			t.Errorf("offline image: %+v", a)
		}
	})
	t.Run("offline, image not cached", func(t *testing.T) {
		o := o
		o.Offline = true
		pause, _ := s.Get("amd64", "image:registry.k8s.io/pause:3.10.2")
		os.Remove(pause.Path)
		_, err := Resolve(ctx, o)
		wantErr(t, err, "1 artifact(s) missing", "image:registry.k8s.io/pause:3.10.2 3.10.2 amd64 (sha256 "+pause.SHA256+"): not in the cache")
	})
	t.Run("bundle round trip", func(t *testing.T) {
		dst := workerOpts(t, m)
		got, err := ImportBundle(ctx, bundle, dst)
		if err != nil {
			t.Fatal(err)
		}
		checkSet(t, got)
		if !slices.Equal(names(got), names(s)) {
			t.Fatalf("imported %v, want %v", names(got), names(s))
		}
		for i, a := range got.Artifacts {
			if a.SHA256 != s.Artifacts[i].SHA256 {
				t.Errorf("%s: other bytes after the round trip", a.Name)
			}
		}
		if a, _ := got.Get("amd64", "image:registry.k8s.io/pause:3.10.2"); a.Image == nil || a.Image.ID == "" {
			t.Errorf("imported image without info: %+v", a)
		}
		l1, _ := os.ReadFile(o.LockPath)
		if l2, _ := os.ReadFile(dst.LockPath); string(l1) != string(l2) {
			t.Error("imported lock differs")
		}
	})
	t.Run("bundle entry names", func(t *testing.T) {
		f, _ := os.Open(bundle)
		defer f.Close()
		tr := tar.NewReader(f)
		var got []string
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			got = append(got, h.Name)
		}
		if !slices.Contains(got, "artifacts/amd64/image:registry.k8s.io%2Fpause:3.10.2") || !slices.Contains(got, "artifacts/amd64/runc") {
			t.Errorf("bundle entries %v", got)
		}
	})
}

// What an image tarball holds is kept in the cache's image memo under its
// sha256, so a later run does not read its layers again; a plan (NoLockWrite)
// reads the memo but writes none.
func TestImageMemo(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	o.NoLockWrite = true
	_, _ = Resolve(ctx, o) // whether it resolves or not, it must not write the memo
	memo := filepath.Join(o.CacheDir, "images")
	if _, err := os.Stat(memo); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a plan wrote the image memo: %v", err)
	}
	o.NoLockWrite = false
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(memo)
	if err != nil || strings.Count(string(b), "\n") != 2 {
		t.Fatalf("image memo after a run: %q %v", b, err)
	}
	// The memo answers: a line naming another ID for pause's tarball is
	// what the next run reports (nothing reads the tarball again).
	pause, _ := s.Get("amd64", "image:registry.k8s.io/pause:3.10.2")
	fake := "sha256:" + strings.Repeat("ab", 32)
	lines := strings.Replace(string(b), pause.Image.ID, fake, 1)
	if err := os.WriteFile(memo, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s2.Get("amd64", "image:registry.k8s.io/pause:3.10.2"); p.Image.ID != fake {
		t.Errorf("second run inspected the tarball again: %s", p.Image.ID)
	}
	// A damaged memo costs an inspection, never a wrong answer from junk.
	if err := os.WriteFile(memo, []byte(pause.SHA256+" registry.k8s.io/pause:3.10.2\tjunk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s3.Get("amd64", "image:registry.k8s.io/pause:3.10.2"); p.Image.ID != pause.Image.ID {
		t.Errorf("after a damaged memo: %s, want %s", p.Image.ID, pause.Image.ID)
	}
}
