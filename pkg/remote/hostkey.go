package remote

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hardway/hardway/pkg/usererr"
)

// hostKeyChecker verifies one connection's host key against known_hosts.
type hostKeyChecker struct {
	file       string
	isDefault  bool
	accept     bool
	check      ssh.HostKeyCallback // nil: the file does not exist yet
	algorithms []string            // what to ask the server for; nil: any
	known      []string            // key types known for the host, for messages
	failure    error               // set by callback; explains a failed handshake
}

func defaultKnownHosts() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("known_hosts: %w", err)
	}
	return filepath.Join(home, ".ssh", "known_hosts"), nil
}

func newHostKeyChecker(cfg *Config) (*hostKeyChecker, error) {
	def, err := defaultKnownHosts()
	if err != nil && cfg.KnownHostsFile == "" {
		return nil, err
	}
	hk := &hostKeyChecker{file: cfg.KnownHostsFile, accept: cfg.AcceptNewHostKeys}
	if hk.file == "" {
		hk.file = def
	}
	hk.isDefault = hk.file == def
	hk.check, err = knownhosts.New(hk.file)
	if errors.Is(err, os.ErrNotExist) {
		hk.check = nil
	} else if err != nil {
		return nil, usererr.Errorf("fix or remove the bad line in "+Quote(hk.file), "known_hosts: %w", err)
	}
	hk.restrictAlgorithms(cfg.addr())
	return hk, nil
}

// restrictAlgorithms asks the server only for the key types known_hosts has
// for this host. Without it x/crypto prefers ECDSA, and a host known by its
// ed25519 key that also has an ECDSA key would look like a changed key.
// knownhosts has no lookup API, so probe it with a throwaway key: the
// KeyError lists every key the file holds for the address.
func (hk *hostKeyChecker) restrictAlgorithms(addr string) {
	if hk.check == nil {
		return
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return
	}
	// knownhosts matches on addr; the remote address is only parsed.
	var ke *knownhosts.KeyError
	if err := hk.check(addr, &net.TCPAddr{}, probe); !errors.As(err, &ke) || len(ke.Want) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, k := range ke.Want {
		t := k.Key.Type()
		if seen[t] {
			continue
		}
		seen[t] = true
		hk.known = append(hk.known, t)
		if t == ssh.KeyAlgoRSA {
			// One RSA key serves three signature algorithms.
			hk.algorithms = append(hk.algorithms, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		} else {
			hk.algorithms = append(hk.algorithms, t)
		}
	}
}

func (hk *hostKeyChecker) callback(hostname string, remote net.Addr, key ssh.PublicKey) error {
	if hk.check != nil {
		err := hk.check(hostname, remote, key)
		var ke *knownhosts.KeyError
		if err == nil {
			return nil
		}
		if !errors.As(err, &ke) {
			hk.failure = err // e.g. a revoked key
			return err
		}
		if len(ke.Want) > 0 {
			// Known host, different key: never replaced, whatever the flags.
			hk.failure = ErrHostKeyMismatch
			return ErrHostKeyMismatch
		}
	}
	if !hk.accept {
		hk.failure = ErrHostKeyUnknown
		return ErrHostKeyUnknown
	}
	if err := appendKnownHost(hk.file, knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)); err != nil {
		hk.failure = err
		return err
	}
	return nil
}

// appendKnownHost adds one line to known_hosts under an flock, so that hosts
// accepted in parallel (or by two hardway runs) do not interleave lines.
func appendKnownHost(file, line string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("known_hosts: lock %s: %w", file, err)
	}
	// A file written by hand may lack its final newline.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if r, err := os.Open(file); err == nil {
			if _, err := r.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
				line = "\n" + line
			}
			r.Close()
		}
	}
	if _, err := io.WriteString(f, line+"\n"); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	return f.Sync()
}

// classify explains a failed handshake.
func (hk *hostKeyChecker) classify(cfg *Config, err error, fail func(kind, err error) error) error {
	host := knownhosts.Normalize(cfg.addr())
	fileArg := ""
	if !hk.isDefault {
		fileArg = " -f " + Quote(hk.file)
	}
	noCommon := strings.Contains(err.Error(), "no common algorithm for host key")
	switch {
	case errors.Is(hk.failure, ErrHostKeyMismatch) || (noCommon && hk.algorithms != nil):
		if noCommon {
			err = fmt.Errorf("the host offers none of the key types %s has for it (%s): %w",
				hk.file, strings.Join(hk.known, ", "), err)
		} else {
			err = fmt.Errorf("the key differs from %s", hk.file)
		}
		return usererr.New(fail(ErrHostKeyMismatch, err),
			fmt.Sprintf("was the host rebuilt? check its new key, then remove the old one with: ssh-keygen%s -R %s",
				fileArg, Quote(host)))
	case errors.Is(hk.failure, ErrHostKeyUnknown):
		return usererr.New(fail(ErrHostKeyUnknown, fmt.Errorf("not in %s", hk.file)),
			fmt.Sprintf("add its key to %s (ssh-keyscan, then check the fingerprint), or pass --accept-new-host-keys", hk.file))
	case hk.failure != nil:
		return fail(ErrConnect, hk.failure)
	case strings.Contains(err.Error(), "unable to authenticate"):
		return usererr.New(fail(ErrAuthFailed, err),
			fmt.Sprintf("check that %s's key is in ~%s/.ssh/authorized_keys on the host: ssh %s@%s", cfg.user(), cfg.user(), cfg.user(), cfg.Address))
	}
	return fail(classifyNetErr(err), err)
}
