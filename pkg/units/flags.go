package units

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
)

// Flag is one command-line flag of a component, with why it is there.
type Flag struct {
	Name   string // without the leading "--"
	Value  string
	Reason string // one line, for 'hardway render --explain'
}

// Arg is the flag as it appears on the command line.
func (f Flag) Arg() string { return "--" + f.Name + "=" + f.Value }

// Args are the flags as command-line arguments, in the flags' order.
func Args(flags []Flag) []string {
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i] = f.Arg()
	}
	return out
}

// flagDef is a row of a component's flag table. when is a go-version
// constraint on the component's version ("" = every supported version):
// flags come and go between releases, and a flag a binary does not know
// stops it from starting.
type flagDef struct {
	when   string
	name   string
	value  string
	reason string
}

// Flags returns the flags component runs with on host h, sorted by name.
func Flags(inv *inventory.Inventory, h inventory.Host, component string) ([]Flag, error) {
	c, ok := Lookup(component)
	if !ok {
		return nil, fmt.Errorf("unknown component %q", component)
	}
	return c.hostFlags(inv, h)
}

func (c Component) hostFlags(inv *inventory.Inventory, h inventory.Host) ([]Flag, error) {
	v := c.version(inv)
	if v == nil {
		return nil, fmt.Errorf("%s: no version in the inventory", c.Name)
	}
	return selectFlags(c.Name, c.flags(inv, h), v)
}

func selectFlags(component string, defs []flagDef, v *version.Version) ([]Flag, error) {
	// Pre-releases (v3.7.0-rc.1) fail every constraint without a
	// pre-release of their own; gate on the release they lead up to.
	core := v.Core()
	var out []Flag
	for _, d := range defs {
		if d.when != "" {
			c, err := version.NewConstraint(d.when)
			if err != nil {
				return nil, fmt.Errorf("%s --%s: constraint %q: %w", component, d.name, d.when, err)
			}
			if !c.Check(core) {
				continue
			}
		}
		if err := checkArg(d.name, d.value); err != nil {
			return nil, fmt.Errorf("%s: %w", component, err)
		}
		out = append(out, Flag{Name: d.name, Value: d.value, Reason: d.reason})
	}
	slices.SortFunc(out, func(a, b Flag) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("%s %s: --%s set twice", component, v, out[i].Name)
		}
	}
	return out, nil
}

// checkArg keeps values to characters that mean nothing to systemd's
// ExecStart parser: no quotes, spaces, backslashes, "$" (variable
// expansion) or "%" (specifiers). Anything else would be rewritten by
// systemd before the binary sees it.
func checkArg(name, value string) error {
	if name == "" || value == "" {
		return fmt.Errorf("--%s: empty name or value", name)
	}
	for _, r := range name + value {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("-_=,./:*[]@", r):
		default:
			return fmt.Errorf("--%s=%s: character %q is not safe in a systemd ExecStart line", name, value, r)
		}
	}
	return nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func etcdClientURL(h inventory.Host) string { return "https://" + hostPort(h.IP(), EtcdClientPort) }
func etcdPeerURL(h inventory.Host) string   { return "https://" + hostPort(h.IP(), EtcdPeerPort) }

// loopback is the loopback address of the host's address family.
func loopback(h inventory.Host) string {
	if a, err := netip.ParseAddr(h.IP()); err == nil && a.Is6() && !a.Is4In6() {
		return "::1"
	}
	return "127.0.0.1"
}

// anyAddr listens on every address of the host's family.
func anyAddr(h inventory.Host) string {
	if loopback(h) == "::1" {
		return "::"
	}
	return "0.0.0.0"
}

// etcdCredentials are the certificates and keys etcd reads, as systemd
// hands them to it (LoadCredential=): etcd runs as the user etcd, and the
// files stay root's.
var etcdCredentials = []credential{
	{"ca.crt", EtcdCACert},
	{"server.crt", EtcdServerCert}, {"server.key", EtcdServerKey},
	{"peer.crt", EtcdPeerCert}, {"peer.key", EtcdPeerKey},
}

// etcdCred is the path etcd reads credential id at: the unit's
// credentials directory ($CREDENTIALS_DIRECTORY), which systemd fills from
// the root-owned file at every start. Its path, not the %d specifier:
// hardway's ExecStart lines carry no specifiers (a stray % is refused).
func etcdCred(id string) string {
	if !slices.ContainsFunc(etcdCredentials, func(c credential) bool { return c.ID == id }) {
		panic("units: no etcd credential " + id)
	}
	return CredentialDir(Etcd+".service") + "/" + id
}

