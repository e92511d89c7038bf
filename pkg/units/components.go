package units

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
)

// Components, in the order they start: etcd first (the apiserver needs a
// quorum), the apiserver before its clients.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// Role says which hosts run a component.
type Role string

const (
	ControlPlane Role = "control-plane"
	Worker       Role = "worker"
	EveryHost    Role = "every-host" // control-plane hosts and workers (the pod routes)
)

// Ports the components listen on. The table rows below are the only other
// place they appear; everything else reads them from a row.
const (
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	EtcdMetricsPort       = 2381 // plain HTTP /health and /metrics, loopback only
	APIServerPort         = 6443
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
)

// Port is one port a component listens on.
type Port struct {
	Number   int
	Name     string // "client", "peer", "secure", ...
	Loopback bool   // bound to 127.0.0.1 only
}

// Health is where a component says it is healthy, on the host's loopback.
// A zero Health (Scheme "") means the component has no HTTP health endpoint.
type Health struct {
	Scheme string // "https" or "http"
	Port   int
	Path   string // "/readyz", "/healthz", "/health"
}

// URL is the health endpoint on host (usually "127.0.0.1").
func (h Health) URL(host string) string {
	if h.Scheme == "" {
		return ""
	}
	return h.Scheme + "://" + net.JoinHostPort(host, strconv.Itoa(h.Port)) + h.Path
}

// Binary is a release binary a component's host needs.
type Binary struct {
	Name string // name in the release set (pkg/release): "etcd", "kubectl", ...
	Path string // where it goes on the host
	// NoRestart: replacing it restarts nothing (etcdctl, kubectl, runc:
	// each container start runs the binary anew).
	NoRestart bool

	bridgeOnly bool // only with network.cni bridge (the bridge CNI's plugins)
}

// Copy is a file a component needs that is copied from the state directory.
type Copy struct {
	Path string // on the host
	Kind SourceKind
	// Name is the PKI, key or kubeconfig name; "{host}" is replaced by
	// the host's name (etcd-server-{host}): each host holds only its own.
	Name string
	// NoRestart: the component does not read it (admin.kubeconfig is for
	// people), so a change restarts nothing.
	NoRestart bool
	// Optional: pushed only when the state directory has it (the etcd CA,
	// which a cluster made before it existed does not have).
	Optional bool
	// onlyIf says whether the inventory wants the file at all (nil: yes).
	onlyIf func(inv *inventory.Inventory) bool
}

// Component is one row of the component table: every fact hardway knows
// about one service, in one place. Render, the flags, 'hardway up' (ports,
// health, restarts) and 'hardway verify' all read the rows.
type Component struct {
	Name    string // "kube-apiserver"
	Unit    string // systemd unit: "kube-apiserver.service"
	Role    Role
	Process string // the process name as ss and /proc/<pid>/comm show it (15 characters at most)
	// Binaries are the release binaries the host gets for this component;
	// the first one is what the unit runs.
	Binaries []Binary
	Ports    []Port
	Health   Health
	// Files are the certificates, keys and kubeconfigs it reads.
	Files []Copy
	// Kubeconfig is the path of the kubeconfig it talks to the apiserver
	// with ("" for etcd). It is also one of Files.
	Kubeconfig string
	// Configs are the config files rendered for it (besides its unit).
	Configs []Config
	// moreConfigs are config files whose paths the inventory names (a
	// hosts.toml per registry); nil: none.
	moreConfigs func(inv *inventory.Inventory) []Config
	// Dirs are the directories it needs before its files are written.
	Dirs []Dir
	// State is what the running service (or a step of hardway's beside it)
	// writes that no manifest lists: data directories and files. 'hardway
	// reset' removes each with everything in it.
	State []string

	unit    unitData // everything in the unit but ExecStart and its arguments
	version func(inv *inventory.Inventory) *version.Version
	flags   func(inv *inventory.Inventory, h inventory.Host) []flagDef
	// enabled says whether a host of the row's role runs it (nil: always).
	enabled func(r *renderer, h inventory.Host) bool
	// unitFile renders a unit that is not a binary with flags (nil: the
	// systemd.service.tmpl with unit, Exec and the flags).
	unitFile func(r *renderer, h inventory.Host) ([]byte, []Setting, error)
}

// Config is a config file rendered for a component.
type Config struct {
	Path string
	// NoRestart: the component picks changes up by itself (containerd
	// watches the CNI directory) or never reads it (crictl's config).
	NoRestart bool
	// render returns the content (nil: not on this host) and its settings
	// with their reasons, for --explain.
	render func(r *renderer, h inventory.Host) ([]byte, []Setting, error)
	// apply is a command run on the host right after the file is written
	// (systemd-sysusers for a sysusers.d file); "": none.
	apply string
}

// Exec is the path of the binary the unit runs ("" for the pod routes,
// which run ip).
func (c Component) Exec() string {
	if len(c.Binaries) == 0 {
		return ""
	}
	return c.Binaries[0].Path
}

// RunsOn reports whether hosts of role run the component (if enabled there).
func (c Component) RunsOn(role Role) bool { return c.Role == role || c.Role == EveryHost }

