package cluster

import (
	"fmt"
	"net/netip"

	"github.com/hardway/hardway/pkg/inventory"
)

// The facts about workers that up and verify share: component names in start
// order, where the runtime listens, and how crictl is called.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	KubeProxy  = "kube-proxy"
	PodRoutes  = "hardway-pod-routes"

	containerdSock = "unix:///run/containerd/containerd.sock"
	crictlCmd      = "/usr/local/bin/crictl --runtime-endpoint " + containerdSock + " --image-endpoint " + containerdSock + " --timeout 10s"
	ctrCmd         = "/usr/local/bin/ctr --address /run/containerd/containerd.sock -n k8s.io"
	cniConfDir     = "/etc/cni/net.d"
	cniConfList    = cniConfDir + "/10-bridge.conflist"
)

// workerComponents are the services of a worker, in start order: the runtime
// first (the kubelet needs it, and images are imported into it), the pod
// routes last.
func workerComponents() []string { return []string{Containerd, Kubelet, KubeProxy, PodRoutes} }

// isWorker says whether the named host is in workers:.
func (c *Cluster) isWorker(name string) bool { return indexOf(c.Inv.Workers, name) >= 0 }

// hostComponents are the services up starts on a host: workers run the four
// worker services; control-plane hosts also get the pod routes when there
// are workers (pods on any worker reach them, and they reach pods).
func (c *Cluster) hostComponents(name string) []string {
	if c.isWorker(name) {
		return workerComponents()
	}
	if len(c.Inv.Workers) > 0 && c.cniBridge() {
		return []string{PodRoutes}
	}
	return nil
}

// cniBridge is whether hardway manages the pod network (network.cni: bridge,
// the default), or the user brings their own CNI (none).
func (c *Cluster) cniBridge() bool { return true }

// podSubnets is each worker's pod subnet, by host name.
func (c *Cluster) podSubnets() (map[string]netip.Prefix, error) {
	pn := c.Inv.Network.PodNet()
	if !pn.IsValid() {
		p, err := netip.ParsePrefix(c.Inv.Network.PodCIDR)
		if err != nil {
			return nil, fmt.Errorf("network.podCIDR: %w", err)
		}
		pn = p
	}
	out := map[string]netip.Prefix{}
	for i, w := range c.Inv.Workers {
		a := pn.Addr().As4()
		a[2] += byte(i)
		out[w.Name] = netip.PrefixFrom(netip.AddrFrom4(a), 24)
	}
	return out, nil
}

// containerHost says whether h runs inside a container (the lab).
func containerHost(h inventory.Host) bool { return false }

// proxyMode is kube-proxy's mode: iptables (default) or nftables.
func (c *Cluster) proxyMode() string { return "iptables" }