func etcdFlags(inv *inventory.Inventory, h inventory.Host) []flagDef {
	var cluster []string
	for _, m := range inv.ControlPlane {
		cluster = append(cluster, m.Name+"="+etcdPeerURL(m))
	}
	return []flagDef{
		{"", "name", h.Name, "member name; must match this host's entry in --initial-cluster"},
		{"", "data-dir", EtcdDataDir, "where the member keeps its data (mode 0700)"},
		{"", "advertise-client-urls", etcdClientURL(h), "the URL clients (the apiservers) are told to use for this member"},
		{"", "listen-client-urls", etcdClientURL(h) + ",https://" + hostPort(loopback(h), EtcdClientPort),
			"serve clients on the host address and on loopback (etcdctl on the host)"},
		{"", "initial-advertise-peer-urls", etcdPeerURL(h), "the URL the other members use to reach this one"},
		{"", "listen-peer-urls", etcdPeerURL(h), "serve Raft traffic from the other members"},
		{"", "initial-cluster", strings.Join(cluster, ","), "every control-plane host is a member, over https"},
		{"", "initial-cluster-token", inv.Cluster, "keeps members of another cluster on the same network from joining this one"},
		{"", "cert-file", etcdCred("server.crt"), "serving certificate for clients (etcd-server-" + h.Name + ")"},
		{"", "key-file", etcdCred("server.key"), "key of the serving certificate"},
		{"", "trusted-ca-file", etcdCred("ca.crt"), "clients must present a certificate from etcd's own CA (the etcd trust bundle; a cluster made before the etcd CA: the cluster CA, until 'hardway rotate ca --which etcd')"},
		{"", "client-cert-auth", "true", "reject clients without a certificate from the CA"},
		{"", "peer-cert-file", etcdCred("peer.crt"), "certificate presented to and accepted from peers (etcd-peer-" + h.Name + ")"},
		{"", "peer-key-file", etcdCred("peer.key"), "key of the peer certificate"},
		{"", "peer-trusted-ca-file", etcdCred("ca.crt"), "peer certificates must be signed by etcd's own CA (the etcd trust bundle)"},
		{"", "peer-client-cert-auth", "true", "reject peers without a certificate from the CA"},
		// 3.5 takes one CN only; the members' CNs are their names.
		{">= 3.6.0", "peer-cert-allowed-cn", strings.Join(memberNames(inv), ","),
			"only the members' peer certificates (CN = member name) may join Raft, even were another certificate from the same CA stolen"},
		{"", "listen-metrics-urls", "http://" + hostPort("127.0.0.1", EtcdMetricsPort), "/health and /metrics on loopback without client certificates, for probes"},
		{"< 3.6.0", "snapshot-count", "10000", "3.5 keeps 100000 Raft entries in memory by default; 3.6 lowered it to 10000 (kubeadm's value)"},
		{"< 3.6.0", "experimental-initial-corrupt-check", "true", "check the data for corruption before serving (3.5 spelling)"},
		{"< 3.6.0", "experimental-watch-progress-notify-interval", "5s", "watch progress notifications the apiserver's watch cache relies on (3.5 spelling)"},
		{">= 3.6.0", "feature-gates", "InitialCorruptCheck=true", "check the data for corruption before serving (feature gate since 3.6; --experimental-* is gone in 3.7)"},
		{">= 3.6.0", "watch-progress-notify-interval", "5s", "watch progress notifications the apiserver's watch cache relies on (3.6+ spelling)"},
	}
}

func memberNames(inv *inventory.Inventory) []string {
	var out []string
	for _, m := range inv.ControlPlane {
		out = append(out, m.Name)
	}
	return out
}

