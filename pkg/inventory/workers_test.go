package inventory

import (
	"strings"
	"testing"
)

func TestWorkerNetworkDefaults(t *testing.T) {
	inv, probs := parse(t, good+"workers:\n  - {name: worker-1, address: 10.240.0.21, containerHost: true}\n  - {name: worker-2, address: 10.240.0.22}\n")
	if probs != nil {
		t.Fatalf("unexpected problems: %v", probs)
	}
	if inv.Network.CNI != CNIBridge || inv.Network.KubeProxyMode != ProxyIPTables {
		t.Errorf("cni %q kubeProxyMode %q, want bridge, iptables", inv.Network.CNI, inv.Network.KubeProxyMode)
	}
	if got := inv.ClusterDNS(); got != "10.32.0.10" {
		t.Errorf("ClusterDNS() = %q, want 10.32.0.10", got)
	}
	if !inv.Workers[0].ContainerHost || inv.Workers[1].ContainerHost || inv.ControlPlane[0].ContainerHost {
		t.Errorf("containerHost must be per host and off by default: %+v", inv.Workers)
	}
}

func TestClusterDNS(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"10.32.0.0/24", "10.32.0.10"},
		{"10.96.0.0/12", "10.96.0.10"},
		{"fd00:10:96::/108", "fd00:10:96::a"},
		{"10.32.0.0/29", ""},
	} {
		inv, probs := parse(t, "network:\n  serviceCIDR: "+tc.cidr+"\n"+good)
		if probs != nil {
			t.Fatalf("%s: %v", tc.cidr, probs)
		}
		if got := inv.ClusterDNS(); got != tc.want {
			t.Errorf("ClusterDNS(%s) = %q, want %q", tc.cidr, got, tc.want)
		}
	}
}

func TestWorkerNetworkRules(t *testing.T) {
	w := "workers:\n  - {name: worker-1, address: 10.240.0.21}\n"
	for _, tc := range []struct{ name, src, want string }{
		{"cni", "network:\n  cni: calico\n" + good, "2:8: network.cni: \"calico\" is not a CNI hardway knows (hint: use bridge"},
		{"proxy mode", "network:\n  kubeProxyMode: ipvs\n" + good, "2:18: network.kubeProxyMode: \"ipvs\" is not a kube-proxy mode"},
		{"nftables alpha", "kubernetesVersion: \"1.30\"\nnetwork:\n  kubeProxyMode: nftables\n" + good, "3:18: network.kubeProxyMode: nftables mode is alpha in Kubernetes 1.30"},
		{"no dns address", "network:\n  serviceCIDR: 10.32.0.0/29\n" + good + w, "2:16: network.serviceCIDR: 10.32.0.0/29 has no 10th address"},
		{"containerHost type", good + "workers:\n  - {name: worker-1, address: 10.240.0.21, containerHost: maybe}\n", "10:59: workers[0].containerHost: \"maybe\" is not true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, probs := parse(t, tc.src)
			var all []string
			for _, p := range probs {
				s := strings.TrimPrefix(p.String(), "inv.yaml:")
				all = append(all, s)
				if strings.HasPrefix(s, tc.want) {
					return
				}
			}
			t.Fatalf("want a problem starting %q, got:\n  %s", tc.want, strings.Join(all, "\n  "))
		})
	}
	if _, probs := parse(t, "kubernetesVersion: \"1.31\"\nnetwork:\n  kubeProxyMode: nftables\n"+good); probs != nil {
		t.Errorf("nftables on 1.31: %v", probs)
	}
}
