package main

import (
	"bytes"
	"context"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tinyTarball writes a one-layer random image as a docker-archive tarball
// tagged ref, and returns its path and the image's digest.
func tinyTarball(t *testing.T, dir, ref string) (string, v1.Hash) {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	// The digest as read back from the tarball: what the registry serves.
	back, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatal(err)
	}
	d, err := back.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return p, d
}

// The registry serves each tarball's image under its repository and tag
// (and its digest), as containerd asks a mirror; remote.Image pulls it
// back whole, with the tarball's digest; it stops when its context ends.
func TestServesTarballs(t *testing.T) {
	dir := t.TempDir()
	pause, pauseDigest := tinyTarball(t, dir, "registry.k8s.io/pause:3.10.2")
	busybox, busyboxDigest := tinyTarball(t, dir, "docker.io/library/busybox:1.37.0")
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	pidfile := filepath.Join(dir, "registry.pid")
	go func() {
		done <- run(ctx, config{listen: "127.0.0.1:0", pidfile: pidfile, tarballs: []string{pause, busybox},
			log: log.New(&logs, "", 0), ready: func(a string) { addr <- a }})
	}()
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	if b, err := os.ReadFile(pidfile); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("pidfile: %q %v", b, err)
	}

	for _, c := range []struct {
		ref    string
		digest v1.Hash
	}{
		{a + "/pause:3.10.2", pauseDigest},
		{a + "/library/busybox:1.37.0", busyboxDigest},
		{a + "/pause@" + pauseDigest.String(), pauseDigest},
	} {
		ref, err := name.ParseReference(c.ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref, remote.WithContext(t.Context()))
		if err != nil {
			t.Fatalf("pull %s: %v", c.ref, err)
		}
		if d, err := img.Digest(); err != nil || d != c.digest {
			t.Errorf("%s: digest %s %v, want the tarball's %s", c.ref, d, err, c.digest)
		}
		// Every layer comes through, checked against its digest.
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bytes.NewBuffer(nil).ReadFrom(rc); err != nil {
				t.Errorf("%s: layer: %v", c.ref, err)
			}
			rc.Close()
		}
	}
	if ref, err := name.ParseReference(a+"/pause:nope", name.Insecure); err != nil {
		t.Fatal(err)
	} else if _, err := remote.Image(ref); err == nil {
		t.Error("an unknown tag was served")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("pidfile left behind: %v", err)
	}
	want := []string{
		"serving registry.k8s.io/pause:3.10.2 as /pause:3.10.2 (" + pauseDigest.String() + ")",
		"serving docker.io/library/busybox:1.37.0 as /library/busybox:1.37.0 (" + busyboxDigest.String() + ")",
		"listening on " + a + " (plain http) with 2 images from 2 tarballs",
		"stopped",
	}
	if got := strings.Split(strings.TrimSpace(logs.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", logs.String(), strings.Join(want, "\n"))
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	a, _ := tinyTarball(t, dir, "registry.k8s.io/pause:3.10.2")
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := tinyTarball(t, other, "quay.io/pause:3.10.2") // another image, the same repository and tag
	junk := filepath.Join(dir, "junk.tar")
	if err := os.WriteFile(junk, []byte("not a tarball"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tarballs []string
		want     string
	}{
		{nil, "no tarballs"},
		{[]string{junk}, junk + ": "},
		{[]string{a, b}, "/pause:3.10.2 is already served with another image"},
		{[]string{a, a}, ""}, // the same image twice is no conflict
	} {
		ctx, cancel := context.WithCancel(t.Context())
		err := run(ctx, config{listen: "127.0.0.1:0", tarballs: c.tarballs, log: log.New(&bytes.Buffer{}, "", 0),
			ready: func(string) { cancel() }})
		cancel()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.tarballs, err, c.want)
		}
	}
}

// The command itself: SIGTERM stops it with exit status 0.
func TestSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "registry")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tb, _ := tinyTarball(t, dir, "registry.k8s.io/pause:3.10.2")
	pidfile := filepath.Join(dir, "pid")
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-pidfile", pidfile, tb)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(pidfile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no pidfile\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "registry: stopped") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}