func apiserverFlags(inv *inventory.Inventory, h inventory.Host) []flagDef {
	var servers []string
	for _, m := range inv.ControlPlane {
		servers = append(servers, etcdClientURL(m))
	}
	issuer := "https://kubernetes.default.svc." + inv.Network.ClusterDomain
	return []flagDef{
		{"", "advertise-address", h.IP(), "the address other members and the kubernetes Service endpoints publish for this apiserver"},
		{"", "bind-address", anyAddr(h), "serve on every address of the host"},
		{"", "secure-port", strconv.Itoa(APIServerPort), "the port kubeconfigs point at (127.0.0.1:6443 for the local components)"},
		{"", "allow-privileged", "true", "CNI and kube-proxy DaemonSets need privileged pods"},
		{"", "authorization-mode", "Node,RBAC", "kubelets limited to their own node's objects; RBAC for everyone else"},
		{"", "enable-admission-plugins", "NodeRestriction", "stops a kubelet from editing other nodes or their pods"},
		{"", "enable-bootstrap-token-auth", "true", "workers may join with bootstrap tokens (bootstrapsigner/tokencleaner run in the controller-manager)"},
		{"", "client-ca-file", CATrustCert, "client certificates signed by the cluster CA authenticate users and components (the cluster CA's trust bundle: both CAs during 'hardway rotate ca --which kubernetes')"},
		{"", "tls-cert-file", APIServerCert, "serving certificate (SANs: every control-plane address, the first service IP, kubernetes.default...)"},
		{"", "tls-private-key-file", APIServerKey, "key of the serving certificate"},
		{"", "service-cluster-ip-range", inv.Network.ServiceCIDR, "ALWAYS set: the default 10.0.0.0/24 would give the kubernetes Service an IP outside the serving certificate"},
		{"", "service-account-issuer", issuer, "stable https issuer URL in service-account tokens; also the default --api-audiences"},
		{"", "service-account-key-file", ServiceAccountPub, "public key that verifies service-account tokens"},
		{"", "service-account-signing-key-file", ServiceAccountKey, "private key that signs service-account tokens (required since 1.20)"},
		{"", "etcd-servers", strings.Join(servers, ","), "every etcd member over https, so losing one member's host does not stop this apiserver"},
		{"", "etcd-cafile", EtcdTrustCert, "etcd's serving certificates are signed by etcd's own CA (the etcd trust bundle, as etcd's --trusted-ca-file)"},
		{"", "etcd-certfile", EtcdClientCert, "client certificate etcd requires (--client-cert-auth)"},
		{"", "etcd-keyfile", EtcdClientKey, "key of the etcd client certificate"},
		{"", "kubelet-client-certificate", KubeletClientCert, "certificate for logs/exec/port-forward on kubelets (CN kube-apiserver-kubelet-client, bound by RBAC)"},
		{"", "kubelet-client-key", KubeletClientKey, "key of the kubelet client certificate"},
		{"", "kubelet-certificate-authority", CATrustCert, "verify kubelets' serving certificates instead of trusting any (the cluster CA's trust bundle)"},
		{"", "kubelet-preferred-address-types", "InternalIP,Hostname", "reach kubelets by their --node-ip: hard-way hosts often lack DNS for node names (and have no ExternalIP)"},
		{"", "encryption-provider-config", EncryptionConfig, "encrypt Secrets at rest in etcd"},
		{">= 1.26.0", "encryption-provider-config-automatic-reload", "true", "pick up a rotated encryption key without a restart"},
		{"", "requestheader-client-ca-file", FrontProxyTrustCert, "aggregation layer: trust the front-proxy CA (the front-proxy trust bundle) for requests proxied to extension apiservers"},
		{"", "requestheader-allowed-names", "front-proxy-client", "only the front-proxy client certificate may assert request headers"},
		{"", "requestheader-username-headers", "X-Remote-User", "aggregation layer: user header (kubeadm's value)"},
		{"", "requestheader-group-headers", "X-Remote-Group", "aggregation layer: group header (kubeadm's value)"},
		{"", "requestheader-extra-headers-prefix", "X-Remote-Extra-", "aggregation layer: extra-attribute header prefix (kubeadm's value)"},
		{"", "proxy-client-cert-file", FrontProxyClientCert, "certificate the apiserver presents to extension apiservers (metrics-server)"},
		{"", "proxy-client-key-file", FrontProxyClientKey, "key of the front-proxy client certificate"},
		// The conformance suite's admission-webhook tests timed out
		// without it: the apiserver dialled the webhook Service's ClusterIP,
		// which only kube-proxy makes reachable.
		{"", "enable-aggregator-routing", "true", "the control-plane hosts run no kube-proxy, so a Service's ClusterIP leads nowhere there: admission webhooks, CRD conversion webhooks and extension apiservers are reached at their endpoints' pod IPs, which the pod routes carry"},
		// Without it a restart waits the whole 60 s shutdown timeout for the
		// watches of every client (kubelets, controllers, CoreDNS) on HTTP/2
		// connections, which never end by themselves: each host of a rolling
		// restart cost a minute.
		{">= 1.27.0", "shutdown-watch-termination-grace-period", "10s", "at shutdown, end open watches (clients re-establish them on another apiserver) instead of waiting out the 60 s server shutdown timeout"},
		{"", "audit-policy-file", AuditPolicy, "what to audit: metadata of every request, never bodies"},
		{"", "audit-log-path", AuditLog, "write the audit log to a file"},
		{"", "audit-log-maxage", "30", "keep rotated audit logs 30 days"},
		{"", "audit-log-maxbackup", "10", "keep at most 10 rotated audit logs"},
		{"", "audit-log-maxsize", "100", "rotate the audit log at 100 MB"},
		{"", "admission-control-config-file", AdmissionConfig, "Pod Security's cluster-wide default level (inventory podSecurity; baseline unless set)"},
		{"", "profiling", "false", "no /debug/pprof: it shows the process's internals to anyone allowed to read it, and nobody tunes the apiserver here (CIS 1.2.15)"},
		// Without it a projected token the kubelet asked a 1 h expiry for is
		// issued valid for a year (a safety net for clients that never
		// reloaded tokens, before 1.21); client-go, CoreDNS and kube-proxy
		// reload theirs.
		{"", "service-account-extend-token-expiration", "false", "service-account tokens expire when they say they do, not a year later (CIS 1.2.30)"},
		{"", "tls-min-version", "VersionTLS12", "no TLS 1.0 or 1.1 on 6443"},
		{"", "tls-cipher-suites", strings.Join(strongCiphers, ","), "TLS 1.2 only with forward-secret AEAD ciphers (TLS 1.3's are always on and not configurable)"},
	}
}

