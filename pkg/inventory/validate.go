package inventory

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/platform"
)

// SupportedKubernetes is the range of Kubernetes versions hardway renders for.
var supportedKubernetes = version.MustConstraints(version.NewConstraint(">= 1.30.0, < 1.38.0"))

// SupportedEtcd is the range of etcd versions hardway renders for.
var supportedEtcd = version.MustConstraints(version.NewConstraint(">= 3.5.0, < 3.8.0"))

// etcdTable is the tested etcd per Kubernetes minor: the default version and
// the etcd minors known to work (kubeadm's pairings).
var etcdTable = map[int]struct {
	Default string
	Minors  []int
}{
	30: {"v3.5.24", []int{5}},
	31: {"v3.5.24", []int{5}},
	32: {"v3.5.24", []int{5}},
	33: {"v3.5.24", []int{5, 6}},
	34: {"v3.6.16", []int{6}},
	35: {"v3.6.16", []int{6}},
	36: {"v3.6.16", []int{6}},
	37: {"v3.7.0", []int{6, 7}},
}

// DefaultEtcdFor returns the default etcd version for a Kubernetes version,
// or "" outside the table.
func DefaultEtcdFor(k8s *version.Version) string {
	s := k8s.Segments()
	if len(s) < 2 || s[0] != 1 {
		return ""
	}
	return etcdTable[s[1]].Default
}

// EtcdMinorsFor returns the etcd minors (3.x) the table pairs with a
// Kubernetes version, or nil outside the table: what 'hardway upgrade plan'
// checks a target etcd against.
func EtcdMinorsFor(k8s *version.Version) []int {
	s := k8s.Segments()
	if len(s) < 2 || s[0] != 1 {
		return nil
	}
	return append([]int(nil), etcdTable[s[1]].Minors...)
}

// SupportsKubernetes says whether hardway renders for Kubernetes v.
func SupportsKubernetes(v *version.Version) bool { return supportedKubernetes.Check(v.Core()) }

// SupportsEtcd says whether hardway renders for etcd v.
func SupportsEtcd(v *version.Version) bool { return supportedEtcd.Check(v.Core()) }

func (inv *Inventory) applyDefaults() {
	if inv.Cluster == "" {
		inv.Cluster = DefaultClusterName
	}
	if inv.KubernetesVersion == "" {
		inv.KubernetesVersion = DefaultKubernetesVersion
	}
	if inv.Arch == "" {
		inv.Arch = DefaultArch
	}
	n := &inv.Network
	if n.ServiceCIDR == "" {
		n.ServiceCIDR = DefaultServiceCIDR
	}
	if n.PodCIDR == "" {
		n.PodCIDR = DefaultPodCIDR
	}
	if n.ClusterDomain == "" {
		n.ClusterDomain = DefaultClusterDomain
	}
	if inv.SSH.User == "" {
		inv.SSH.User = DefaultSSHUser
	}
	if inv.SSH.Port == 0 {
		inv.SSH.Port = DefaultSSHPort
	}
	if inv.PKI.Algorithm == "" {
		inv.PKI.Algorithm = DefaultAlgorithm
	}
	if inv.PKI.CAValidity == 0 {
		inv.PKI.CAValidity = Duration(DefaultCAValidity)
	}
	if inv.PKI.LeafValidity == 0 {
		inv.PKI.LeafValidity = Duration(DefaultLeafValidity)
	}
	inv.PodSecurity.applyDefaults()
	inv.HostPrep.applyDefaults()
	if inv.Encryption.Provider == "" {
		inv.Encryption.Provider = DefaultProvider
	}
	if inv.Releases.Kubernetes == "" {
		inv.Releases.Kubernetes = DefaultKubernetesMirror
	}
	if inv.Releases.Etcd == "" {
		inv.Releases.Etcd = DefaultEtcdMirror
	}
	inv.Releases.Kubernetes = strings.TrimRight(inv.Releases.Kubernetes, "/")
	inv.Releases.Etcd = strings.TrimRight(inv.Releases.Etcd, "/")
	// EtcdVersion's default depends on the Kubernetes version: filled in validate.
}

// dns1123Label is Kubernetes' rule for names: lower-case alphanumerics and '-', at most 63.
var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func isDNS1123Label(s string) bool { return len(s) <= 63 && dns1123Label.MatchString(s) }

