package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/hardway/hardway/pkg/usererr"
)

// Config says how to reach one host. It is filled from the inventory by the
// caller; remote does not know the inventory's format.
type Config struct {
	Name    string // inventory name, for messages
	Address string // IP or DNS name
	Port    int    // 0: 22
	User    string // "": root

	// IdentityFiles are private keys to offer after the ssh-agent's
	// (SSH_AUTH_SOCK). Empty: ~/.ssh/id_ed25519, id_ecdsa, id_rsa if present.
	IdentityFiles []string
	// NoAgent ignores SSH_AUTH_SOCK; tests use it to be independent of the
	// developer's agent.
	NoAgent bool

	// KnownHostsFile holds the trusted host keys; "": ~/.ssh/known_hosts.
	KnownHostsFile string
	// AcceptNewHostKeys adds the key of a host that has no entry yet
	// (OpenSSH's StrictHostKeyChecking=accept-new). A changed key is never
	// replaced.
	AcceptNewHostKeys bool

	Bastion *Config // jump host, reached first; nil: connect directly
	Sudo    bool    // run commands through `sudo -n` (ignored when User is root)

	ConnectTimeout time.Duration // TCP connect + SSH handshake; 0: 15s
	KeepAlive      time.Duration // interval of keepalive requests; 0: 15s, <0: none
	Retries        int           // extra attempts on retryable failures; 0: 3, <0: none

	// Trace, when set, is told about every command run on the host, with
	// its whole standard error: the run log keeps what an error message
	// only shows the start of.
	Trace func(Trace)
}

// Trace is one command that ran on a host.
type Trace struct {
	Host     string
	Cmd      string
	Start    time.Time
	Duration time.Duration
	Code     int    // exit status; -1 when there is none
	Stderr   string // all of it
	Err      error  // nil on success
}

func (c *Config) user() string {
	if c.User == "" {
		return "root"
	}
	return c.User
}

func (c *Config) addr() string {
	port := c.Port
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(c.Address, strconv.Itoa(port))
}

func (c *Config) name() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Address
}

// Failure classes of Dial; test them with errors.Is.
var (
	ErrHostKeyMismatch = errors.New("host key mismatch")
	ErrHostKeyUnknown  = errors.New("host key unknown")
	ErrAuthFailed      = errors.New("authentication failed")
	ErrRetryable       = errors.New("connection failed") // refused, timed out, reset: worth another try
	ErrConnect         = errors.New("cannot connect")    // e.g. unknown host name: retrying will not help
)

// DialError is a failed connection to a host, with its class in Kind.
type DialError struct {
	Host string
	Addr string
	Via  string // the bastion's name, if any
	Kind error  // one of the Err* classes above
	Err  error
}

func (e *DialError) Error() string {
	addr := e.Addr
	if e.Via != "" {
		addr += " via " + e.Via
	}
	return fmt.Sprintf("ssh %s (%s): %v: %v", e.Host, addr, e.Kind, e.Err)
}

func (e *DialError) Unwrap() []error { return []error{e.Kind, e.Err} }

// SSHHost is a Host over one SSH connection that every command reuses.
type SSHHost struct {
	cfg     Config
	client  *ssh.Client
	bastion *SSHHost
	done    chan struct{}
	once    sync.Once
}

var (
	_ Host   = (*SSHHost)(nil)
	_ Dialer = (*SSHHost)(nil)
)

