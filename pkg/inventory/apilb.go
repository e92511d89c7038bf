package inventory

import (
	"net"
	"strconv"
)

// API server load balancer choices (network.apiServerLoadBalancer): how the
// workers' kubelet and kube-proxy reach the apiservers.
const (
	// LBNodeLocal: every worker runs a load balancer (Traefik) on
	// 127.0.0.1:6443 in front of every control-plane host's apiserver, with
	// a health check, so a worker keeps the API when any one control-plane
	// host is gone. The default with workers and more than one
	// control-plane host.
	LBNodeLocal = "node-local"
	// LBNone: the workers use apiServerEndpoint (the first control-plane
	// host unless it names a VIP or a load balancer of your own).
	LBNone = "none"
)

// NodeLocalLBAddress is where the node-local load balancer listens on each
// worker: loopback, the apiserver's own port, so the kubeconfigs read as
// they would on a control-plane host.
const NodeLocalLBAddress = "127.0.0.1:6443"

// NodeLocalLB says whether the workers run the node-local load balancer.
func (inv *Inventory) NodeLocalLB() bool {
	return inv.Network.APIServerLoadBalancer == LBNodeLocal && len(inv.Workers) > 0
}

// WorkerAPIServerURL is the apiserver URL in the workers' kubeconfigs
// (kubelet, kube-proxy): the node-local load balancer, or APIServerURL.
// apiServerEndpoint keeps meaning the admin's (and external clients')
// endpoint either way.
func (inv *Inventory) WorkerAPIServerURL() string {
	if inv.NodeLocalLB() {
		return "https://" + NodeLocalLBAddress
	}
	return inv.APIServerURL()
}

// APIServerBackends are the addresses the node-local load balancer spreads
// connections over: every control-plane host's apiserver.
func (inv *Inventory) APIServerBackends() []string {
	var out []string
	for _, h := range inv.ControlPlane {
		out = append(out, net.JoinHostPort(h.IP(), strconv.Itoa(DefaultAPIServerPort)))
	}
	return out
}

// validateAPIServerLoadBalancer fills in the default: node-local when there
// are workers and more than one apiserver to choose from (with one, a load
// balancer would only add a hop), none otherwise.
func (l *loader) validateAPIServerLoadBalancer(inv *Inventory) {
	n := &inv.Network
	if n.APIServerLoadBalancer == "" {
		n.APIServerLoadBalancer = LBNone
		if len(inv.Workers) > 0 && len(inv.ControlPlane) > 1 {
			n.APIServerLoadBalancer = LBNodeLocal
		}
		return
	}
	switch n.APIServerLoadBalancer {
	case LBNodeLocal:
		if len(inv.Workers) == 0 {
			l.warnf("network.apiServerLoadBalancer", "it runs on workers only; leave it out or add workers",
				"node-local has no effect without workers")
		}
	case LBNone:
	default:
		l.errorf("network.apiServerLoadBalancer",
			"use node-local (a load balancer on every worker in front of all apiservers) or none (workers use apiServerEndpoint)",
			"%q is not a load balancer hardway knows", n.APIServerLoadBalancer)
	}
}
