// Package lab runs hardway's practice hosts on one Linux machine: each host is
// a systemd-nspawn container booting real systemd with real OpenSSH, on its
// own overlay of one cached debootstrap rootfs, in its own network namespace
// joined by a veth to a bridge the lab creates (10.240.0.0/24 by default, the
// tutorial's addresses). `up` writes an inventory for them; `down` removes
// everything `up` created, also after a crash, from the state it recorded.
//
// Everything here needs root and Linux; it shells out to ip, debootstrap and
// systemd-nspawn, the tools a learner would use by hand.
package lab

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/usererr"
)

// Config says which lab to run. The zero value of every field means its default.
type Config struct {
	Dir   string // where id_ed25519, known_hosts, ssh_config, inventory.yaml go; default "lab"
	Hosts int    // control-plane hosts controller-1..N at .11, .12, ...; default 3
	// Workers are container hosts worker-1..N at .21, .22, ...: the privileges
	// containerd, kubelet and kube-proxy need (see worker.go); default 0.
	Workers int
	Net     string // the /24 as "10.240.0" or "10.240.0.0/24"; default 10.240.0
	Prefix  string // starts every netns, link, cgroup and machine name; default "hw"

	Root    string // state and overlays: Root/lab/<prefix>; default /var/tmp/hardway
	BaseDir string // cached debootstrap rootfs; default Root/lab-base
	Mirror  string // release mirror for the inventory; default $HARDWAY_MIRROR or Root/mirror

	DebianMirror string // default: from this machine's apt configuration
	Suite        string // default: from this machine's apt configuration
	// HostSuites gives single hosts another Debian suite than Suite (by
	// host name: worker-2 -> trixie), for a cluster that mixes releases.
	// Each suite has its own cached base.
	HostSuites map[string]string

	KubernetesVersion string // for the inventory; default v1.36.3
	EtcdVersion       string // default v3.6.16

	// ServeMirror serves Mirror over HTTP on the bridge address (MirrorURL)
	// from Up until Down, so that lab hosts can download from it.
	ServeMirror bool
	// FetchOnHosts (implies ServeMirror) writes the inventory for
	// releases.fetchOn: hosts: every release and image URL on the lab's
	// mirror server (plain http, so allowHTTP: true).
	FetchOnHosts bool

	BootTimeout time.Duration // per host, for sshd and systemd; default 2 minutes
	Log         io.Writer     // progress lines; default io.Discard
}

// Defaults for Config.
const (
	DefaultDir     = "lab"
	DefaultHosts   = 3
	DefaultWorkers = 0
	// MaxHosts and MaxWorkers keep the addresses apart: controllers .11-.20,
	// workers .21-.40.
	MaxHosts                 = 20
	MaxWorkers               = 20
	DefaultNet               = "10.240.0"
	DefaultPrefix            = "hw"
	DefaultRoot              = "/var/tmp/hardway"
	DefaultKubernetesVersion = "v1.36.3"
	DefaultEtcdVersion       = "v3.6.16"
)