// Dial connects to the host described by cfg, through its bastion if any,
// retrying refused, timed-out and reset connections with backoff. Host-key
// and authentication failures are not retried: they are *usererr.Error with
// the command that fixes them.
func Dial(ctx context.Context, cfg Config) (*SSHHost, error) {
	var bastion *SSHHost
	if cfg.Bastion != nil {
		b, err := Dial(ctx, *cfg.Bastion)
		if err != nil {
			return nil, fmt.Errorf("bastion of %s: %w", cfg.name(), err)
		}
		bastion = b
	}
	retries := cfg.Retries
	if retries == 0 {
		retries = 3
	}
	backoff := 250 * time.Millisecond
	for attempt := 0; ; attempt++ {
		client, err := dialOnce(ctx, &cfg, bastion)
		if err == nil {
			h := &SSHHost{cfg: cfg, client: client, bastion: bastion, done: make(chan struct{})}
			h.startKeepAlive()
			return h, nil
		}
		if !errors.Is(err, ErrRetryable) || attempt >= retries || ctx.Err() != nil {
			if bastion != nil {
				bastion.Close()
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			if bastion != nil {
				bastion.Close()
			}
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 4*time.Second)
	}
}

func dialOnce(ctx context.Context, cfg *Config, bastion *SSHHost) (*ssh.Client, error) {
	addr := cfg.addr()
	fail := func(kind, err error) error {
		de := &DialError{Host: cfg.name(), Addr: addr, Kind: kind, Err: err}
		if bastion != nil {
			de.Via = bastion.Name()
		}
		return de
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	hk, err := newHostKeyChecker(cfg)
	if err != nil {
		return nil, err
	}
	auth, closeAuth, err := authMethods(cfg)
	if err != nil {
		return nil, err
	}
	defer closeAuth()

	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	if bastion != nil {
		conn, err = bastion.client.DialContext(dctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", addr)
		if err == nil {
			// Only connections of this machine count: one through a
			// bastion travels inside the bastion's, counted there.
			conn = &countingConn{Conn: conn}
		}
	}
	if err != nil {
		return nil, fail(classifyNetErr(err), err)
	}
	// The handshake has no context of its own: bound it with a deadline,
	// and cut it when ctx is cancelled.
	_ = conn.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	defer stop()

	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:              cfg.user(),
		Auth:              auth,
		HostKeyCallback:   hk.callback,
		HostKeyAlgorithms: hk.algorithms,
		Timeout:           timeout,
	})
	if err != nil {
		conn.Close()
		return nil, hk.classify(cfg, err, fail)
	}
	if !stop() {
		sc.Close()
		return nil, fail(ErrRetryable, dctx.Err())
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

func classifyNetErr(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrRetryable
	}
	// Through a bastion, a refused port comes back as an SSH channel error.
	var oce *ssh.OpenChannelError
	if errors.As(err, &oce) && oce.Reason == ssh.ConnectionFailed {
		return ErrRetryable
	}
	return ErrConnect
}

// authMethods offers the agent's keys first, then the identity files, as
// OpenSSH does.
func authMethods(cfg *Config) ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	closeFn := func() {}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && !cfg.NoAgent {
		if c, err := net.Dial("unix", sock); err == nil {
			closeFn = func() { c.Close() }
			if ss, err := agent.NewClient(c).Signers(); err == nil {
				signers = append(signers, ss...)
			}
		}
	}
	files := cfg.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		if home, err := os.UserHomeDir(); err == nil {
			for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
				files = append(files, filepath.Join(home, ".ssh", n))
			}
		}
	}
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			if !explicit && errors.Is(err, os.ErrNotExist) {
				continue
			}
			closeFn()
			return nil, nil, usererr.Errorf("check the identityFiles of "+cfg.name()+" in the inventory",
				"ssh %s: read identity file: %w", cfg.name(), err)
		}
		s, err := ssh.ParsePrivateKey(pem)
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			if len(signers) > 0 || !explicit {
				continue // the agent may hold it already
			}
			closeFn()
			return nil, nil, usererr.Errorf("load it into the agent first: ssh-add "+f,
				"ssh %s: identity file %s is encrypted", cfg.name(), f)
		}
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("ssh %s: identity file %s: %w", cfg.name(), f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		closeFn()
		return nil, nil, usererr.Errorf("start ssh-agent and ssh-add a key, or set identityFiles in the inventory",
			"ssh %s: no SSH keys: no agent (SSH_AUTH_SOCK) and no identity file", cfg.name())
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closeFn, nil
}

// Name implements Host.
func (h *SSHHost) Name() string { return h.cfg.name() }

// Close closes the connection (and the bastion's).
func (h *SSHHost) Close() error {
	var err error
	h.once.Do(func() {
		close(h.done)
		err = h.client.Close()
		if h.bastion != nil {
			h.bastion.Close()
		}
	})
	return err
}

// startKeepAlive sends OpenSSH keepalive requests so that NAT and firewalls
// keep the idle connection between steps, and closes a connection whose peer
// stopped answering: commands then fail fast instead of hanging.
func (h *SSHHost) startKeepAlive() {
	every := h.cfg.KeepAlive
	if every < 0 {
		return
	}
	if every == 0 {
		every = 15 * time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		missed := 0
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
			}
			reply := make(chan error, 1)
			go func() {
				_, _, err := h.client.SendRequest("keepalive@openssh.com", true, nil)
				reply <- err
			}()
			select {
			case <-h.done:
				return
			case err := <-reply:
				if err != nil {
					h.client.Close()
					return
				}
				missed = 0
			case <-time.After(every):
				if missed++; missed >= 3 {
					h.client.Close()
					return
				}
			}
		}
	}()
}

