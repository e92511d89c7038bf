package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTraefikArtifact(t *testing.T) {
	m := newMirror(t, "v3.6.16", "v1.36.3")
	o := workerOpts(t, m)
	s, err := Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := s.Get("amd64", TraefikBinary)
	if !ok {
		t.Fatal("set has no traefik")
	}
	if data, _ := os.ReadFile(a.Path); !strings.HasPrefix(string(data), "#!fake traefik v3.7.13") {
		t.Errorf("traefik holds %q", data[:min(len(data), 30)])
	}
	tarball, _ := traefikPaths(testWorkers, "amd64")
	if !a.Install || a.Member != "traefik" || a.Version != "v3.7.13" || a.URL != m.srv.URL+"/"+tarball {
		t.Errorf("traefik artifact %+v", a)
	}
	if _, ok := s.Get("amd64", "LICENSE.md"); ok {
		t.Error("LICENSE.md taken out of the tarball")
	}
	l, _ := ReadLock(o.LockPath)
	if e, ok := l.Entry("amd64", filepath.Base(tarball)); !ok || e.Version != "v3.7.13" || e.SHA256 == "" {
		t.Errorf("lock entry for the tarball: %+v", e)
	}

	// Without the node-local load balancer there is no Traefik to fetch.
	o = workerOpts(t, m)
	o.APIServerLB = false
	s, err = Resolve(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("amd64", TraefikBinary); ok || s.Workers.Traefik != "" {
		t.Errorf("traefik fetched without the load balancer (workers %+v)", s.Workers)
	}
}

func TestTraefikChecksums(t *testing.T) {
	tarball, sums := traefikPaths(testWorkers, "amd64")
	other := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, m *mirror, o *Options)
		want  []string
	}{
		{"bad checksum", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, sums), []byte(other+"  "+filepath.Base(tarball)+"\n"))
		}, []string{"traefik_v3.7.13_linux_amd64.tar.gz v3.7.13", "does not match the published traefik_v3.7.13_checksums.txt", other}},
		{"not listed", func(t *testing.T, m *mirror, o *Options) {
			writeFile(t, filepath.Join(m.root, sums), []byte(other+"  traefik_v3.7.13_linux_arm64.tar.gz\n"))
		}, []string{"traefik_v3.7.13_linux_amd64.tar.gz", "has no line for traefik_v3.7.13_linux_amd64.tar.gz"}},
		{"no checksums file", func(t *testing.T, m *mirror, o *Options) {
			os.Remove(filepath.Join(m.root, sums))
		}, []string{"traefik_v3.7.13_linux_amd64.tar.gz", "no published checksum", "traefik_v3.7.13_checksums.txt", "installs nothing it cannot verify"}},
		{"tarball without traefik", func(t *testing.T, m *mirror, o *Options) {
			tgz := makeTarGz(t, []tarEntry{{hdr: tarHdr("LICENSE.md"), body: []byte("l")}})
			writeFile(t, filepath.Join(m.root, tarball), tgz)
			writeFile(t, filepath.Join(m.root, sums), []byte(hexSHA256(tgz)+"  "+filepath.Base(tarball)+"\n"))
		}, []string{"traefik_v3.7.13_linux_amd64.tar.gz", "missing traefik"}},
		{"no mirror", func(t *testing.T, m *mirror, o *Options) {
			o.TraefikMirror = ""
		}, []string{"no mirror for traefik (releases.traefik)"}},
		{"other version not on the mirror", func(t *testing.T, m *mirror, o *Options) {
			o.WorkerVersions.Traefik = "v3.7.14"
		}, []string{"traefik_v3.7.14_linux_amd64.tar.gz", "no published checksum"}},
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