// Version is the version of the component the inventory asks for (nil if
// the inventory has none parsed, or for the pod routes, which have none).
func (c Component) Version(inv *inventory.Inventory) *version.Version {
	if c.version == nil {
		return nil
	}
	return c.version(inv)
}

func k8sVersion(inv *inventory.Inventory) *version.Version  { return inv.K8s }
func etcdVersion(inv *inventory.Inventory) *version.Version { return inv.Etcd }

// Components is the component table, in start order. It is a function, not
// a variable, so that no caller can change it for everyone else.
func Components() []Component {
	bin := func(name string) Binary { return Binary{Name: name, Path: BinPath(name)} }
	tool := func(name string) Binary { return Binary{Name: name, Path: BinPath(name), NoRestart: true} }
	cert := func(path, name string) Copy { return Copy{Path: path, Kind: SourceCert, Name: name} }
	key := func(path, name string) Copy { return Copy{Path: path, Kind: SourceKey, Name: name} }
	kc := func(path, name string) Copy { return Copy{Path: path, Kind: SourceKubeconfig, Name: name} }
	return append([]Component{
		{
			Name: Etcd, Unit: Etcd + ".service", Role: ControlPlane, Process: "etcd",
			Binaries: []Binary{bin("etcd"), tool("etcdctl"), tool("etcdutl")},
			Ports: []Port{
				{Number: EtcdClientPort, Name: "client"},
				{Number: EtcdPeerPort, Name: "peer"},
				{Number: EtcdMetricsPort, Name: "metrics", Loopback: true},
			},
			Health: Health{Scheme: "http", Port: EtcdMetricsPort, Path: "/health"},
			// Not the data dir: systemd makes it and owns its owner
			// (StateDirectory=), and a chown of it here, under a running
			// root etcd, would leave the files it writes next root's.
			Dirs: []Dir{{EtcdDir, ModePriv, Owner}},
			// The join env: written by up only on a replacement member.
			State: []string{EtcdDataDir, EtcdJoinEnv},
			Files: []Copy{
				cert(EtcdCACert, "etcd-trust-bundle"),
				{Path: EtcdOwnCACert, Kind: SourceCert, Name: "etcd-ca", NoRestart: true, Optional: true},
				{Path: EtcdOwnCAKey, Kind: SourceKey, Name: "etcd-ca", NoRestart: true, Optional: true},
				cert(EtcdServerCert, "etcd-server-{host}"), key(EtcdServerKey, "etcd-server-{host}"),
				cert(EtcdPeerCert, "etcd-peer-{host}"), key(EtcdPeerKey, "etcd-peer-{host}"),
			},
			Configs: []Config{{Path: EtcdSysusersConf, NoRestart: true, render: renderEtcdSysusers, apply: "systemd-sysusers " + EtcdSysusersConf}},
			unit: unitData{Description: "etcd key-value store", Documentation: "https://etcd.io/docs/",
				After: []string{"network-online.target"}, Wants: []string{"network-online.target"},
				Type: "notify", LimitNOFILE: 65536, EnvironmentFile: "-" + EtcdJoinEnv,
				User: EtcdUser, Group: EtcdUser, StateDirectory: strings.TrimPrefix(EtcdDataDir, "/var/lib/"), StateDirectoryMode: "0700",
				Credentials: etcdCredentials},
			version: etcdVersion, flags: etcdFlags,
		},
		{
			Name: APIServer, Unit: APIServer + ".service", Role: ControlPlane, Process: "kube-apiserver",
			Binaries: []Binary{bin(APIServer), tool("kubectl")},
			Ports:    []Port{{Number: APIServerPort, Name: "secure"}},
			Health:   Health{Scheme: "https", Port: APIServerPort, Path: "/readyz"},
			Files: []Copy{
				// What the apiserver trusts for the cluster CA is the bundle
				// (--client-ca-file, --kubelet-certificate-authority); the
				// CA's own certificate stays beside it, read by no apiserver
				// flag, for the identity check and 'hardway state pull'.
				cert(CATrustCert, "ca-trust-bundle"),
				{Path: CACert, Kind: SourceCert, Name: "ca", NoRestart: true},
				cert(APIServerCert, "kube-apiserver"), key(APIServerKey, "kube-apiserver"),
				cert(KubeletClientCert, "apiserver-kubelet-client"), key(KubeletClientKey, "apiserver-kubelet-client"),
				cert(EtcdClientCert, "apiserver-etcd-client"), key(EtcdClientKey, "apiserver-etcd-client"),
				cert(EtcdTrustCert, "etcd-trust-bundle"),
				key(ServiceAccountKey, "service-account"),
				{Path: ServiceAccountPub, Kind: SourcePublicKey, Name: "service-account"},
				// What --requestheader-client-ca-file trusts is the bundle (the
				// CA, both CAs during 'hardway rotate ca --which front-proxy');
				// the CA's own certificate stays beside it, read by no component,
				// for the identity check and 'hardway state pull'.
				cert(FrontProxyTrustCert, "front-proxy-trust-bundle"),
				{Path: FrontProxyCACert, Kind: SourceCert, Name: "front-proxy-ca", NoRestart: true},
				cert(FrontProxyClientCert, "front-proxy-client"), key(FrontProxyClientKey, "front-proxy-client"),
				// The apiserver would reload it by itself; restarting makes a key
				// rotation step certain instead of "within a minute".
				{Path: EncryptionConfig, Kind: SourceEncryptionConfig},
				// For people on the host (kubectl), only when the inventory asks
				// (pki.adminKubeconfigOnHosts): no component and no hardway step
				// reads it there — up, verify and the daemon reach the API with the
				// local one through SSH — and it is system:masters.
				{Path: AdminKubeconfig, Kind: SourceKubeconfig, Name: "admin", NoRestart: true,
					onlyIf: func(inv *inventory.Inventory) bool { return inv.PKI.AdminKubeconfigOnHosts }},
				// Read by no component: kept on every control-plane host, as
				// kubeadm does, so that 'hardway state pull' finds it there.
				{Path: FrontProxyCAKey, Kind: SourceKey, Name: "front-proxy-ca", NoRestart: true},
			},
			Configs: []Config{{Path: AuditPolicy, render: renderAuditPolicy}, {Path: AdmissionConfig, render: renderAdmissionConfig}},
			Dirs:    []Dir{{KubeDir, ModePriv, Owner}, {AuditLogDir, ModePriv, Owner}},
			State:   []string{AuditLogDir},
			// The apiserver reports READY=1 once its listeners are up and its
			// post-start hooks ran, so 'systemctl start' waits for it.
			unit: unitData{Description: "Kubernetes API server",
				Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/",
				After:         []string{"network-online.target", "etcd.service"}, Wants: []string{"network-online.target"},
				Type: "notify", LimitNOFILE: 65536},
			version: k8sVersion, flags: apiserverFlags,
		},
		{
			// comm is cut to 15 characters: "kube-controller".
			Name: ControllerManager, Unit: ControllerManager + ".service", Role: ControlPlane, Process: "kube-controller",
			Binaries: []Binary{bin(ControllerManager)},
			Ports:    []Port{{Number: ControllerManagerPort, Name: "secure", Loopback: true}},
			Health:   Health{Scheme: "https", Port: ControllerManagerPort, Path: "/healthz"},
			Files: []Copy{
				// The CA signs approved CSRs; the bundle authenticates clients
				// and becomes kube-root-ca.crt (--root-ca-file).
				cert(CACert, "ca"), key(CAKey, "ca"),
				cert(CATrustCert, "ca-trust-bundle"),
				key(ServiceAccountKey, "service-account"),
				cert(FrontProxyTrustCert, "front-proxy-trust-bundle"),
				kc(ControllerManagerKube, "kube-controller-manager"),
			},
			Kubeconfig: ControllerManagerKube,
			Dirs:       []Dir{{KubeDir, ModePriv, Owner}},
			unit: unitData{Description: "Kubernetes controller manager",
				Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/",
				After:         []string{"kube-apiserver.service"}, Type: "simple"},
			version: k8sVersion, flags: func(inv *inventory.Inventory, _ inventory.Host) []flagDef { return controllerManagerFlags(inv) },
		},
		{
			Name: Scheduler, Unit: Scheduler + ".service", Role: ControlPlane, Process: "kube-scheduler",
			Binaries:   []Binary{bin(Scheduler)},
			Ports:      []Port{{Number: SchedulerPort, Name: "secure", Loopback: true}},
			Health:     Health{Scheme: "https", Port: SchedulerPort, Path: "/healthz"},
			Files:      []Copy{kc(SchedulerKube, "kube-scheduler")},
			Kubeconfig: SchedulerKube,
			Configs:    []Config{{Path: SchedulerConfig, render: renderSchedulerConfig}},
			Dirs:       []Dir{{KubeDir, ModePriv, Owner}, {ConfigDir, ModeDir, Owner}},
			unit: unitData{Description: "Kubernetes scheduler",
				Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-scheduler/",
				After:         []string{"kube-apiserver.service"}, Type: "simple"},
			version: k8sVersion, flags: func(*inventory.Inventory, inventory.Host) []flagDef { return schedulerFlags() },
		},
	}, workerComponents()...)
}

// Lookup returns the row of the named component.
func Lookup(name string) (Component, bool) {
	cs := Components()
	i := slices.IndexFunc(cs, func(c Component) bool { return c.Name == name })
	if i < 0 {
		return Component{}, false
	}
	return cs[i], true
}

// MustLookup is Lookup for the names declared above; an unknown name is a
// programming error.
func MustLookup(name string) Component {
	c, ok := Lookup(name)
	if !ok {
		panic(fmt.Sprintf("units: no component %q", name))
	}
	return c
}

// Names are the components of exactly that role, in start order
// (Names(ControlPlane): etcd and the three control-plane services). A
// host's own list, with the pod routes where it has some, is its
// Manifest.Components.
func Names(role Role) []string {
	var out []string
	for _, c := range Components() {
		if c.Role == role {
			out = append(out, c.Name)
		}
	}
	return out
}
