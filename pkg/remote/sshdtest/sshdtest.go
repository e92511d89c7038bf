// Package sshdtest starts real OpenSSH sshd processes for tests.
//
// Each Server listens on 127.0.0.1 on a free port with its own host keys,
// sshd_config and authorized_keys in a temporary directory, and is killed by
// PID when the test ends. sshd must run as root (it switches users), so
// RequireRoot skips the test with a message otherwise.
package sshdtest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHD is Debian's sshd; it must be run by absolute path (it re-executes itself).
const SSHD = "/usr/sbin/sshd"

// RequireRoot skips t unless it runs as root with sshd installed.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: these tests start a real sshd that switches users (run `make test` as root)")
	}
	if _, err := os.Stat(SSHD); err != nil {
		t.Fatalf("%s missing: run hack/setup.sh (openssh-server)", SSHD)
	}
}

// Options shape a Server.
type Options struct {
	// HostKeyTypes are "ed25519" and/or "ecdsa", in the order sshd offers
	// them; default ed25519.
	HostKeyTypes []string
	// ExtraConfig is added to sshd_config and overrides its defaults.
	ExtraConfig string
}

// Server is a running sshd.
type Server struct {
	Host     string // 127.0.0.1
	Port     int
	Dir      string          // config, keys, authorized_keys; world-readable so test users can reach homes in it
	HostKeys []ssh.PublicKey // in offer order
	cmd      *exec.Cmd
	log      string
	mu       sync.Mutex
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// KnownHostsLine is the known_hosts line for the first host key.
func (s *Server) KnownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr())}, s.HostKeys[0])
}

// Log is what sshd wrote so far (-e: its log goes to stderr).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// Start starts an sshd and stops it when t ends.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	RequireRoot(t)
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sshdtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{Host: "127.0.0.1", Dir: dir}
	types := opt.HostKeyTypes
	if len(types) == 0 {
		types = []string{"ed25519"}
	}
	var conf strings.Builder
	// sshd takes the first value it reads for a keyword: extras go first so
	// that they override the defaults below.
	conf.WriteString(opt.ExtraConfig)
	for _, typ := range types {
		path := filepath.Join(dir, "ssh_host_"+typ+"_key")
		pub := writeKey(t, path, typ)
		s.HostKeys = append(s.HostKeys, pub)
		fmt.Fprintf(&conf, "HostKey %s\n", path)
	}
	if err := os.MkdirAll(filepath.Join(dir, "authorized_keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	s.Port = port
	fmt.Fprintf(&conf, `ListenAddress 127.0.0.1:%d
PidFile none
UsePAM no
StrictModes no
AuthorizedKeysFile %s/authorized_keys/%%u
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
MaxStartups 100
MaxSessions 100
LogLevel VERBOSE
Subsystem sftp %s
`, port, dir, sftpServer())
	cfgPath := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgPath, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// The log goes to a file, not a pipe: per-connection sshd processes
	// (they call setsid) inherit it, and a pipe would make Wait hang until
	// the last client disconnected.
	logf, err := os.Create(filepath.Join(dir, "sshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.log = logf.Name()
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", cfgPath)
	s.cmd.Stderr = logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sshd %s log:\n%s", s.Addr(), s.Log())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("sshd exited: %s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd not listening on %s: %s", s.Addr(), s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// Authorize lets key log in as user.
func (s *Server) Authorize(t testing.TB, user string, key ssh.PublicKey) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.Dir, "authorized_keys", user), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(ssh.MarshalAuthorizedKey(key)); err != nil {
		t.Fatal(err)
	}
}

// ClientKey writes a new ed25519 private key (0600) into dir and returns its
// path and public key.
func ClientKey(t testing.TB, dir string) (string, ssh.PublicKey) {
	t.Helper()
	f, err := os.CreateTemp(dir, "id_ed25519-")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name(), writeKey(t, f.Name(), "ed25519")
}

// NewPublicKey is a fresh key of typ that no server has: a "changed" host key.
func NewPublicKey(t testing.TB, typ string) ssh.PublicKey {
	t.Helper()
	signer, _ := newKey(t, typ)
	return signer.PublicKey()
}

func newKey(t testing.TB, typ string) (ssh.Signer, any) {
	var priv any
	var err error
	switch typ {
	case "ed25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		t.Fatalf("unknown key type %q", typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, priv
}

func writeKey(t testing.TB, path, typ string) ssh.PublicKey {
	t.Helper()
	signer, priv := newKey(t, typ)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return signer.PublicKey()
}

// sftpServer is Debian's default, so that scp baselines measure what a real
// host runs.
func sftpServer() string {
	const debian = "/usr/lib/openssh/sftp-server"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	return "internal-sftp"
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// User is a throwaway local account for tests that log in as non-root.
type User struct {
	Name string
	Home string
}

// AddUser creates a local user with a home in dir (which must be
// traversable) and removes it, and its sudoers drop-in, when t ends.
// With sudo, the user may run anything through `sudo -n` without a password.
func AddUser(t testing.TB, dir string, sudo bool) User {
	t.Helper()
	RequireRoot(t)
	name := uniqueName("hwt")
	if _, err := user.Lookup(name); err == nil {
		t.Fatalf("user %s already exists", name)
	}
	home := filepath.Join(dir, name)
	run(t, "useradd", "--create-home", "--home-dir", home, "--shell", "/bin/sh", "--user-group", name)
	t.Cleanup(func() { userdel(t, name, "--remove") })
	// useradd leaves the password "!" (locked); sshd without PAM then refuses
	// even key logins. "*" is "no password" without being locked.
	run(t, "usermod", "-p", "*", name)
	if sudo {
		if _, err := exec.LookPath("sudo"); err != nil {
			t.Fatal("sudo missing: run hack/setup.sh")
		}
		dropIn := "/etc/sudoers.d/" + name
		if err := os.WriteFile(dropIn, []byte(name+" ALL=(ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dropIn) })
	}
	return User{Name: name, Home: home}
}

// AddRootAlias creates a second uid-0 account whose shell is /bin/sh and
// removes it when t ends. Tests log in as it rather than as root because
// root's own shell runs root's ~/.bashrc for every SSH command (bash does so
// when started by sshd), and on a developer machine that can take seconds.
func AddRootAlias(t testing.TB, dir string) User {
	t.Helper()
	RequireRoot(t)
	name := uniqueName("hwr")
	home := filepath.Join(dir, name)
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "useradd", "--non-unique", "--uid", "0", "--gid", "0", "--no-create-home", "--home-dir", home, "--shell", "/bin/sh", name)
	t.Cleanup(func() { userdel(t, name, "--force") })
	run(t, "usermod", "-p", "*", name)
	return User{Name: name, Home: home}
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%d%05d", prefix, os.Getpid()%100000, time.Now().UnixNano()/1000%100000)
}

// userdel retries: sshd's session process for the user may still be
// exiting, and another test may hold the passwd lock.
func userdel(t testing.TB, name string, args ...string) {
	for i := 0; ; i++ {
		out, err := exec.Command("userdel", append(args, name)...).CombinedOutput()
		if err == nil {
			return
		}
		if i == 50 {
			t.Errorf("userdel %s: %v: %s", name, err, out)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run retries briefly: useradd and friends fail while another process holds
// the lock on /etc/passwd.
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	for i := 0; ; i++ {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err == nil {
			return
		}
		if i == 20 || !strings.Contains(string(out), "lock") {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
