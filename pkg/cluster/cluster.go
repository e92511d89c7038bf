// Package cluster is `hardway up` and `hardway verify`: it ties the
// inventory, the PKI, the release set, the rendered manifests, the SSH
// connections, etcd and the apiserver together into plan steps and checks.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/units"
)

// Options tune a run.
type Options struct {
	State             state.Dir
	Out               io.Writer // progress lines
	AcceptNewHostKeys bool
	Release           release.Options // filled from the inventory; CacheDir/Offline/UpdateLock from flags
	Progress          release.Progress
	// RemoveStaleMembers lets up remove etcd members that are not in the
	// inventory (a rebuilt host) instead of stopping with the command to run.
	RemoveStaleMembers bool
	// ServiceTimeout bounds the wait for one service to become healthy.
	ServiceTimeout time.Duration
}

// Cluster is one inventory's cluster during one run.
type Cluster struct {
	Inv *inventory.Inventory
	opt Options

	mu        sync.Mutex
	renderMu  sync.Mutex // guards manifests and set, filled once
	hosts     map[string]*remote.SSHHost
	set       *release.Set
	manifests map[string]*units.Manifest
	// willRestart is what push planned to mark for restart, per host: a dry
	// run shows the restarts it implies although no marker was written.
	willRestart map[string]map[string]bool
}

// New returns a Cluster; nothing is connected until a step needs it.
func New(inv *inventory.Inventory, opt Options) *Cluster {
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	if opt.ServiceTimeout == 0 {
		opt.ServiceTimeout = 2 * time.Minute
	}
	return &Cluster{Inv: inv, opt: opt, hosts: map[string]*remote.SSHHost{}}
}

// Close closes every SSH connection.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hosts {
		h.Close()
	}
	c.hosts = map[string]*remote.SSHHost{}
}

func (c *Cluster) logf(format string, args ...any) { fmt.Fprintf(c.opt.Out, format+"\n", args...) }

// remoteConfig turns the inventory's SSH settings for h into remote's.
func (c *Cluster) remoteConfig(h inventory.Host) remote.Config {
	s := c.Inv.SSHFor(h)
	cfg := remote.Config{
		Name: h.Name, Address: h.Address, Port: s.Port, User: s.User,
		KnownHostsFile: s.KnownHostsFile, AcceptNewHostKeys: c.opt.AcceptNewHostKeys,
		Sudo: s.Sudo != nil && *s.Sudo,
	}
	if s.IdentityFile != "" {
		cfg.IdentityFiles = []string{s.IdentityFile}
	}
	if s.Bastion != "" {
		b := cfg
		b.Name, b.Bastion, b.Sudo = "bastion "+s.Bastion, nil, false
		hp := s.Bastion
		if i := strings.LastIndex(hp, "@"); i >= 0 {
			b.User, hp = hp[:i], hp[i+1:]
		}
		if host, port, err := net.SplitHostPort(hp); err == nil {
			b.Address = host
			b.Port, _ = strconv.Atoi(port)
		} else {
			b.Address, b.Port = hp, 22
		}
		cfg.Bastion = &b
	}
	return cfg
}

// Host returns the SSH connection to the named host, dialling it once.
func (c *Cluster) Host(ctx context.Context, name string) (*remote.SSHHost, error) {
	c.mu.Lock()
	h, ok := c.hosts[name]
	c.mu.Unlock()
	if ok {
		return h, nil
	}
	var ih *inventory.Host
	for _, x := range c.Inv.Hosts() {
		if x.Name == name {
			ih = &x
		}
	}
	if ih == nil {
		return nil, fmt.Errorf("no host %q in the inventory", name)
	}
	h, err := remote.Dial(ctx, c.remoteConfig(*ih))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.hosts[name]; ok {
		h.Close()
		return old, nil
	}
	c.hosts[name] = h
	return h, nil
}

// dialVia returns a dialer that reaches addr through the SSH connection of
// the control-plane host whose address it is, so no port of the cluster has
// to be open to this machine.
func (c *Cluster) dialVia() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		name := c.Inv.ControlPlane[0].Name
		for _, h := range c.Inv.ControlPlane {
			if h.IP() == host || h.Address == host {
				name = h.Name
			}
		}
		sh, err := c.Host(ctx, name)
		if err != nil {
			return nil, err
		}
		return sh.Client().DialContext(ctx, "tcp", addr)
	}
}

// caPool is the cluster CA as a pool.
func (c *Cluster) caPool(name string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(c.opt.State.Cert(name))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", c.opt.State.Cert(name))
	}
	return pool, nil
}

// Etcd connects to etcd with the apiserver's etcd client certificate, through SSH.
func (c *Cluster) Etcd() (*etcd.Client, error) {
	pool, err := c.caPool("ca")
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(c.opt.State.Cert("apiserver-etcd-client"), c.opt.State.Key("apiserver-etcd-client"))
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate: %w", err)
	}
	d := c.dialVia()
	return etcd.New(etcd.Config{
		Endpoints: c.etcdEndpoints(),
		TLS:       &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Dial:      func(ctx context.Context, addr string) (net.Conn, error) { return d(ctx, "tcp", addr) },
	})
}

func (c *Cluster) etcdEndpoints() []string {
	var eps []string
	for _, h := range c.Inv.ControlPlane {
		eps = append(eps, c.etcdEndpoint(h))
	}
	return eps
}

func (c *Cluster) etcdEndpoint(h inventory.Host) string {
	return "https://" + net.JoinHostPort(h.IP(), strconv.Itoa(units.EtcdClientPort))
}

func (c *Cluster) etcdWanted() []etcd.Wanted {
	var w []etcd.Wanted
	for _, h := range c.Inv.ControlPlane {
		w = append(w, etcd.Wanted{Name: h.Name, PeerURL: "https://" + net.JoinHostPort(h.IP(), strconv.Itoa(units.EtcdPeerPort))})
	}
	return w
}

// Kube is a client of the apiserver on host h (admin credentials, through SSH).
func (c *Cluster) Kube(h inventory.Host) (kubernetes.Interface, error) {
	server := "https://" + net.JoinHostPort(h.IP(), "6443")
	cs, _, err := kube.Client(c.opt.State.Kubeconfig("admin"), server, c.dialVia())
	return cs, err
}
