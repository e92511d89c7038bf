// Package cluster is `hardway up` and `hardway verify`: it ties the
// inventory, the PKI, the release set, the rendered manifests, the SSH
// connections, etcd and the apiserver together into plan steps and checks.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
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
	// ReplaceIdentity lets up replace the hosts' CAs, service-account key
	// and encryption key with the state directory's (see identity.go).
	ReplaceIdentity bool
	// Renew names the leaf certificates `hardway certs renew` reissues
	// (RenewSteps): push then sends only their files, and counts them as
	// changed in a dry run too, where they are not reissued yet.
	Renew []string
	// Rehash makes verify read every byte of every pushed file instead of
	// trusting the hosts' stat cache for the files whose stat is unchanged.
	Rehash bool
	// ServiceTimeout bounds the wait for one service to become healthy.
	ServiceTimeout time.Duration
	// Connect opens the connection to one host; nil: SSH (remote.Dial).
	// Tunnels to etcd and the apiservers go through hosts that are also a
	// remote.Dialer. Unit tests pass fakes here.
	Connect func(ctx context.Context, cfg remote.Config) (remote.Host, error)
	// Trace is told about every command run on a host (the run log).
	Trace func(remote.Trace)
	// Scope narrows what push writes to some hosts and components (one
	// phase of 'hardway upgrade apply'); nil: everything.
	Scope *Scope
	// Upgrading is set by 'hardway upgrade apply' for its own runs: up
	// refuses to run while an upgrade is half-way, but an upgrade's phases
	// are runs of up.
	Upgrading bool
}

// Scope is the part of the cluster one upgrade phase moves.
type Scope struct {
	Hosts []string // only these hosts get files
	// Components: on those hosts only the files these components read
	// (a binary, its unit, its config); nil: every file of the host. Files
	// no component reads (kubectl, etcdctl) wait for the last phase.
	Components []string
}

// keeps says whether the scope lets push write f on host.
func (s *Scope) keeps(host string, f units.File) bool {
	if !slices.Contains(s.Hosts, host) {
		return false
	}
	if s.Components == nil {
		return true
	}
	for _, c := range f.Components {
		if slices.Contains(s.Components, c) {
			return true
		}
	}
	return false
}

// Cluster is one inventory's cluster during one run.
type Cluster struct {
	Inv *inventory.Inventory
	opt Options

	mu      sync.Mutex // guards hosts, dialing and down
	hosts   map[string]remote.Host
	dialing map[string]*dialing
	down    map[string]dialFailure // see Host

	lookupMu  sync.Mutex // guards the lookup* fields (see lookupSet)
	lookedUp  bool
	lookupRes *release.Set
	lookupErr error

	renderMu  sync.Mutex // guards manifests and set
	set       *release.Set
	manifests map[string]*units.Manifest

	// newEtcd and newKube make the etcd and Kubernetes clients; tests
	// replace them with fakes.
	newEtcd func() (etcdAPI, error)
	newKube func(h inventory.Host) (kubernetes.Interface, error)
	// healthProbe asks a component's health endpoint once (probe); tests
	// replace it, as their fake hosts forward no connections.
	healthProbe func(ctx context.Context, h inventory.Host, comp string) error
	// queryDNS asks a DNS server from a host for a name's A records
	// (query); tests replace it, for the same reason.
	queryDNS func(ctx context.Context, host, server, name string) ([]netip.Addr, error)
	// maint reaches etcd's maintenance calls and the apiservers' readiness
	// for 'hardway etcd defrag' (see maintenance.go); tests replace it.
	maint maintHooks

	kubeMu    sync.Mutex // guards kubes and apiPicked
	kubes     map[string]kubernetes.Interface
	apiPicked *inventory.Host // see apiHost
	apiPickMu sync.Mutex      // one apiHost pick at a time

	// freshHeartbeat makes a worker's Ready wait also wait for its kubelet
	// to renew its Lease while it is watched: a Node stays Ready for 40 s
	// after its kubelet stopped, so Ready alone does not prove that the
	// restarted kubelet reaches the apiserver (a cluster CA rotation, whose
	// next worker must not restart before).
	freshHeartbeat bool
}

// etcdAPI is what the steps and checks ask etcd; *etcd.Client is one.
type etcdAPI interface {
	Members(ctx context.Context) ([]etcd.Member, error)
	Health(ctx context.Context, endpoint string) error
	Status(ctx context.Context, endpoint string) (etcd.Status, error)
	Alarms(ctx context.Context) ([]string, error)
	Get(ctx context.Context, key string) ([]byte, error)
	AddMember(ctx context.Context, peerURL string) (uint64, error)
	RemoveMember(ctx context.Context, id uint64) error
	Close() error
}