func isDNS1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, p := range strings.Split(s, ".") {
		if !isDNS1123Label(p) {
			return false
		}
	}
	return true
}

// parseVersion accepts "v1.36.3", "1.36.3" and, when minorOK, "1.36".
func parseVersion(s string, minorOK bool) (*version.Version, bool, error) {
	t := strings.TrimPrefix(s, "v")
	parts := strings.Split(t, ".")
	if len(parts) == 2 && minorOK {
		v, err := version.NewSemver(t + ".0")
		return v, true, err
	}
	if len(parts) != 3 {
		return nil, false, fmt.Errorf("%q is not a version like v1.36.3", s)
	}
	v, err := version.NewSemver(t)
	if err != nil {
		return nil, false, fmt.Errorf("%q is not a version like v1.36.3", s)
	}
	return v, false, nil
}

func (l *loader) validate(inv *Inventory) {
	// Names and versions.
	if !isDNS1123Label(inv.Cluster) {
		l.errorf("cluster", "use lower-case letters, digits and '-', e.g. homelab", "%q is not a valid name", inv.Cluster)
	}
	k8s, _, err := parseVersion(inv.KubernetesVersion, true)
	if err != nil {
		l.errorf("kubernetesVersion", "write an exact version (v1.36.3) or a minor (1.36)", "%v", err)
	} else if !supportedKubernetes.Check(k8s) {
		l.errorf("kubernetesVersion", "hardway supports Kubernetes 1.30 to 1.37", "%s is outside the supported range", inv.KubernetesVersion)
	} else {
		inv.K8s = k8s
	}
	if inv.EtcdVersion == "" && inv.K8s != nil {
		inv.EtcdVersion = DefaultEtcdFor(inv.K8s)
	}
	if inv.EtcdVersion != "" {
		ev, _, err := parseVersion(inv.EtcdVersion, false)
		switch {
		case err != nil:
			l.errorf("etcdVersion", "write an exact version such as v3.6.16", "%v", err)
		case !supportedEtcd.Check(ev):
			l.errorf("etcdVersion", "hardway supports etcd 3.5 to 3.7", "%s is outside the supported range", inv.EtcdVersion)
		default:
			inv.Etcd = ev
		}
	}
	if inv.K8s != nil && inv.Etcd != nil {
		row := etcdTable[inv.K8s.Segments()[1]]
		ok := false
		for _, m := range row.Minors {
			ok = ok || inv.Etcd.Segments()[1] == m
		}
		if !ok {
			l.warnf("etcdVersion", "the tested etcd for this Kubernetes is "+row.Default+"; leave etcdVersion out to use it",
				"etcd %s with Kubernetes %s is not a tested pairing", inv.EtcdVersion, inv.KubernetesVersion)
		}
	}
	l.validateArch("arch", inv.Arch)

	l.validateNetwork(inv)
	l.validateWorkerNetwork(inv)
	l.validateSSH("ssh", inv.SSH)

	switch inv.PKI.Algorithm {
	case "ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096":
	default:
		l.errorf("pki.algorithm", "use ecdsa-p256 (default), rsa-2048, rsa-3072 or rsa-4096", "%q is not a supported key algorithm", inv.PKI.Algorithm)
	}
	caOK := l.validity("pki.caValidity", inv.PKI.CAValidity, MinCAValidity, MaxCAValidity, "10y")
	if l.validity("pki.leafValidity", inv.PKI.LeafValidity, MinLeafValidity, MaxLeafValidity, "1y") && caOK &&
		inv.PKI.LeafValidity > inv.PKI.CAValidity {
		l.errorf("pki.leafValidity", "a certificate cannot outlive the CA that signs it", "is longer than pki.caValidity")
	}
	switch inv.Encryption.Provider {
	case "secretbox", "aesgcm", "aescbc":
	default:
		l.errorf("encryption.provider", "use secretbox (default, strong), aesgcm or aescbc", "%q is not a supported provider", inv.Encryption.Provider)
	}
	if inv.Encryption.Provider == "aescbc" {
		l.warnf("encryption.provider", "the Kubernetes docs rate aescbc weak (padding oracle); prefer secretbox", "aescbc is not recommended")
	}
	for _, f := range []struct{ path, val string }{{"releases.kubernetes", inv.Releases.Kubernetes}, {"releases.etcd", inv.Releases.Etcd}} {
		u, err := url.Parse(f.val)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || (u.Scheme != "file" && u.Host == "") {
			l.errorf(f.path, "use an http://, https:// or file:/// URL of a mirror laid out like the official site", "%q is not a mirror URL", f.val)
		}
	}

	l.validateWorkerReleases(inv)
	l.validateRegistries(inv)
	l.validateTransport(inv)
	l.validateFetchOn(inv)
	l.validateHosts(inv)
	l.validateDNS(inv)
	l.validatePodSecurity(inv)
	l.validateHostPrep(inv)
	l.validateAPIServerLoadBalancer(inv)
}

