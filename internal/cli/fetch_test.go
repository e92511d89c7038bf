package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fetchRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// fetchMirror lays out a file:// mirror like dl.k8s.io and etcd's releases.
func fetchMirror(t *testing.T) (k8s, etcd string) {
	root := t.TempDir()
	put := func(p string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "kubernetes/release/v1.36.3/bin/linux/amd64")
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		data := []byte("#!fake " + b + strings.Repeat(".", 4096))
		s := sha512.Sum512(data)
		put(filepath.Join(bin, b), data)
		put(filepath.Join(bin, b+".sha512"), []byte(hex.EncodeToString(s[:])))
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
		data := []byte("#!fake " + b)
		tw.WriteHeader(&tar.Header{Name: "etcd-v3.6.16-linux-amd64/" + b, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))})
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	s := sha256.Sum256(buf.Bytes())
	put(filepath.Join(root, "etcd/v3.6.16/etcd-v3.6.16-linux-amd64.tar.gz"), buf.Bytes())
	put(filepath.Join(root, "etcd/v3.6.16/SHA256SUMS"), []byte(hex.EncodeToString(s[:])+"  etcd-v3.6.16-linux-amd64.tar.gz\n"))
	return "file://" + filepath.Join(root, "kubernetes"), "file://" + filepath.Join(root, "etcd")
}

func TestFetchCommand(t *testing.T) {
	k8s, etcd := fetchMirror(t)
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte(fmt.Sprintf(`kubernetesVersion: v1.36.3
releases:
  kubernetes: %s
  etcd: %s
controlPlane:
  - name: controller-0
    address: 10.240.0.10
`, k8s, etcd)), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")

	code, out, errOut := fetchRun("fetch", "-i", inv, "--cache-dir", cache, "-o", "json", "--bundle", filepath.Join(dir, "b.tar"))
	if code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, errOut)
	}
	var res struct {
		Kubernetes  string
		LockWritten bool
		Bundle      string
		Artifacts   []struct{ Name, SHA256, Path string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if res.Kubernetes != "v1.36.3" || !res.LockWritten || len(res.Artifacts) != 8 || res.Bundle == "" {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(errOut, "[fetch] kubectl v1.36.3: downloaded and verified") {
		t.Errorf("no plain progress line on a non-terminal:\n%s", errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "hardway.lock")); err != nil {
		t.Fatal(err)
	}

	// One byte of a mirrored binary changes: refused, named, exit 1.
	p := strings.TrimPrefix(k8s, "file://") + "/release/v1.36.3/bin/linux/amd64/kube-apiserver"
	data, _ := os.ReadFile(p)
	data[len(data)-1] = '!'
	os.WriteFile(p, data, 0o644)
	code, _, errOut = fetchRun("fetch", "-i", inv, "--cache-dir", cache)
	if code != 1 || !strings.Contains(errOut, "error: kube-apiserver v1.36.3") || !strings.Contains(errOut, "hint:") {
		t.Errorf("tampered mirror: exit %d\n%s", code, errOut)
	}
	// The cache still holds the verified set.
	if code, _, errOut = fetchRun("fetch", "-i", inv, "--cache-dir", cache, "--offline"); code != 0 {
		t.Errorf("--offline: exit %d\n%s", code, errOut)
	}
	// Air-gapped: a fresh directory, a fresh cache, only the bundle.
	gap := t.TempDir()
	gapInv := filepath.Join(gap, "inventory.yaml")
	b, _ := os.ReadFile(inv)
	os.WriteFile(gapInv, b, 0o644)
	if code, _, errOut = fetchRun("fetch", "-i", gapInv, "--cache-dir", filepath.Join(gap, "cache"), "--from-bundle", filepath.Join(dir, "b.tar")); code != 0 {
		t.Fatalf("--from-bundle: exit %d\n%s", code, errOut)
	}
	l1, _ := os.ReadFile(filepath.Join(dir, "hardway.lock"))
	l2, _ := os.ReadFile(filepath.Join(gap, "hardway.lock"))
	if !bytes.Equal(l1, l2) {
		t.Error("the bundle's lock differs from the original")
	}
	if code, _, _ = fetchRun("fetch", "-i", inv, "-o", "yaml"); code != 2 {
		t.Errorf("-o yaml: exit %d, want 2", code)
	}
}
