package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/units"
)

// controlPlaneMirror lays out a file:// mirror of the control-plane
// binaries and etcd for arches, each file an ELF header of its arch
// followed by its name, with the published checksums.
func controlPlaneMirror(t *testing.T, arches ...string) string {
	t.Helper()
	root := t.TempDir()
	put := func(p string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var sums strings.Builder
	for _, arch := range arches {
		for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
			data := append(platform.FakeELF(arch), b+" v1.36.3"...)
			s := sha512.Sum512(data)
			p := filepath.Join(root, "kubernetes/release/v1.36.3/bin/linux", arch, b)
			put(p, data)
			put(p+".sha512", []byte(hex.EncodeToString(s[:])))
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		for _, b := range release.EtcdBinaries {
			data := append(platform.FakeELF(arch), b+" v3.6.16"...)
			tw.WriteHeader(&tar.Header{Name: "etcd-v3.6.16-linux-" + arch + "/" + b, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))})
			tw.Write(data)
		}
		tw.Close()
		zw.Close()
		name := "etcd-v3.6.16-linux-" + arch + ".tar.gz"
		put(filepath.Join(root, "etcd/v3.6.16", name), buf.Bytes())
		fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(buf.Bytes()), name)
	}
	put(filepath.Join(root, "etcd/v3.6.16/SHA256SUMS"), []byte(sums.String()))
	return root
}

// The fetch step pins the set once; the next up, with nothing changed,
// plans nothing and leaves hardway.lock as it is: for one architecture (the
// lock's old format) and for two.
func TestFetchStepNoOpPerArch(t *testing.T) {
	for _, tc := range []struct {
		name, c3Arch string
		head         string
	}{
		{"amd64", "", "\narch: amd64\nartifacts:\n"},
		{"amd64 and arm64", "arm64", "\narches:\n  - amd64\n  - arm64\nartifacts:\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := controlPlaneMirror(t, "amd64", "arm64")
			dir := t.TempDir()
			c3 := "{name: c3, address: 10.240.0.13}"
			if tc.c3Arch != "" {
				c3 = "{name: c3, address: 10.240.0.13, arch: " + tc.c3Arch + "}"
			}
			inv, err := inventory.Parse("inv.yaml", filepath.Join(dir, "inv.yaml"), []byte(`releases:
  kubernetes: file://`+root+`/kubernetes
  etcd: file://`+root+`/etcd
controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
  - `+c3+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			ro := release.Options{CacheDir: filepath.Join(dir, "cache")}
			ctx := context.Background()

			as, err := New(inv, Options{Release: ro}).planFetch(ctx, nil)
			if err != nil || len(as) != 1 {
				t.Fatalf("first up: %v %q", err, descs(as))
			}
			if err := as[0].Do(ctx); err != nil {
				t.Fatal(err)
			}
			lock, err := os.ReadFile(inv.LockPath())
			if err != nil || !strings.Contains(string(lock), tc.head) {
				t.Fatalf("lock %v:\n%s", err, lock)
			}
			fi1, _ := os.Stat(inv.LockPath())

			c := New(inv, Options{Release: ro, State: generated(t, inv)})
			if as, err := c.planFetch(ctx, nil); err != nil || len(as) != 0 {
				t.Fatalf("second up: %v %q", err, descs(as))
			}
			if fi2, _ := os.Stat(inv.LockPath()); !fi2.ModTime().Equal(fi1.ModTime()) {
				t.Error("the lock was written again")
			}

			// The set found in the cache feeds the push: c3 gets its own arch's files.
			if err := c.ensureRendered(ctx); err != nil {
				t.Fatal(err)
			}
			m := c.manifest("c3")
			files, err := c.remoteFiles(m)
			if err != nil {
				t.Fatal(err)
			}
			want := inv.HostArch(inv.ControlPlane[2])
			for i, f := range files {
				if s := m.Files[i].Source; s != nil && s.Kind == units.SourceBinary {
					if err := platform.CheckELF(f.Source, want); err != nil {
						t.Errorf("c3: %s: %v", f.Path, err)
					}
				}
			}
		})
	}
}
