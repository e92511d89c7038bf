package inventory

import (
	"slices"
	"strings"
	"testing"
)

func TestAPIServerLoadBalancerDefaults(t *testing.T) {
	oneCP := "cluster: lab\ncontrolPlane:\n  - name: controller-1\n    address: 10.240.0.11\nworkers:\n  - name: worker-1\n    address: 10.240.0.21\n"
	for _, tc := range []struct {
		name, src, want string
		nodeLocal       bool
		workerURL       string
	}{
		{"three control planes and workers", goodWorkers, LBNodeLocal, true, "https://127.0.0.1:6443"},
		{"no workers", good, LBNone, false, "https://10.240.0.11:6443"},
		{"one control plane: nothing to balance", oneCP, LBNone, false, "https://10.240.0.11:6443"},
		{"switched off: workers use apiServerEndpoint", "network:\n  apiServerLoadBalancer: none\n  apiServerEndpoint: k8s.home.arpa\n" + goodWorkers, LBNone, false, "https://k8s.home.arpa:6443"},
		{"asked for with one control plane", "network:\n  apiServerLoadBalancer: node-local\n" + oneCP, LBNodeLocal, true, "https://127.0.0.1:6443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, probs := parse(t, tc.src)
			if probs != nil {
				t.Fatal(probs)
			}
			if inv.Network.APIServerLoadBalancer != tc.want || inv.NodeLocalLB() != tc.nodeLocal || inv.WorkerAPIServerURL() != tc.workerURL {
				t.Errorf("got %q node-local %v worker URL %s, want %q %v %s", inv.Network.APIServerLoadBalancer, inv.NodeLocalLB(), inv.WorkerAPIServerURL(), tc.want, tc.nodeLocal, tc.workerURL)
			}
			if len(inv.Warnings) != 0 {
				t.Errorf("warnings: %v", inv.Warnings)
			}
		})
	}
	// The admin's endpoint does not move.
	inv, _ := parse(t, goodWorkers)
	if inv.APIServerURL() != "https://10.240.0.11:6443" {
		t.Errorf("admin URL %s", inv.APIServerURL())
	}
	if got, want := inv.APIServerBackends(), []string{"10.240.0.11:6443", "10.240.0.12:6443", "10.240.0.13:6443"}; !slices.Equal(got, want) {
		t.Errorf("backends %v, want %v", got, want)
	}
}

func TestAPIServerLoadBalancerProblems(t *testing.T) {
	_, probs := parse(t, "network:\n  apiServerLoadBalancer: haproxy\n"+goodWorkers)
	if len(probs) != 1 || !strings.HasPrefix(probs[0].String(), `inv.yaml:2:26: network.apiServerLoadBalancer: "haproxy" is not a load balancer hardway knows`) ||
		!strings.Contains(probs[0].String(), "node-local") {
		t.Errorf("problems: %v", probs)
	}
	inv, probs := parse(t, "network:\n  apiServerLoadBalancer: node-local\n"+good)
	if probs != nil {
		t.Fatal(probs)
	}
	if inv.NodeLocalLB() || len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0].String(), "no effect without workers") {
		t.Errorf("node-local without workers: %v warnings %v", inv.NodeLocalLB(), inv.Warnings)
	}
}
