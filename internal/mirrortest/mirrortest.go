// Package mirrortest hands tests the real release binaries of the mirror
// that hack/mirror/build.sh lays out, each verified against its published
// digest before anything runs it.
//
// Policy, the same for every test: without HARDWAY_MIRROR set and without
// the default mirror, the test is skipped (a plain `go test` on a laptop);
// with HARDWAY_MIRROR set — `make test` always sets it — a missing or
// tampered binary fails the test.
package mirrortest

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The versions the mirror holds.
const (
	Kubernetes = "v1.36.3"
	Etcd       = "v3.6.16"
	Containerd = "v2.4.2"
	Runc       = "v1.5.3"
	Traefik    = "v3.7.13"
	PauseImage = "registry.k8s.io/pause:3.10.2" // images/pause-3.10.2.tar
)

// PreviousKubernetes is the minor before Kubernetes whose binaries the
// mirror also holds (the Makefile's HARDWAY_PREVIOUS_K8S): the upgrade
// test starts there.
func PreviousKubernetes() string {
	if v := os.Getenv("HARDWAY_PREVIOUS_K8S"); v != "" {
		return v
	}
	return "v1.35.4"
}

// Dir is $HARDWAY_MIRROR or /var/tmp/hardway/mirror.
func Dir() string {
	if d := os.Getenv("HARDWAY_MIRROR"); d != "" {
		return d
	}
	return "/var/tmp/hardway/mirror"
}

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + ": build it with 'make mirror' (hack/mirror/build.sh)"
	if os.Getenv("HARDWAY_MIRROR") == "" {
		t.Skip(msg)
	}
	t.Fatal(msg)
}

// KubeBinary is the path of a Kubernetes binary in the mirror, after its
// sha256 matched the published .sha256.
func KubeBinary(t testing.TB, name string) string {
	t.Helper()
	return KubeBinaryAt(t, Kubernetes, name)
}

// KubeBinaryAt is KubeBinary of another version the mirror holds.
func KubeBinaryAt(t testing.TB, version, name string) string {
	t.Helper()
	p := filepath.Join(Dir(), "kubernetes", "release", version, "bin", "linux", runtime.GOARCH, name)
	if _, err := os.Stat(p); err != nil {
		missing(t, "no %s in the release mirror (%s)", name, p)
	}
	want, err := os.ReadFile(p + ".sha256")
	if err != nil {
		t.Fatalf("%s has no .sha256 beside it: refusing to run an unverified binary", p)
	}
	if got := fileSHA256(t, p); got != strings.TrimSpace(string(want)) {
		t.Fatalf("%s: sha256 %s does not match %s.sha256", p, got, p)
	}
	return p
}

// EtcdBinaries verifies the etcd tarball against SHA256SUMS, extracts the
// named binaries (etcd, etcdctl, etcdutl) into a temporary directory and
// returns it.
func EtcdBinaries(t testing.TB, names ...string) string {
	t.Helper()
	top := fmt.Sprintf("etcd-%s-linux-%s", Etcd, runtime.GOARCH)
	dir := filepath.Join(Dir(), "etcd", Etcd)
	tgz := filepath.Join(dir, top+".tar.gz")
	if _, err := os.Stat(tgz); err != nil {
		missing(t, "no etcd tarball in the release mirror (%s)", tgz)
	}
	want, err := sumFor(filepath.Join(dir, "SHA256SUMS"), top+".tar.gz")
	if err != nil {
		t.Fatalf("refusing to run an unverified binary: %v", err)
	}
	if got := fileSHA256(t, tgz); got != want {
		t.Fatalf("%s: sha256 %s, SHA256SUMS says %s", tgz, got, want)
	}
	dst := t.TempDir()
	extract(t, tgz, top+"/", dst, names...)
	return dst
}

// ContainerdBinaries verifies the containerd tarball against its .sha256sum,
// extracts the named binaries (containerd, containerd-shim-runc-v2, ctr)
// into a temporary directory and returns it.
func ContainerdBinaries(t testing.TB, names ...string) string {
	t.Helper()
	file := fmt.Sprintf("containerd-%s-linux-%s.tar.gz", strings.TrimPrefix(Containerd, "v"), runtime.GOARCH)
	tgz := verified(t, filepath.Join(Dir(), "containerd", Containerd, file), file+".sha256sum")
	dst := t.TempDir()
	extract(t, tgz, "bin/", dst, names...)
	return dst
}

// RuncBinary is the path of runc in the mirror, after its sha256 matched runc.sha256sum.
func RuncBinary(t testing.TB) string {
	t.Helper()
	return verified(t, filepath.Join(Dir(), "runc", Runc, "runc."+runtime.GOARCH), "runc.sha256sum")
}

// TraefikBinary verifies Traefik's release tarball against its checksums
// file, extracts traefik into a temporary directory and returns its path.
func TraefikBinary(t testing.TB) string {
	t.Helper()
	file := fmt.Sprintf("traefik_%s_linux_%s.tar.gz", Traefik, runtime.GOARCH)
	tgz := verified(t, filepath.Join(Dir(), "traefik", Traefik, file), "traefik_"+Traefik+"_checksums.txt")
	dst := t.TempDir()
	extract(t, tgz, "", dst, "traefik")
	return filepath.Join(dst, "traefik")
}

// ImageTarball is the path of a docker-archive in the mirror's images/,
// after its sha256 matched images/SHA256SUMS.
func ImageTarball(t testing.TB, file string) string {
	t.Helper()
	return verified(t, filepath.Join(Dir(), "images", file), "SHA256SUMS")
}

// verified returns path once its sha256 matches its line in sums, a file
// beside it.
func verified(t testing.TB, path, sums string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, "no %s in the release mirror", path)
	}
	want, err := sumFor(filepath.Join(filepath.Dir(path), sums), filepath.Base(path))
	if err != nil {
		t.Fatalf("refusing to use an unverified file: %v", err)
	}
	if got := fileSHA256(t, path); got != want {
		t.Fatalf("%s: sha256 %s, %s says %s", path, got, sums, want)
	}
	return path
}

func sumFor(sumsPath, file string) (string, error) {
	f, err := os.Open(sumsPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) == 2 && strings.TrimPrefix(fs[1], "*") == file {
			return fs[0], nil
		}
	}
	return "", fmt.Errorf("%s: no line for %s", sumsPath, file)
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// extract copies the named files below prefix of a .tar.gz into dst (0755).
func extract(t testing.TB, tgz, prefix, dst string, names ...string) {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	want := map[string]bool{}
	for _, n := range names {
		want[prefix+n] = true
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !want[hdr.Name] || hdr.Typeflag != tar.TypeReg {
			continue
		}
		out, err := os.OpenFile(filepath.Join(dst, filepath.Base(hdr.Name)), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		delete(want, hdr.Name)
	}
	if len(want) > 0 {
		t.Fatalf("%s lacks %v", tgz, want)
	}
}