// strongCiphers are TLS 1.2's ECDHE AEAD suites, the ones the CIS benchmark
// lists as strong; Go's names, as the components' --tls-cipher-suites take.
var strongCiphers = []string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}

func controllerManagerFlags(inv *inventory.Inventory) []flagDef {
	return []flagDef{
		{"", "bind-address", "127.0.0.1", "serve health and metrics on loopback only"},
		{"", "secure-port", strconv.Itoa(ControllerManagerPort), "the secure port (the insecure 10252 and --port are gone since 1.24)"},
		{"", "kubeconfig", ControllerManagerKube, "how to reach the local apiserver (https://127.0.0.1:6443)"},
		{"", "authentication-kubeconfig", ControllerManagerKube, "delegate authentication of /metrics callers to the apiserver"},
		{"", "authorization-kubeconfig", ControllerManagerKube, "delegate authorization of /metrics callers to the apiserver"},
		{"", "leader-elect", "true", "one active controller-manager among the control-plane hosts"},
		{"", "use-service-account-credentials", "true", "each controller uses its own service account, so RBAC applies per controller"},
		{"", "controllers", "*,bootstrapsigner,tokencleaner", "the default controllers plus the two bootstrap-token ones"},
		{"", "cluster-name", inv.Cluster, "prefix of cloud resources and the name in signed kubeconfigs"},
		allocateNodeCIDRs(inv),
		{"", "cluster-cidr", inv.Network.PodCIDR, "the pod network that node slices come from"},
		{"", "service-cluster-ip-range", inv.Network.ServiceCIDR, "must match the apiserver's"},
		{"", "client-ca-file", CATrustCert, "authenticate client certificates signed by the cluster CA (the cluster CA's trust bundle)"},
		{"", "requestheader-client-ca-file", FrontProxyTrustCert, "trust requests proxied by the aggregation layer (the front-proxy trust bundle)"},
		{"", "root-ca-file", CATrustCert, "CA bundle put into every service-account token secret and kube-root-ca.crt (the trust bundle: pods trust old and new CA during a rotation)"},
		{"", "cluster-signing-cert-file", CACert, "sign approved CSRs (kubelet certificates) with the cluster CA itself (the new one, once a rotation made it)"},
		{"", "cluster-signing-key-file", CAKey, "key of the cluster CA, for CSR signing"},
		{"", "service-account-private-key-file", ServiceAccountKey, "sign legacy service-account token secrets with the same key as the apiserver"},
		{"", "profiling", "false", "no /debug/pprof (CIS 1.3.2)"},
		{"", "terminated-pod-gc-threshold", "1000", "delete terminated pods beyond 1000, not 12500: a small cluster's etcd and pod lists stay small (CIS 1.3.1)"},
	}
}

// allocateNodeCIDRs: with hardway's bridge CNI, hardway gives each worker
// its subnet (state pod-subnets.yaml) and writes it into the CNI config; the
// controller-manager would pick its own, in the order nodes register, and
// the Node's podCIDR would then differ from the pods' real addresses.
func allocateNodeCIDRs(inv *inventory.Inventory) flagDef {
	if inv.Network.CNI == inventory.CNINone {
		return flagDef{"", "allocate-node-cidrs", "true", "give each node a slice of the pod network (network.cni none: your CNI may read it)"}
	}
	return flagDef{"", "allocate-node-cidrs", "false", "hardway allocates each worker's pod subnet (pod-subnets.yaml) for the bridge CNI; a second allocator would disagree"}
}

func schedulerFlags() []flagDef {
	return []flagDef{
		{"", "config", SchedulerConfig, "KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): kubeconfig and leader election"},
		{"", "bind-address", "127.0.0.1", "serve health and metrics on loopback only"},
		{"", "secure-port", strconv.Itoa(SchedulerPort), "the secure port (the insecure 10251 is gone)"},
		{"", "authentication-kubeconfig", SchedulerKube, "delegate authentication of /metrics callers to the apiserver"},
		{"", "authorization-kubeconfig", SchedulerKube, "delegate authorization of /metrics callers to the apiserver"},
	}
}
