// Package pki creates and keeps the cluster's certificates, the
// service-account key pair, the encryption config and the kubeconfigs in the
// local state directory.
//
// The certificates are one table (as kubeadm's certlist.go): a row says who
// signs it, its subject, its usages and how its SANs follow from the
// inventory. Everything else — creating, reusing, reissuing, checking — reads
// the table, so adding a certificate is adding a row.
//
// cfssl is used as a library: initca.New makes the CAs and a local signer
// issues the leaves. Files already on disk are reused byte for byte once they
// verify; a leaf is reissued from the same CA when its SANs no longer match
// the inventory or it is inside its renewal window. A CA is never replaced
// unless asked to.
package pki

import (
	"net/netip"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
)

// Scope says which hosts a table row is issued for.
type Scope int

const (
	Once            Scope = iota // one certificate for the cluster
	PerControlPlane              // one per control-plane host: <name>-<host>
	PerWorker                    // one per worker: <name>-<host>
)

// Extended key usages, in cfssl's spelling.
var (
	serverAuth       = []string{"server auth"}
	clientAuth       = []string{"client auth"}
	serverClientAuth = []string{"server auth", "client auth"}
)

// Cert is one row of the certificate table.
type Cert struct {
	Name    string   // file name in <state>/pki; per-host rows get "-<host>" appended
	CA      string   // name of the signing CA; "" for a CA
	CN      string   // "{host}" is replaced by the host's name
	Org     []string // O: Kubernetes reads it as the user's groups
	Usages  []string // extended key usages ("server auth", "client auth"); CAs have none
	PerHost Scope
	SANs    func(inv *inventory.Inventory, h inventory.Host) []string // nil: no SANs
}

// IsCA reports whether the row is a certificate authority.
func (c Cert) IsCA() bool { return c.CA == "" }

// Names of the CAs.
const (
	CA           = "ca"
	FrontProxyCA = "front-proxy-ca"
	// EtcdCA signs only etcd's certificates and the apiservers' etcd client
	// certificate (see etcdca.go for clusters made before it existed).
	EtcdCA = "etcd-ca"
)

// Table is the certificate table, CAs first. It is a function, not a
// variable, so no caller can change it for everyone else.
func Table() []Cert {
	return []Cert{
		{Name: CA, CN: "kubernetes-ca"},
		// The aggregation layer trusts a separate CA so that a client
		// certificate from the cluster CA can never pose as the front proxy.
		{Name: FrontProxyCA, CN: "front-proxy-ca"},
		// etcd trusts a CA of its own, as kubeadm's etcd does: the cluster CA
		// also signs the workers' kubelet and kube-proxy certificates (and
		// the controller-manager signs approved CSRs with it), and any
		// certificate etcd trusts reads and writes every object, past RBAC,
		// admission and audit.
		{Name: EtcdCA, CN: "etcd-ca"},

		{Name: "admin", CA: CA, CN: "admin", Org: []string{"system:masters"}, Usages: clientAuth},
		{Name: "kube-controller-manager", CA: CA, CN: "system:kube-controller-manager", Usages: clientAuth},
		{Name: "kube-scheduler", CA: CA, CN: "system:kube-scheduler", Usages: clientAuth},
		{Name: "kube-proxy", CA: CA, CN: "system:kube-proxy", Org: []string{"system:node-proxier"}, Usages: clientAuth},
		// The kubelet serves its API with this certificate and logs in to
		// the apiserver with it, hence both usages.
		{Name: "kubelet", CA: CA, CN: "system:node:{host}", Org: []string{"system:nodes"},
			Usages: serverClientAuth, PerHost: PerWorker, SANs: hostSANs},
		{Name: "kube-apiserver", CA: CA, CN: "kubernetes", Usages: serverAuth, SANs: apiserverSANs},
		// No O=system:masters: that group passes every authorization check
		// of the whole API, and the apiserver only needs the kubelets' API.
		// The kubelets authorize this CN through the ClusterRoleBinding
		// system:kube-apiserver (pkg/kube.ApplyRBAC, the rbac step), which
		// names it; a certificate that still carries the group (made by an
		// earlier hardway) differs in O, so 'up' reissues it.
		{Name: "apiserver-kubelet-client", CA: CA, CN: "kube-apiserver-kubelet-client", Usages: clientAuth},
		{Name: "apiserver-etcd-client", CA: EtcdCA, CN: "kube-apiserver-etcd-client", Usages: clientAuth},
		// etcd uses its server certificate as a client too (to itself, for
		// the gRPC gateway), as kubeadm's etcd certificates do.
		{Name: "etcd-server", CA: EtcdCA, CN: "{host}", Usages: serverClientAuth, PerHost: PerControlPlane, SANs: etcdSANs},
		{Name: "etcd-peer", CA: EtcdCA, CN: "{host}", Usages: serverClientAuth, PerHost: PerControlPlane, SANs: etcdSANs},

		{Name: "front-proxy-client", CA: FrontProxyCA, CN: "front-proxy-client", Usages: clientAuth},
	}
}

