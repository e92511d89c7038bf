package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	ossignal "os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The lab's release mirror over HTTP (Config.ServeMirror): lab hosts cannot
// read the mirror on this machine's disk, so for releases.fetchOn: hosts
// the lab serves it, read-only, on its own bridge address (inside the
// network the lab created, reachable from the lab hosts and this machine
// only), from `lab up` until `lab down`. The server is this same executable
// started again with mirrorServerEnv set (see init), in a session of its own
// so that it outlives `hardway lab up`; its PID and start time are in the
// lab's state, and `lab down` ends exactly that process.

// MirrorPort is the mirror server's port on the bridge address.
const MirrorPort = 18780

// mirrorServerEnv, set in a process's environment, makes it the mirror
// server: "ADDR DIR LOG" (the address to listen on, the directory to serve,
// the request log).
const mirrorServerEnv = "HARDWAY_LAB_MIRROR_SERVER"

// mirrorArgv0 names the server in ps and in /proc/PID/cmdline, which Down
// checks before it signals the recorded PID.
const mirrorArgv0 = "hardway-lab-mirror"

func init() {
	// The server process: before anything else in this executable runs
	// (main, or a test binary's TestMain), serve and never return.
	if spec := os.Getenv(mirrorServerEnv); spec != "" {
		os.Exit(serveMirror(spec))
	}
}

// MirrorLogFile is the server's request log in the lab's state directory:
// one line per request (client address, path, status, bytes).
const MirrorLogFile = "mirror.log"

func (l *Lab) mirrorAddr() string {
	return net.JoinHostPort(bridgeAddr(l.net).String(), strconv.Itoa(MirrorPort))
}

// MirrorURL is the base URL of the lab's mirror server.
func (l *Lab) MirrorURL() string { return "http://" + l.mirrorAddr() }

// startMirror starts the server and waits until it accepts connections.
func (l *Lab) startMirror(st *state) error {
	if fi, err := os.Stat(l.cfg.Mirror); err != nil || !fi.IsDir() {
		return fmt.Errorf("serve the mirror: %s is not a directory (build it: make mirror)", l.cfg.Mirror)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("serve the mirror: %w", err)
	}
	logPath := filepath.Join(l.stateDir(), MirrorLogFile)
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(exe)
	cmd.Args = []string{mirrorArgv0}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", mirrorServerEnv, l.mirrorAddr(), l.cfg.Mirror, logPath))
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	closeInheritedOnExec()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("serve the mirror: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ps, _ := readProcStat(cmd.Process.Pid)
	st.MirrorPID, st.MirrorStart = cmd.Process.Pid, ps.start
	if err := st.save(); err != nil {
		return err
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("the mirror server on %s exited: %s", l.mirrorAddr(), tail(logPath, 5))
		default:
		}
		if tcpOpen(context.Background(), l.mirrorAddr()) {
			l.logf("release mirror %s served at %s (until lab down)", l.cfg.Mirror, l.MirrorURL())
			return nil
		}
	}
	return fmt.Errorf("the mirror server does not listen on %s after 10s: %s", l.mirrorAddr(), tail(logPath, 5))
}

// mirrorPID is the recorded server's PID if that process still runs and is
// the lab's mirror server (same start time, our argv0), else 0.
func mirrorPID(st *state) int {
	if st.MirrorPID == 0 || !alive(st.MirrorPID, st.MirrorStart) {
		return 0
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(st.MirrorPID) + "/cmdline")
	if !bytes.HasPrefix(cmdline, []byte(mirrorArgv0+"\x00")) {
		return 0
	}
	return st.MirrorPID
}

// stopMirror ends the recorded server (SIGTERM, then SIGKILL) and waits.
func stopMirror(st *state) error {
	pid := mirrorPID(st)
	if pid == 0 {
		return nil
	}
	signal(pid, syscall.SIGTERM)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if mirrorPID(st) == 0 {
			return nil
		}
	}
	signal(pid, syscall.SIGKILL)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if mirrorPID(st) == 0 {
			return nil
		}
	}
	return fmt.Errorf("the mirror server (PID %d) does not end", pid)
}

// serveMirror is the server process's main: files only (no directory
// listings, no writes), each request logged; it ends on SIGTERM.
func serveMirror(spec string) int {
	var addr, dir, logPath string
	if _, err := fmt.Sscan(spec, &addr, &dir, &logPath); err != nil {
		fmt.Fprintf(os.Stderr, "%s: bad %s %q: %v\n", mirrorArgv0, mirrorServerEnv, spec, err)
		return 2
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(logf, "%s: %v\n", mirrorArgv0, err)
		return 1
	}
	srv := &http.Server{Handler: mirrorHandler(dir, logf), ReadHeaderTimeout: 10 * time.Second}
	sig := make(chan os.Signal, 1)
	ossignal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Fprintf(logf, "%s: serving %s on %s\n", mirrorArgv0, dir, addr)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(logf, "%s: %v\n", mirrorArgv0, err)
		return 1
	}
	return 0
}

// mirrorHandler serves the regular files under dir (GET and HEAD, with
// Range), refuses directories, and logs "client path status bytes".
func mirrorHandler(dir string, log *os.File) http.Handler {
	files := http.FileServer(http.Dir(dir))
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		p := filepath.Join(dir, filepath.FromSlash(filepath.Clean("/"+r.URL.Path)))
		fi, err := os.Stat(p)
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			http.Error(rec, "read-only mirror", http.StatusMethodNotAllowed)
		case err != nil || !fi.Mode().IsRegular():
			http.NotFound(rec, r)
		default:
			files.ServeHTTP(rec, r)
		}
		mu.Lock()
		fmt.Fprintf(log, "%s %s %s %d %d\n", time.Now().UTC().Format(time.RFC3339), r.RemoteAddr, r.URL.Path, rec.status, rec.n)
		mu.Unlock()
	})
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) { c.status = code; c.ResponseWriter.WriteHeader(code) }
func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}