// Lab is one lab, identified by its prefix.
type Lab struct {
	cfg Config
	net netip.Prefix
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,5}$`)

// New fills in defaults and validates cfg.
func New(cfg Config) (*Lab, error) {
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.Hosts == 0 {
		cfg.Hosts = DefaultHosts
	}
	if cfg.Net == "" {
		cfg.Net = DefaultNet
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.BaseDir == "" {
		cfg.BaseDir = filepath.Join(cfg.Root, "lab-base")
	}
	if cfg.Mirror == "" {
		cfg.Mirror = os.Getenv("HARDWAY_MIRROR")
	}
	if cfg.Mirror == "" {
		cfg.Mirror = filepath.Join(cfg.Root, "mirror")
	}
	if cfg.KubernetesVersion == "" {
		cfg.KubernetesVersion = DefaultKubernetesVersion
	}
	if cfg.EtcdVersion == "" {
		cfg.EtcdVersion = DefaultEtcdVersion
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.FetchOnHosts {
		cfg.ServeMirror = true
	}
	var errs []error
	if cfg.Hosts < 1 || cfg.Hosts > MaxHosts {
		errs = append(errs, fmt.Errorf("--hosts %d: want 1 to %d", cfg.Hosts, MaxHosts))
	}
	if cfg.Workers < 0 || cfg.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("--workers %d: want 0 to %d", cfg.Workers, MaxWorkers))
	} else if cfg.Workers > 0 && cfg.Hosts > workerFirstOctet-controllerFirstOctet {
		errs = append(errs, fmt.Errorf("--hosts %d with --workers: controllers use .11-.20 and workers .21 on; want at most %d hosts",
			cfg.Hosts, workerFirstOctet-controllerFirstOctet))
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		// veth names are at most 15 bytes: <prefix>-c<N>-v must fit
		errs = append(errs, fmt.Errorf("--prefix %q: want 1 to 6 lowercase letters or digits, starting with a letter", cfg.Prefix))
	}
	for host, suite := range cfg.HostSuites {
		if !releaseSuite(suite) {
			errs = append(errs, fmt.Errorf("--host-suite %s=%s: want a Debian release suite, such as trixie", host, suite))
		}
	}
	p, err := parseNet(cfg.Net)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range []*string{&cfg.Dir, &cfg.Root, &cfg.BaseDir, &cfg.Mirror} {
		if a, err := filepath.Abs(*d); err == nil {
			*d = a
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, usererr.WithCode(err, usererr.CodeUsage, "see 'hardway lab up --help'")
	}
	return &Lab{cfg: cfg, net: p}, nil
}

func (l *Lab) stateDir() string  { return filepath.Join(l.cfg.Root, "lab", l.cfg.Prefix) }
func (l *Lab) statePath() string { return filepath.Join(l.stateDir(), "state.json") }
func (l *Lab) bridge() string    { return l.cfg.Prefix + "-br0" }

func (l *Lab) logf(format string, args ...any) {
	fmt.Fprintf(l.cfg.Log, "[lab] "+format+"\n", args...)
}

// Roles of lab hosts.
const (
	RoleController = "controller"
	RoleWorker     = "worker"
)

// HostName is the name of host i (1-based): a DNS-1123 label, as Kubernetes
// wants node names to be.
func HostName(i int) string { return "controller-" + strconv.Itoa(i) }

// WorkerName is the name of worker i (1-based).
func WorkerName(i int) string { return "worker-" + strconv.Itoa(i) }

// plannedHosts is the state of every host before anything is created:
// the controllers, then the workers.
func (l *Lab) plannedHosts() []hostState {
	var hs []hostState
	add := func(role, name, veth string, addr netip.Addr) {
		hs = append(hs, hostState{
			Name:    name,
			Role:    role,
			Machine: l.cfg.Prefix + "-" + name,
			Address: addr.String(),
			Netns:   l.cfg.Prefix + "-" + name,
			Veth:    veth,
			Dir:     filepath.Join(l.stateDir(), name),
		})
	}
	for i := 1; i <= l.cfg.Hosts; i++ {
		add(RoleController, HostName(i), fmt.Sprintf("%s-c%d-v", l.cfg.Prefix, i), hostAddr(l.net, i))
	}
	for i := 1; i <= l.cfg.Workers; i++ {
		add(RoleWorker, WorkerName(i), fmt.Sprintf("%s-w%d-v", l.cfg.Prefix, i), workerAddr(l.net, i))
	}
	return hs
}

// preflight refuses early, with the reason, what cannot work.
func preflight(needTools ...string) error {
	if runtime.GOOS != "linux" {
		return usererr.Errorf("run it on a Linux machine (a VM will do)",
			"hardway lab needs Linux (network namespaces, overlayfs, systemd-nspawn); this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return usererr.Errorf("run it as root: sudo hardway lab ...",
			"hardway lab needs root: it creates network namespaces, a bridge, mounts and containers")
	}
	var missing []string
	for _, t := range needTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return usererr.Errorf("install them: apt-get install systemd-container iproute2 (or run hack/setup.sh)",
			"hardway lab: %s not found", strings.Join(missing, ", "))
	}
	return nil
}
