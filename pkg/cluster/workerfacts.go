package cluster

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/units"
)

// The facts about workers that up and verify share: component names in start
// order, where the runtime listens, and how crictl is called.
const (
	Containerd = units.Containerd
	Kubelet    = units.Kubelet
	KubeProxy  = units.KubeProxy
	PodRoutes  = units.PodRoutes

	containerdSock = "unix://" + units.ContainerdSocket
	crictlCmd      = "/usr/local/bin/crictl --runtime-endpoint " + containerdSock + " --image-endpoint " + containerdSock + " --timeout 10s"
	ctrCmd         = "/usr/local/bin/ctr --address " + units.ContainerdSocket + " -n k8s.io"
	cniConfList    = units.BridgeConflist
)

// workerComponents are the services of a worker, in start order: the runtime
// first (the kubelet needs it, and images are imported into it), the
// node-local apiserver load balancer before the kubelet (its kubeconfig
// names it), the pod routes last.
func workerComponents() []string {
	return []string{Containerd, APIServerLB, Kubelet, KubeProxy, PodRoutes}
}

// isWorker says whether the named host is in workers:.
func (c *Cluster) isWorker(name string) bool { return indexOf(c.Inv.Workers, name) >= 0 }

// hostComponents are the services the workers step starts on a host: the
// worker services on workers, and the pod-routes unit on every host that has
// a route to add (another worker) or pods' egress to masquerade (a worker),
// with the bridge CNI — as units renders them.
func (c *Cluster) hostComponents(name string) []string {
	var out []string
	if c.isWorker(name) {
		out = []string{Containerd}
		if c.Inv.NodeLocalLB() {
			out = append(out, APIServerLB)
		}
		out = append(out, Kubelet, KubeProxy)
	}
	if c.hasRoutes(name) {
		out = append(out, PodRoutes)
	}
	return out
}

// hasRoutes says whether host gets the pod-routes unit: with the bridge CNI,
// a worker always (its pods' egress rule), any other host once there is a
// worker to route to.
func (c *Cluster) hasRoutes(name string) bool {
	return c.cniBridge() && len(c.Inv.Workers) > 0
}

// cniBridge is whether hardway manages the pod network (network.cni: bridge,
// the default), or the user brings their own CNI (none).
func (c *Cluster) cniBridge() bool { return c.Inv.Network.CNI != inventory.CNINone }

// podSubnets is each worker's pod subnet, by host name: the state's
// allocation, completed for new workers as render completes it.
func (c *Cluster) podSubnets() (map[string]netip.Prefix, error) {
	a, _, err := podnet.ForInventory(c.opt.State, c.Inv)
	return a, err
}

// containerHost says whether h runs inside a container (the lab).
func containerHost(h inventory.Host) bool { return h.ContainerHost }

// proxyMode is kube-proxy's mode: iptables (default) or nftables.
func (c *Cluster) proxyMode() string { return c.Inv.Network.KubeProxyMode }

// recordPodSubnets saves the workers' pod subnets and hosts in the state
// directory when they changed (a new worker, a new address), in the render
// step: before push writes them into CNI configs and routes. A removed
// worker stays in the file until the workers step has removed it.
func (c *Cluster) recordPodSubnets() ([]plan.Action, error) {
	_, next, changed, err := podnet.ForState(c.opt.State, c.Inv)
	if err != nil || !changed {
		return nil, err
	}
	path := c.opt.State.PodSubnets()
	return []plan.Action{{Kind: plan.Write, Desc: fmt.Sprintf("record pod subnets and worker addresses in %s: %s", path, next.Subnets),
		Do: func(context.Context) error { return podnet.SaveState(path, next) }}}, nil
}