// New returns a Cluster; nothing is connected until a step needs it.
func New(inv *inventory.Inventory, opt Options) *Cluster {
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	if opt.ServiceTimeout == 0 {
		opt.ServiceTimeout = 2 * time.Minute
	}
	if opt.Connect == nil {
		opt.Connect = func(ctx context.Context, cfg remote.Config) (remote.Host, error) {
			h, err := remote.Dial(ctx, cfg)
			if err != nil {
				return nil, err // not a typed nil inside the interface
			}
			return h, nil
		}
	}
	c := &Cluster{Inv: inv, opt: opt, hosts: map[string]remote.Host{}}
	c.newEtcd = c.dialEtcd
	c.newKube = c.dialKube
	c.healthProbe = c.probe
	c.queryDNS = c.query
	return c
}

// Close closes every connection.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hosts {
		if cl, ok := h.(remote.Closer); ok {
			cl.Close()
		}
	}
	c.hosts = map[string]remote.Host{}
}

// releaseSet is the release set found or fetched so far (nil: none yet).
func (c *Cluster) releaseSet() *release.Set {
	c.renderMu.Lock()
	defer c.renderMu.Unlock()
	return c.set
}

func (c *Cluster) setReleaseSet(s *release.Set) {
	c.renderMu.Lock()
	c.set = s
	c.renderMu.Unlock()
}

// manifest is host's rendered manifest (after ensureRendered).
func (c *Cluster) manifest(host string) *units.Manifest {
	c.renderMu.Lock()
	m := c.manifests[host]
	c.renderMu.Unlock()
	return c.present(m)
}

// present is m without the optional files the state directory does not
// have (the etcd CA of a cluster made before it existed): nothing to push
// or compare. Read at each call: a rotation writes them during a run.
func (c *Cluster) present(m *units.Manifest) *units.Manifest {
	if m == nil {
		return nil
	}
	var files []units.File
	for _, f := range m.Files {
		if f.Source != nil && f.Source.Optional {
			if _, err := os.Stat(f.Source.LocalPath(c.opt.State)); err != nil {
				continue
			}
		}
		files = append(files, f)
	}
	if len(files) == len(m.Files) {
		return m
	}
	out := *m
	out.Files = files
	return &out
}

func (c *Cluster) logf(format string, args ...any) { fmt.Fprintf(c.opt.Out, format+"\n", args...) }

// planf is logf for a Plan: a plan the runner makes ahead of its turn
// prints into the runner's buffer (plan.Out), shown in its turn.
func (c *Cluster) planf(ctx context.Context, format string, args ...any) {
	fmt.Fprintf(plan.Out(ctx, c.opt.Out), format+"\n", args...)
}

// remoteConfig turns the inventory's SSH settings for h into remote's.
func (c *Cluster) remoteConfig(h inventory.Host) remote.Config {
	cfg := RemoteConfig(c.Inv, h, c.opt.AcceptNewHostKeys)
	cfg.Trace = c.opt.Trace
	if cfg.Bastion != nil {
		cfg.Bastion.Trace = c.opt.Trace
	}
	return cfg
}

// RemoteConfig turns inv's SSH settings for h (its own on top of the
// inventory's, the bastion included) into remote's: how every command
// reaches a host, 'hardway init --hosts' too, before its inventory is
// written.
func RemoteConfig(inv *inventory.Inventory, h inventory.Host, acceptNewHostKeys bool) remote.Config {
	s := inv.SSHFor(h)
	cfg := remote.Config{
		Name: h.Name, Address: h.Address, Port: s.Port, User: s.User,
		KnownHostsFile: s.KnownHostsFile, AcceptNewHostKeys: acceptNewHostKeys,
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

// dialFailure is a host's last failed dial.
type dialFailure struct {
	err error
	at  time.Time
}

// redialAfter is how long a failed dial is remembered: the checks and
// steps that ask for an unreachable host within it get the same error at
// once, instead of each waiting out its own connect timeout (verify took
// 30 s with one host powered off: two rounds of 15 s).
const redialAfter = 10 * time.Second

// slowDial is how long a failed dial must have taken to be remembered.
const slowDial = 2 * time.Second

// Host returns the connection to the named host, dialling it once: callers
// that ask while it is being dialled (the checks of verify, plans made
// ahead) wait for that one handshake instead of each making its own.
func (c *Cluster) Host(ctx context.Context, name string) (remote.Host, error) {
	var ih *inventory.Host
	for _, x := range c.Inv.Hosts() {
		if x.Name == name {
			ih = &x
		}
	}
	for {
		c.mu.Lock()
		if h, ok := c.hosts[name]; ok {
			c.mu.Unlock()
			return h, nil
		}
		if f, failed := c.down[name]; failed && time.Since(f.at) < redialAfter {
			c.mu.Unlock()
			return nil, f.err
		}
		if d, ok := c.dialing[name]; ok {
			c.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if d.err == nil {
				return d.h, nil
			}
			if d.cut && ctx.Err() == nil {
				continue // its caller gave up, which says nothing about the host: dial again
			}
			return nil, d.err
		}
		if ih == nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("no host %q in the inventory", name)
		}
		d := &dialing{done: make(chan struct{})}
		if c.dialing == nil {
			c.dialing = map[string]*dialing{}
		}
		c.dialing[name] = d
		c.mu.Unlock()
		start := time.Now()
		h, err := c.opt.Connect(ctx, c.remoteConfig(*ih))
		c.mu.Lock()
		delete(c.dialing, name)
		switch {
		case err == nil:
			delete(c.down, name)
			c.hosts[name] = h
		case ctx.Err() == nil && time.Since(start) >= slowDial:
			// Only a slow failure is remembered (a host that does not
			// answer): a refused connection costs nothing to try again, and
			// may be an sshd that is just starting. A dial the caller gave
			// up on says nothing about the host.
			if c.down == nil {
				c.down = map[string]dialFailure{}
			}
			c.down[name] = dialFailure{err, time.Now()}
		}
		c.mu.Unlock()
		d.h, d.err, d.cut = h, err, err != nil && ctx.Err() != nil
		close(d.done)
		return h, err
	}
}

// dialing is a connection being made; done is closed when it is there or
// failed (cut: because its caller's context ended).
type dialing struct {
	done chan struct{}
	h    remote.Host
	err  error
	cut  bool
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
		return c.dialFrom(ctx, name, addr)
	}
}

