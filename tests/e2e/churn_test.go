package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Node churn (issue 15 §4) on the live cluster: worker-2 leaves the
// inventory and `up` drains it, stops its kubelet and kube-proxy, deletes
// its Node, takes its routes off every host and frees its pod subnet; added
// back, it is a clean Ready node whose pods reach worker-1's. Then verify
// names a stale Node and a Calico node object without a Node (Calico's CRD
// installed with kubectl, as Calico would). It leaves the cluster as it
// found it: both workers Ready, every verify check passing.
func (e *workersEnv) churnScenarios(t *testing.T) {
	full := e.inv
	stateDir := filepath.Join(filepath.Dir(full), ".hardway")
	subnets := func() string {
		b, err := os.ReadFile(filepath.Join(stateDir, "pod-subnets.yaml"))
		if err != nil {
			e.t.Fatal(err)
		}
		return string(b)
	}
	subnetOf := func(name string) string {
		m := regexp.MustCompile(`(?m)^  ` + name + `: (\S+)$`).FindStringSubmatch(subnets())
		if m == nil {
			return ""
		}
		return m[1]
	}
	nodeExists := func(name string) bool {
		out, err := e.k("get", "node", name, "-o", "name")
		if err != nil && !strings.Contains(out, "NotFound") {
			e.t.Fatalf("get node %s: %v %s", name, err, out)
		}
		return err == nil
	}
	// The other hosts: every one carries the pod routes.
	var others []string
	for _, h := range e.res.Hosts {
		others = append(others, h.Name)
	}
	others = append(others, "worker-1")

	var oldSubnet string
	t.Run("churn: worker-2 removed from the inventory: up drains it, stops it, deletes its Node, its routes everywhere and frees its subnet", func(t *testing.T) {
		e.t = t
		oldSubnet = subnetOf("worker-2")
		if oldSubnet == "" {
			t.Fatalf("worker-2 has no subnet in the state:\n%s", subnets())
		}
		for _, h := range others {
			if out, _ := e.ssh(h, "ip -4 route show "+oldSubnet); !strings.Contains(out, "via") {
				t.Fatalf("%s has no route to worker-2's %s before: %q", h, oldSubnet, out)
			}
		}
		// A pod on worker-2 that the drain must evict.
		e.apply(helloPod("churn-gone", "worker-2"))
		e.mustK("wait", "--for=condition=Ready", "pod/churn-gone", "--timeout=120s")

		src, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		block := regexp.MustCompile(`(?m)^  - name: worker-2\n(    .*\n)*`)
		if !block.Match(src) {
			t.Fatalf("no worker-2 in the inventory:\n%s", src)
		}
		less := filepath.Join(filepath.Dir(full), "inventory-without-worker-2.yaml")
		if err := os.WriteFile(less, block.ReplaceAll(src, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		e.inv = less
		defer func() { e.inv = full }()

		// The plan says all of it, and changes nothing.
		before := subnets()
		plan := e.mustUp("--dry-run")
		for _, want := range []string{"cordon and drain Node worker-2", "stop and disable kubelet and kube-proxy on worker-2",
			"delete Node worker-2", "write /etc/systemd/system/hardway-pod-routes.service", "hardway-pod-routes: restart (files changed)", "free the pod subnets of removed workers", "worker-2 (" + oldSubnet + ")"} {
			if !strings.Contains(plan, want) {
				t.Errorf("dry run lacks %q:\n%s", want, plan)
			}
		}
		if !nodeExists("worker-2") || subnets() != before {
			t.Fatal("the dry run changed the cluster or the state")
		}
		if out, err := e.ssh("worker-2", "systemctl is-active kubelet"); err != nil {
			t.Fatalf("the dry run stopped worker-2's kubelet: %v %s", err, out)
		}

		start := time.Now()
		out := e.mustUp()
		t.Logf("FIGURE up removing worker-2: %s", time.Since(start).Round(time.Second))
		if !strings.Contains(out, "worker-2: kubelet and kube-proxy stopped and disabled") {
			t.Errorf("up did not stop worker-2:\n%s", out)
		}
		if nodeExists("worker-2") {
			t.Fatalf("Node worker-2 still there after up:\n%s", out)
		}
		removed := time.Now()
		if out, err := e.k("get", "pod", "churn-gone", "-o", "name"); err == nil {
			t.Errorf("churn-gone was not evicted: %s", out)
		}
		for _, u := range []string{"kubelet", "kube-proxy", "containerd", "hardway-pod-routes"} {
			if out, _ := e.ssh("worker-2", "systemctl is-active "+u+"; systemctl is-enabled "+u); !strings.Contains(out, "inactive") || !strings.Contains(out, "disabled") {
				t.Errorf("worker-2: %s not stopped and disabled: %q", u, out)
			}
		}
		if out, _ := e.ssh("worker-2", "ip -o link show cni0 2>&1; ls /var/lib/cni/networks/bridge 2>&1; ls /var/lib/kubelet/kubelet.key 2>&1"); strings.Count(out, "No such file") != 2 || !strings.Contains(out, "does not exist") {
			t.Errorf("worker-2 keeps its pod network or its key: %q", out)
		}
		for _, h := range others {
			if out, err := e.ssh(h, "ip -4 route show "+oldSubnet); err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("%s still routes worker-2's %s: %q %v", h, oldSubnet, out, err)
			}
		}
		if s := subnets(); strings.Contains(s, "worker-2") {
			t.Errorf("worker-2 still in pod-subnets.yaml:\n%s", s)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify without worker-2:\n  %s", strings.Join(f, "\n  "))
		}
		// A kubelet still running would have registered its Node again by
		// now (it retries every few seconds).
		if d := time.Since(removed); d < 15*time.Second {
			time.Sleep(15*time.Second - d)
		}
		if nodeExists("worker-2") {
			t.Fatal("Node worker-2 registered again after up deleted it")
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("a second up without worker-2:\n%s", out)
		}
	})

	t.Run("churn: worker-2 added back: a clean Ready node whose pod reaches a pod on worker-1", func(t *testing.T) {
		e.t = t
		e.inv = full
		start := time.Now()
		out := e.mustUp()
		t.Logf("FIGURE up adding worker-2 back: %s", time.Since(start).Round(time.Second))
		if !e.nodeReady("worker-2") {
			t.Fatalf("worker-2 not Ready after up:\n%s", out)
		}
		s := subnetOf("worker-2")
		cidr := strings.TrimSpace(e.mustK("get", "node", "worker-2", "-o", "jsonpath={.spec.podCIDR}"))
		if s == "" || cidr != s {
			t.Fatalf("worker-2: Node podCIDR %q, state %q", cidr, s)
		}
		t.Logf("worker-2's subnet: %s before, %s now", oldSubnet, s)
		e.apply(helloPod("churn-1", "worker-1") + "---\n" + helloPod("churn-2", "worker-2"))
		e.mustK("wait", "--for=condition=Ready", "pod/churn-1", "pod/churn-2", "--timeout=120s")
		ip1, ip2 := e.podIP("churn-1"), e.podIP("churn-2")
		if out, err := e.inPod("worker-2", "churn-2", "curl -sS --max-time 5 http://"+ip1+":8080/"); err != nil || !strings.Contains(out, "hello from churn-1") || !strings.Contains(out, "you are "+ip2+":") {
			t.Fatalf("churn-2 (%s) -> churn-1 (%s): %v\n%s", ip2, ip1, err, out)
		}
		if out, err := e.inPod("worker-1", "churn-1", "curl -sS --max-time 5 http://"+ip2+":8080/"); err != nil || !strings.Contains(out, "hello from churn-2") {
			t.Fatalf("churn-1 -> churn-2 (%s): %v\n%s", ip2, err, out)
		}
		e.mustK("delete", "pod", "churn-1", "churn-2", "--wait=false")
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify with worker-2 back:\n  %s", strings.Join(f, "\n  "))
		}
	})

	t.Run("churn: verify names a stale Node and a Calico node without a Node; up removes the stale Node", func(t *testing.T) {
		e.t = t
		// A Node no host of the inventory has, with a subnet of podCIDR: what
		// a worker removed by hand from both inventory and state leaves.
		e.apply(`apiVersion: v1
kind: Node
metadata: {name: ghost}
spec: {podCIDR: 10.200.200.0/24, podCIDRs: [10.200.200.0/24]}
`)
		// Calico's node CRD and two objects, as calico-node writes them:
		// worker-1 has its Node, worker-9 none.
		e.calicoCRD("Node", "nodes")
		e.apply(`apiVersion: crd.projectcalico.org/v1
kind: Node
metadata: {name: worker-1}
spec: {bgp: {ipv4Address: 10.240.4.21/24}}
---
apiVersion: crd.projectcalico.org/v1
kind: Node
metadata: {name: worker-9}
spec: {bgp: {ipv4Address: 10.240.4.29/24}}
`)
		f := strings.Join(failures(e.verify()), "\n")
		for _, want := range []string{
			"nodes/stale ghost: Node ghost is not in the inventory (a removed worker, pod subnet 10.200.200.0/24) (hint: 'hardway up' drains it",
			"kubectl delete node ghost",
			`nodes/calico worker-9: Calico node worker-9 has no Node: a new node with its address fails with "already using the IPv4 address" (hint: kubectl delete nodes.crd.projectcalico.org worker-9`,
		} {
			if !strings.Contains(f, want) {
				t.Errorf("verify lacks %q:\n%s", want, f)
			}
		}
		if strings.Contains(f, "Calico node worker-1") {
			t.Errorf("verify names worker-1's Calico node, which has a Node:\n%s", f)
		}
		// What the hints say, done.
		if out := e.mustUp(); !strings.Contains(out, "delete Node ghost") {
			t.Errorf("up did not remove the stale Node:\n%s", out)
		}
		e.mustK("delete", "nodes.crd.projectcalico.org", "worker-9")
		// Calico's CRD still there, worker-1's object with its Node: clean.
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up and the Calico delete:\n  %s", strings.Join(f, "\n  "))
		}
		e.mustK("delete", "crd", "nodes.crd.projectcalico.org")
	})
}
