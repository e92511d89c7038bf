// Package etcdtest starts a real etcd cluster on loopback for tests, from the
// etcd tarball of the release mirror (verified against its SHA256SUMS first).
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/hardway/hardway/internal/mirrortest"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Version is the etcd the tests run.
const Version = mirrortest.Etcd

// Binary returns a verified etcd binary (etcd, etcdctl, etcdutl) from the
// mirror; see internal/mirrortest for when a missing mirror skips or fails.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(mirrortest.EtcdBinaries(t, name), name)
}

// Cluster is a running etcd cluster on 127.0.0.1.
type Cluster struct {
	Names     []string
	Clients   []string // https://127.0.0.1:port per member
	Peers     []string
	ClientTLS *tls.Config
	Dir       string
	procs     []*exec.Cmd
}

// Start starts n members with TLS for clients and peers and waits until the
// cluster answers. Processes are killed (by PID) in t.Cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := Binary(t, "etcd")
	dir := t.TempDir()
	c := &Cluster{Dir: dir}
	ca, caKey := makeCA(t)
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.Raw)
	srv, srvKey := makeLeaf(t, ca, caKey, "etcd", true)
	writePEM(t, filepath.Join(dir, "server.crt"), "CERTIFICATE", srv)
	writeKey(t, filepath.Join(dir, "server.key"), srvKey)
	cli, cliKey := makeLeaf(t, ca, caKey, "client", false)

	var initial []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("m%d", i+1)
		c.Names = append(c.Names, name)
		c.Clients = append(c.Clients, "https://"+freeAddr(t))
		c.Peers = append(c.Peers, "https://"+freeAddr(t))
		initial = append(initial, name+"="+c.Peers[i])
	}
	for i, name := range c.Names {
		cmd := exec.Command(bin,
			"--name="+name, "--data-dir="+filepath.Join(dir, name),
			"--listen-client-urls="+c.Clients[i], "--advertise-client-urls="+c.Clients[i],
			"--listen-peer-urls="+c.Peers[i], "--initial-advertise-peer-urls="+c.Peers[i],
			"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=etcdtest",
			"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
			"--trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--client-cert-auth=true",
			"--peer-cert-file="+filepath.Join(dir, "server.crt"), "--peer-key-file="+filepath.Join(dir, "server.key"),
			"--peer-trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--peer-client-cert-auth=true",
			"--log-level=error")
		log, _ := os.Create(filepath.Join(dir, name+".log"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.procs = append(c.procs, cmd)
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c.ClientTLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{{Certificate: [][]byte{cli}, PrivateKey: cliKey}}}
	return c
}

// Stop kills member i (by the PID this package started) and waits for it.
func (c *Cluster) Stop(i int) {
	c.procs[i].Process.Kill()
	c.procs[i].Wait()
}

// Log returns member i's log, for failure messages.
func (c *Cluster) Log(i int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, c.Names[i]+".log"))
	return string(b)
}

// WaitHealthy polls fn until it succeeds or the deadline passes.
func WaitHealthy(t testing.TB, timeout time.Duration, fn func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = fn(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("etcd not healthy after %v: %v", timeout, err)
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func makeCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func makeLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, server bool) ([]byte, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t testing.TB, path string, key *ecdsa.PrivateKey) {
	der, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, path, "EC PRIVATE KEY", der)
}