// dialFrom opens a TCP connection to addr from the named host's side.
func (c *Cluster) dialFrom(ctx context.Context, host, addr string) (net.Conn, error) {
	sh, err := c.Host(ctx, host)
	if err != nil {
		return nil, err
	}
	d, ok := sh.(remote.Dialer)
	if !ok {
		return nil, fmt.Errorf("%s: this connection cannot open tunnels", host)
	}
	return d.DialContext(ctx, "tcp", addr)
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

// clusterTrust is what hardway's own clients of the apiservers and the
// kubelets trust: the cluster CA's trust bundle (both CAs during a rotation
// of the cluster CA, whose apiservers serve from the old CA or the new), or
// the CA itself in a state directory made before the bundle existed (until
// the next pki run writes it).
func (c *Cluster) clusterTrust() (*x509.CertPool, error) {
	pool, err := c.caPool(pki.CATrustBundle)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return c.caPool(pki.CA)
	}
	return pool, err
}

// etcd is a client of the cluster's etcd.
func (c *Cluster) etcd() (etcdAPI, error) { return c.newEtcd() }

// dialEtcd connects to etcd with the apiserver's etcd client certificate, through SSH.
func (c *Cluster) dialEtcd() (etcdAPI, error) {
	// What etcd's members present is what the trust bundle holds: the etcd
	// CA, both CAs during a rotation, the cluster CA in a cluster made
	// before the etcd CA (whose state directory may not have the bundle
	// until the next pki run).
	pool, err := c.caPool(pki.EtcdTrustBundle)
	if err != nil {
		if legacy, lerr := pki.EtcdLegacy(c.opt.State); lerr != nil || !legacy {
			return nil, err
		}
		if pool, err = c.caPool(pki.CA); err != nil {
			return nil, err
		}
	}
	cert, err := tls.LoadX509KeyPair(c.opt.State.Cert("apiserver-etcd-client"), c.opt.State.Key("apiserver-etcd-client"))
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate: %w", err)
	}
	d := c.dialVia()
	cli, err := etcd.New(etcd.Config{
		Endpoints: c.etcdEndpoints(),
		TLS:       &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Dial:      func(ctx context.Context, addr string) (net.Conn, error) { return d(ctx, "tcp", addr) },
	})
	if err != nil {
		return nil, err
	}
	return cli, nil
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
func (c *Cluster) Kube(h inventory.Host) (kubernetes.Interface, error) { return c.newKube(h) }

// dialKube makes one client per host and admin kubeconfig: its
// connections (through the host's SSH connection) are kept and reused by
// every step and check, instead of a TLS handshake each. A kubeconfig
// rewritten since (new credentials) gets a new client.
func (c *Cluster) dialKube(h inventory.Host) (kubernetes.Interface, error) {
	c.kubeMu.Lock()
	defer c.kubeMu.Unlock()
	key := h.Name
	if fi, err := os.Stat(c.opt.State.Kubeconfig("admin")); err == nil {
		key += " " + fi.ModTime().String() + " " + strconv.FormatInt(fi.Size(), 10)
	}
	if cs, ok := c.kubes[key]; ok {
		return cs, nil
	}
	server := "https://" + net.JoinHostPort(h.IP(), strconv.Itoa(units.APIServerPort))
	cs, _, err := kube.Client(c.opt.State.Kubeconfig("admin"), server, c.dialVia())
	if err != nil {
		return nil, err
	}
	if c.kubes == nil {
		c.kubes = map[string]kubernetes.Interface{}
	}
	c.kubes[key] = cs
	return cs, nil
}
