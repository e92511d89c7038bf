package units

import (
	"slices"
	"strings"
	"testing"
)

// The table's facts, one per row: what 'hardway up' probes, what preflight
// expects on each port, what ss shows.
func TestComponentTable(t *testing.T) {
	want := map[string]struct {
		role    Role
		process string
		health  string
		ports   []int
	}{
		Etcd:              {ControlPlane, "etcd", "http://127.0.0.1:2381/health", []int{2379, 2380, 2381}},
		APIServer:         {ControlPlane, "kube-apiserver", "https://127.0.0.1:6443/readyz", []int{6443}},
		ControllerManager: {ControlPlane, "kube-controller", "https://127.0.0.1:10257/healthz", []int{10257}},
		Scheduler:         {ControlPlane, "kube-scheduler", "https://127.0.0.1:10259/healthz", []int{10259}},
		Containerd:        {Worker, "containerd", "", nil},
		Kubelet:           {Worker, "kubelet", "http://127.0.0.1:10248/healthz", []int{10250, 10248}},
		KubeProxy:         {Worker, "kube-proxy", "http://127.0.0.1:10256/healthz", []int{10256, 10249}},
		PodRoutes:         {EveryHost, "", "", nil},
		APIServerLB:       {Worker, "traefik", "http://127.0.0.1:6444/ping", []int{6443, 6444}},
	}
	// A port is one component's on each host: the same number may serve
	// two roles (6443: the apiserver, and the workers' load balancer).
	ports := map[Role]map[int]string{ControlPlane: {}, Worker: {}}
	var names []string
	for _, c := range Components() {
		names = append(names, c.Name)
		if c.Unit != c.Name+".service" || UnitPath(c.Name) != UnitDir+"/"+c.Unit {
			t.Errorf("%s: unit %q", c.Name, c.Unit)
		}
		if c.unitFile != nil { // the pod routes: a oneshot of ip commands
			if c.Process != "" || len(c.Binaries) > 0 || c.flags != nil || c.Health.Scheme != "" || c.version != nil {
				t.Errorf("%s: a unit of its own has no process, binary, flags, health or version", c.Name)
			}
		} else {
			if c.version == nil {
				t.Errorf("%s: no version", c.Name)
			}
			// The unit runs the binary named after the component, or for
			// hardway's own units (hardway-...) the program they run.
			bin := c.Name
			if strings.HasPrefix(c.Name, "hardway-") && len(c.Binaries) > 0 {
				bin = c.Binaries[0].Name
			}
			if len(c.Process) == 0 || len(c.Process) > 15 || !strings.HasPrefix(bin, c.Process) {
				t.Errorf("%s: process name %q: comm is the binary name cut to 15 characters", c.Name, c.Process)
			}
			if len(c.Binaries) == 0 || c.Binaries[0].NoRestart || !strings.HasSuffix(c.Exec(), "/"+bin) {
				t.Errorf("%s: the unit must run its own binary first, got %+v", c.Name, c.Binaries)
			}
			if c.flags == nil {
				t.Errorf("%s: no flags builder", c.Name)
			}
		}
		if c.Kubeconfig != "" && !slices.ContainsFunc(c.Files, func(f Copy) bool { return f.Path == c.Kubeconfig && f.Kind == SourceKubeconfig }) {
			t.Errorf("%s: kubeconfig %s is not one of its files", c.Name, c.Kubeconfig)
		}
		if c.Health.Scheme != "" && !slices.ContainsFunc(c.Ports, func(p Port) bool { return p.Number == c.Health.Port }) {
			t.Errorf("%s: health port %d is not one of its ports", c.Name, c.Health.Port)
		}
		for r, used := range ports {
			if !c.RunsOn(r) {
				continue
			}
			for _, p := range c.Ports {
				if other, ok := used[p.Number]; ok {
					t.Errorf("port %d: %s and %s", p.Number, other, c.Name)
				}
				used[p.Number] = c.Name
			}
		}
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		var got []int
		for _, p := range c.Ports {
			got = append(got, p.Number)
		}
		if c.Role != w.role || c.Process != w.process || c.Health.URL("127.0.0.1") != w.health || !slices.Equal(got, w.ports) {
			t.Errorf("%s: role %s process %s health %s ports %v; want %+v", c.Name, c.Role, c.Process, c.Health.URL("127.0.0.1"), got, w)
		}
	}
	if !slices.Equal(names, []string{Etcd, APIServer, ControllerManager, Scheduler, Containerd, APIServerLB, Kubelet, KubeProxy, PodRoutes}) {
		t.Errorf("start order %v", names)
	}
	if got := Names(Worker); !slices.Equal(got, names[4:8]) {
		t.Errorf("Names(Worker) = %v", got)
	}
	if got := Names(ControlPlane); !slices.Equal(got, names[:4]) {
		t.Errorf("Names(ControlPlane) = %v", got)
	}
	if _, ok := Lookup("kubelet-x"); ok {
		t.Error("Lookup of an unknown name succeeded")
	}
	if MustLookup(APIServer).Health.Path != "/readyz" {
		t.Error("MustLookup")
	}
	// Callers get a copy: changing it changes nothing for the next caller.
	Components()[0].Ports[0].Number = 1
	if MustLookup(Etcd).Ports[0].Number != EtcdClientPort {
		t.Error("the table is shared between callers")
	}
}
