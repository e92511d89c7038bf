package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// waitHost waits until h's sshd answers with the host key the lab gave it and
// its systemd has finished booting; it returns systemd's state, an error
// unless "running" (a degraded host would make every later failure
// ambiguous).
func waitHost(ctx context.Context, h hostState, signer ssh.Signer, hostKey ssh.PublicKey, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey),
		Timeout:         2 * time.Second,
	}
	addr := net.JoinHostPort(h.Address, "22")
	var client *ssh.Client
	var lastErr error
	for client == nil {
		if !alive(h.SupervisorPID, h.SupervisorStart) {
			return "", errors.New("its systemd-nspawn exited")
		}
		c, err := dialSSH(ctx, addr, cfg)
		if err == nil {
			client = c
			break
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("sshd did not answer in %s: %w", timeout, lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer client.Close()
	out, err := runSSH(ctx, client, "systemctl is-system-running --wait")
	state := strings.TrimSpace(string(out))
	if state == "running" {
		return state, nil
	}
	failed, _ := runSSH(ctx, client, "systemctl --failed --plain --no-legend --no-pager")
	if err == nil {
		err = errors.New("not running")
	}
	return state, fmt.Errorf("systemd is %q (%v); failed units: %s", state, err, strings.TrimSpace(string(failed)))
}

func dialSSH(ctx context.Context, addr string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// runSSH runs cmd and returns its stdout; ctx ends the session.
func runSSH(ctx context.Context, c *ssh.Client, cmd string) ([]byte, error) {
	s, err := c.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	select {
	case err := <-done:
		if err != nil {
			return stdout.Bytes(), fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(stderr.String()))
		}
		return stdout.Bytes(), nil
	case <-ctx.Done():
		return stdout.Bytes(), ctx.Err()
	}
}