func (l *loader) validateNetwork(inv *Inventory) {
	n := &inv.Network
	var err error
	if n.serviceNet, err = parseCIDR(n.ServiceCIDR); err != nil {
		l.errorf("network.serviceCIDR", "write a network such as 10.32.0.0/24", "%v", err)
	}
	if n.podNet, err = parseCIDR(n.PodCIDR); err != nil {
		l.errorf("network.podCIDR", "write a network such as 10.200.0.0/16", "%v", err)
	}
	if n.serviceNet.IsValid() && n.podNet.IsValid() && n.serviceNet.Overlaps(n.podNet) {
		// Point at the range the user wrote; the other may be a default.
		at := "network.podCIDR"
		if _, written := l.pos[at]; !written {
			at = "network.serviceCIDR"
		}
		l.errorf(at, "pick pod and service ranges that do not overlap, e.g. 10.200.0.0/16 and 10.32.0.0/24",
			"podCIDR %s and serviceCIDR %s overlap", n.PodCIDR, n.ServiceCIDR)
	}
	if n.serviceNet.IsValid() && n.serviceNet.Bits() > 0 && n.serviceNet.Addr().Is4() && n.serviceNet.Bits() > 30 {
		l.errorf("network.serviceCIDR", "use at least a /30; a /24 is typical", "%s is too small", n.ServiceCIDR)
	}
	if !isDNS1123Subdomain(n.ClusterDomain) {
		l.errorf("network.clusterDomain", "e.g. cluster.local", "%q is not a DNS domain", n.ClusterDomain)
	}
	if n.APIServerEndpoint != "" {
		host, port, err := splitHostPortDefault(n.APIServerEndpoint, DefaultAPIServerPort)
		if err != nil || (net.ParseIP(host) == nil && !isDNS1123Subdomain(host)) || port < 1 || port > 65535 {
			l.errorf("network.apiServerEndpoint", "write host or host:port, e.g. 10.240.0.10:6443 or k8s.home.arpa", "%q is not a host[:port]", n.APIServerEndpoint)
		}
	}
}

func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

func splitHostPortDefault(s string, def int) (string, int, error) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		return h, n, err
	}
	return strings.Trim(s, "[]"), def, nil
}

func (l *loader) validateSSH(path string, s SSH) {
	if s.Port != 0 && (s.Port < 1 || s.Port > 65535) {
		l.errorf(path+".port", "", "%d is not a TCP port", s.Port)
	}
	l.validateSSHUser(path+".user", s.User)
	if s.Bastion != "" {
		hp := s.Bastion
		if i := strings.LastIndex(hp, "@"); i >= 0 {
			l.validateSSHUser(path+".bastion", hp[:i])
			hp = hp[i+1:]
		}
		if h, _, _ := splitHostPortDefault(hp, 22); hasZone(h) {
			l.errorf(path+".bastion", "write the address without %zone", "%q has an IPv6 zone", s.Bastion)
		}
		host, port, err := splitHostPortDefault(hp, 22)
		if err != nil || host == "" || port < 1 || port > 65535 {
			l.errorf(path+".bastion", "write [user@]host[:port]", "%q is not a jump host", s.Bastion)
		}
	}
}