// wrap turns cmd into what the host's login shell runs: through sudo for a
// non-root user, so that every caller writes plain commands.
func (h *SSHHost) wrap(cmd string) string {
	if !h.cfg.Sudo || h.cfg.user() == "root" {
		return cmd
	}
	return "sudo -n -- sh -c " + Quote(cmd)
}

// Run implements Host. Every call is a new session on the one connection.
func (h *SSHHost) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if h.cfg.Trace == nil {
		out, _, err := h.run(ctx, cmd, stdin)
		return out, err
	}
	start := time.Now()
	out, stderr, err := h.run(ctx, cmd, stdin)
	t := Trace{Host: h.Name(), Cmd: cmd, Start: start, Duration: time.Since(start), Stderr: stderr, Err: err}
	var ee *ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		t.Code = ee.Code
	default:
		t.Code = -1
	}
	h.cfg.Trace(t)
	return out, err
}

func (h *SSHHost) run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s, err := h.client.NewSession()
	if err != nil {
		return nil, "", fmt.Errorf("%s: new session: %w", h.Name(), err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	if stdin != nil {
		s.Stdin = stdin
	}
	if err := s.Start(h.wrap(cmd)); err != nil {
		return nil, "", fmt.Errorf("%s: start %s: %w", h.Name(), firstLine(cmd, 80), err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		// Kill the command and drop the channel; do not wait for it: sshd
		// keeps a session open while any child still holds its output.
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		return nil, "", fmt.Errorf("%s: %s: %w", h.Name(), firstLine(cmd, 80), ctx.Err()) // stderr may still be written to
	}
	if err == nil {
		return stdout.Bytes(), stderr.String(), nil
	}
	ee := &ExitError{Host: h.Name(), Cmd: cmd, Code: -1, Stderr: stderr.String()}
	var xe *ssh.ExitError
	var me *ssh.ExitMissingError
	switch {
	case errors.As(err, &xe):
		ee.Code = xe.ExitStatus()
	case errors.As(err, &me):
		// The usual cause is a dropped connection; say so instead of a
		// made-up exit status.
		return stdout.Bytes(), stderr.String(), fmt.Errorf("%s: %s: connection lost before the command finished: %w",
			h.Name(), firstLine(cmd, 80), err)
	default:
		return stdout.Bytes(), stderr.String(), fmt.Errorf("%s: %s: %w", h.Name(), firstLine(cmd, 80), err)
	}
	if h.cfg.Sudo && h.cfg.user() != "root" && strings.Contains(ee.Stderr, "sudo:") &&
		(strings.Contains(ee.Stderr, "a password is required") || strings.Contains(ee.Stderr, "a terminal is required")) {
		return stdout.Bytes(), stderr.String(), usererr.New(fmt.Errorf("%s: sudo for %s needs a password: %w", h.Name(), h.cfg.user(), ee),
			fmt.Sprintf("hardway runs `sudo -n`: allow it without a password on %s, e.g. echo %s > /etc/sudoers.d/hardway, or connect as root",
				Quote(h.Name()), Quote(h.cfg.user()+" ALL=(ALL) NOPASSWD: ALL")))
	}
	return stdout.Bytes(), stderr.String(), ee
}

// Client is the underlying SSH client.
func (h *SSHHost) Client() *ssh.Client { return h.client }

// DialContext opens a TCP connection from the host to addr through the SSH
// connection: the etcd client and the apiserver probes reach the cluster
// this way, so no port of it has to be open to this machine.
func (h *SSHHost) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return h.client.DialContext(ctx, network, addr)
}

// Bytes over this process's own SSH connections (TCP payload: SSH framing,
// encryption and every channel), for the figures of 'hardway up' and the
// bench: what crossed the operator's link.
var bytesSent, bytesReceived atomic.Int64

// Traffic returns the bytes sent and received over every SSH connection
// this process opened so far.
func Traffic() (sent, received int64) { return bytesSent.Load(), bytesReceived.Load() }

type countingConn struct{ net.Conn }

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	bytesSent.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	bytesReceived.Add(int64(n))
	return n, err
}
