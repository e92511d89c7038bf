package inventory

import "github.com/hashicorp/go-version"

// CNI choices (network.cni).
const (
	// CNIBridge: hardway writes the bridge CNI config with each worker's own
	// pod subnet and the routes between the workers' subnets.
	CNIBridge = "bridge"
	// CNINone: no CNI config and no routes; a CNI installed afterwards
	// (Cilium, Calico, flannel...) owns pod networking.
	CNINone = "none"
)

// kube-proxy modes (network.kubeProxyMode).
const (
	// ProxyIPTables is the default: it works on every kernel hardway supports.
	ProxyIPTables = "iptables"
	// ProxyNFTables needs Linux 5.13 or later and Kubernetes 1.31 or later
	// (beta and on by default since 1.31, GA in 1.33; alpha before).
	ProxyNFTables = "nftables"
)

var nftablesSince = version.MustConstraints(version.NewConstraint(">= 1.31.0"))

// ClusterDNS is the ClusterIP the cluster DNS Service gets and kubelets put
// in pods' resolv.conf: the 10th address of the service CIDR (10.32.0.10),
// as kubeadm does.
func (inv *Inventory) ClusterDNS() string {
	p := inv.Network.serviceNet
	if !p.IsValid() {
		return ""
	}
	a := p.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !p.Contains(a) {
		return ""
	}
	return a.String()
}

func (l *loader) validateWorkerNetwork(inv *Inventory) {
	n := &inv.Network
	if n.CNI == "" {
		n.CNI = CNIBridge
	}
	switch n.CNI {
	case CNIBridge, CNINone:
	default:
		l.errorf("network.cni", "use bridge (default: hardway sets up pod networking) or none (you install a CNI)", "%q is not a CNI hardway knows", n.CNI)
	}
	if n.KubeProxyMode == "" {
		n.KubeProxyMode = ProxyIPTables
	}
	switch n.KubeProxyMode {
	case ProxyIPTables:
	case ProxyNFTables:
		if inv.K8s != nil && !nftablesSince.Check(inv.K8s.Core()) {
			l.errorf("network.kubeProxyMode", "use iptables, or Kubernetes 1.31 or later", "nftables mode is alpha in Kubernetes %s", inv.KubernetesVersion)
		}
	default:
		l.errorf("network.kubeProxyMode", "use iptables (default, any kernel) or nftables (Linux 5.13+)", "%q is not a kube-proxy mode hardway renders", n.KubeProxyMode)
	}
	if len(inv.Workers) > 0 && inv.ClusterDNS() == "" && n.serviceNet.IsValid() {
		l.errorf("network.serviceCIDR", "use at least a /28 so the cluster DNS gets the 10th address", "%s has no 10th address for the cluster DNS", n.ServiceCIDR)
	}
}