// Entry is a table row expanded for one host: one certificate on disk.
type Entry struct {
	Name   string // "etcd-server-controller-0"; the file base name
	Row    string // the table row's name: "etcd-server"
	CA     string
	CN     string
	Org    []string
	Usages []string
	Host   string   // "" for a cluster-wide certificate
	SANs   []string // normalized (IPs canonical, DNS lower case), no duplicates, in table order
}

// IsCA reports whether the entry is a certificate authority.
func (e Entry) IsCA() bool { return e.CA == "" }

// Entries expands the table for inv: every certificate hardway keeps, CAs first.
func Entries(inv *inventory.Inventory) []Entry {
	var out []Entry
	for _, c := range Table() {
		var hosts []inventory.Host
		switch c.PerHost {
		case Once:
			hosts = []inventory.Host{{}}
		case PerControlPlane:
			hosts = inv.ControlPlane
		case PerWorker:
			hosts = inv.Workers
		}
		for _, h := range hosts {
			e := Entry{Name: c.Name, Row: c.Name, CA: c.CA, CN: c.CN, Org: c.Org, Usages: c.Usages, Host: h.Name}
			if h.Name != "" {
				e.Name = c.Name + "-" + h.Name
				e.CN = strings.ReplaceAll(c.CN, "{host}", h.Name)
			}
			if c.SANs != nil {
				e.SANs = normalizeSANs(c.SANs(inv, h))
			}
			out = append(out, e)
		}
	}
	return out
}

func hostSANs(_ *inventory.Inventory, h inventory.Host) []string {
	return append([]string{h.Name}, h.Addresses()...)
}

func etcdSANs(_ *inventory.Inventory, h inventory.Host) []string {
	return append(append([]string{h.Name}, h.Addresses()...), "127.0.0.1", "localhost")
}

func apiserverSANs(inv *inventory.Inventory, _ inventory.Host) []string {
	var s []string
	for _, h := range inv.ControlPlane {
		s = append(s, h.Name)
		s = append(s, h.Addresses()...)
	}
	s = append(s, "127.0.0.1", "localhost")
	// Pods reach the apiserver through the "kubernetes" Service: its
	// ClusterIP and its DNS names must be in the certificate.
	if ip := inv.Network.ServiceIP(); ip.IsValid() {
		s = append(s, ip.String())
	}
	s = append(s, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc."+inv.Network.ClusterDomain)
	if h := inv.APIServerHost(); h != "" {
		s = append(s, h)
	}
	return s
}

// normalizeSANs writes IPs canonically and names in lower case, and drops
// duplicates, so that comparing with a certificate is comparing sets of
// strings.
func normalizeSANs(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		s = normalizeSAN(s)
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

func normalizeSAN(s string) string {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(s, "."))
}