func (l *loader) validateHosts(inv *Inventory) {
	if len(inv.ControlPlane) == 0 {
		l.errorf("controlPlane", "list the control-plane hosts, usually three", "at least one control-plane host is required")
	} else if len(inv.ControlPlane)%2 == 0 {
		l.warnf("controlPlane", "etcd needs a majority: 3 hosts tolerate one failure, 4 still only one",
			"an even number of control-plane hosts (%d) adds no fault tolerance", len(inv.ControlPlane))
	}
	names := map[string]string{}
	addrs := map[string]string{}
	check := func(group string, hosts []Host) {
		for i, h := range hosts {
			p := fmt.Sprintf("%s[%d]", group, i)
			if h.Name == "" {
				l.errorf(p+".name", "e.g. controller-1", "a name is required")
			} else if !isDNS1123Label(h.Name) {
				l.errorf(p+".name", "use lower-case letters, digits and '-', at most 63", "%q is not a valid host name", h.Name)
			} else if prev, dup := names[h.Name]; dup {
				l.errorf(p+".name", "every host needs its own name", "%q is already used by %s", h.Name, prev)
			} else {
				names[h.Name] = p
			}
			l.checkAddr(inv, p+".address", h.Address, true, addrs)
			if h.InternalAddress != "" && h.InternalAddress != h.Address {
				l.checkAddr(inv, p+".internalAddress", h.InternalAddress, false, addrs)
			}
			if h.SSH != nil {
				l.validateSSH(p+".ssh", *h.SSH)
			}
			if h.Arch != "" {
				l.validateArch(p+".arch", h.Arch)
			}
		}
	}
	check("controlPlane", inv.ControlPlane)
	check("workers", inv.Workers)
}

// validateArch checks an arch: key (the inventory's, a host's, an image's)
// against the architectures hardway installs for.
func (l *loader) validateArch(path, arch string) {
	if !platform.Supported(arch) {
		l.errorf(path, "use "+strings.Join(platform.Names(), " or "), "%q is not a supported architecture", arch)
	}
}

func (l *loader) checkAddr(inv *Inventory, path, a string, required bool, seen map[string]string) {
	if a == "" {
		if required {
			l.errorf(path, "the IP address hardway connects to, e.g. 10.240.0.11", "an address is required")
		}
		return
	}
	ip, err := netip.ParseAddr(a)
	if err != nil {
		l.errorf(path, "write an IPv4 or IPv6 address such as 10.240.0.11", "%q is not an IP address", a)
		return
	}
	if ip.Zone() != "" {
		l.errorf(path, "write a global or unique-local address without %zone (a zone names an interface of one machine; certificates, etcd and the other hosts cannot use it)",
			"%q has an IPv6 zone", a)
		return
	}
	if prev, dup := seen[ip.String()]; dup {
		l.errorf(path, "every host needs its own address", "%s is already used by %s", a, prev)
		return
	}
	seen[ip.String()] = path
	n := inv.Network
	if n.serviceNet.IsValid() && n.serviceNet.Contains(ip) {
		l.errorf(path, "pick a network.serviceCIDR that does not contain your hosts", "%s is inside network.serviceCIDR %s", a, n.ServiceCIDR)
	}
	if n.podNet.IsValid() && n.podNet.Contains(ip) {
		l.errorf(path, "pick a network.podCIDR that does not contain your hosts", "%s is inside network.podCIDR %s", a, n.PodCIDR)
	}
}

// validity checks a certificate lifetime against its bounds; the error
// names the bound and shows what was written (a value too long for a
// duration arrives here as the largest one).
func (l *loader) validity(path string, d Duration, lo, hi time.Duration, example string) bool {
	written := time.Duration(d).String()
	if n, ok := l.pos[path]; ok {
		written = n.Value
	}
	switch {
	case d <= 0:
		l.errorf(path, "e.g. "+example, "must be positive")
	case d.D() > hi:
		l.errorf(path, "e.g. "+example, "%s is longer than the maximum %s", written, humanDuration(hi))
	case d.D() < lo:
		l.errorf(path, "e.g. "+example, "%s is shorter than the minimum %s", written, humanDuration(lo))
	default:
		return true
	}
	return false
}

// humanDuration writes a bound the way the inventory would: 100y, 1d, 1h.
func humanDuration(d time.Duration) string {
	const day, year = 24 * time.Hour, 365 * 24 * time.Hour
	switch {
	case d%year == 0:
		return fmt.Sprintf("%dy", d/year)
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
