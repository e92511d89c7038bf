package lab

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The handler serves regular files under the mirror only, read-only, and
// logs every request.
func TestMirrorHandler(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "kubernetes/release"), 0o755)
	os.WriteFile(filepath.Join(dir, "kubernetes/release/kubectl"), []byte("kubectl bytes"), 0o644)
	os.WriteFile(filepath.Join(filepath.Dir(dir), "secret"), []byte("outside"), 0o644)
	logf, err := os.Create(filepath.Join(t.TempDir(), "mirror.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mirrorHandler(dir, logf))
	defer srv.Close()
	get := func(method, p string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/kubernetes/release/kubectl"); code != 200 || body != "kubectl bytes" {
		t.Errorf("file: %d %q", code, body)
	}
	for _, p := range []string{"/kubernetes/release/", "/kubernetes", "/", "/../secret", "/kubernetes/../../secret", "/missing"} {
		if code, body := get("GET", p); code != 404 || strings.Contains(body, "kubectl") || strings.Contains(body, "outside") {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	if code, _ := get("PUT", "/kubernetes/release/kubectl"); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", code)
	}
	logf.Close()
	b, _ := os.ReadFile(logf.Name())
	if !strings.Contains(string(b), " /kubernetes/release/kubectl 200 13\n") || strings.Count(string(b), "\n") != 8 {
		t.Errorf("log:\n%s", b)
	}
}

// The server is this executable started again with mirrorServerEnv set
// (here: the test binary, whose init serves before any test runs); SIGTERM
// ends it cleanly.
func TestMirrorServerProcess(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("served"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "mirror.log")
	cmd := exec.Command(exe)
	cmd.Args = []string{mirrorArgv0}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", mirrorServerEnv, addr, dir, logPath))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	var body string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && body == ""; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/f"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
	}
	if body != "served" {
		t.Fatalf("the server process answered %q", body)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
	if !strings.HasPrefix(string(cmdline), mirrorArgv0+"\x00") {
		t.Errorf("cmdline %q", cmdline)
	}
	st := &state{MirrorPID: cmd.Process.Pid}
	if mirrorPID(st) != cmd.Process.Pid {
		t.Error("mirrorPID does not know the server")
	}
	if mirrorPID(&state{MirrorPID: os.Getpid()}) != 0 {
		t.Error("mirrorPID takes another process for the server")
	}
	if err := stopMirror(st); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end on SIGTERM")
	}
}
