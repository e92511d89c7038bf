package units

import (
	"slices"
	"strings"
	"testing"
)

// Every file and directory a manifest pushes is in its host's footprint
// (or inside one of its State paths), the footprint of a role holds nothing
// of the other role's, and the rows' files are there whatever the
// inventory enables now.
func TestFootprintCoversTheManifest(t *testing.T) {
	for _, network := range []string{"", "cni: none, apiServerLoadBalancer: none"} {
		ms, err := render(t, workerInventory(t, "1.36", network, false))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			fp := HostFootprint(&m)
			for _, f := range m.Files {
				if !fp.Owns(f.Path) {
					t.Errorf("%s (%s): %s is not in the footprint", m.Host, network, f.Path)
				}
			}
			for _, d := range m.Dirs {
				if !fp.Owns(d.Path) {
					t.Errorf("%s (%s): directory %s is not in the footprint", m.Host, network, d.Path)
				}
			}
			for _, f := range fp.Files {
				for _, s := range fp.State {
					if Under(f, s) {
						t.Errorf("%s: file %s is listed although %s goes with everything in it", m.Host, f, s)
					}
				}
			}
			for _, d := range fp.Dirs {
				if slices.Contains(systemDirs, d) {
					t.Errorf("%s: the system's %s is in the footprint", m.Host, d)
				}
			}
			worker := m.Role == Worker
			for _, p := range []string{UnitPath(Kubelet), BinPath(Containerd), ContainerdConfig, BinPath("traefik"), APIServerLBConfig, CNIBinDir + "/bridge"} {
				if fp.Owns(p) != worker {
					t.Errorf("%s (%s): owns %s: %v", m.Host, network, p, !worker)
				}
			}
			for _, p := range []string{ContainerdRootDir, ContainerdStateDir, KubeletDir, KubeProxyDir} {
				if slices.Contains(fp.State, p) != worker {
					t.Errorf("%s: state %s: %v", m.Host, p, !worker)
				}
			}
			for _, p := range []string{UnitPath(Etcd), BinPath(APIServer), EtcdSysusersConf, AdminKubeconfig, EtcdCACert} {
				if fp.Owns(p) == worker {
					t.Errorf("%s: owns %s: %v", m.Host, p, worker)
				}
			}
			if slices.Contains(fp.State, EtcdDataDir) == worker || !slices.Contains(fp.State, HardwayDataDir) {
				t.Errorf("%s: state %q", m.Host, fp.State)
			}
			if !slices.Contains(fp.Units, PodRoutes+".service") {
				t.Errorf("%s: no pod routes unit in %q", m.Host, fp.Units)
			}
		}
	}
}

// Units stop in reverse start order; directories go deepest first, the
// parents hardway's paths made with them (/etc/kubernetes, /opt/cni).
func TestFootprintOrder(t *testing.T) {
	ms, err := render(t, workerInventory(t, "1.36", "", false))
	if err != nil {
		t.Fatal(err)
	}
	cp, w := HostFootprint(&ms[0]), HostFootprint(&ms[1])
	if want := []string{"hardway-pod-routes.service", "kube-scheduler.service", "kube-controller-manager.service", "kube-apiserver.service", "etcd.service"}; !slices.Equal(cp.Units, want) {
		t.Errorf("control-plane units %q, want %q", cp.Units, want)
	}
	if want := []string{"hardway-pod-routes.service", "kube-proxy.service", "kubelet.service", APIServerLB + ".service", "containerd.service"}; !slices.Equal(w.Units, want) {
		t.Errorf("worker units %q, want %q", w.Units, want)
	}
	for _, d := range []string{"/etc/kubernetes", "/etc/cni", "/opt/cni", "/var/lib/cni", "/var/lib/cni/networks"} {
		if !slices.Contains(w.Dirs, d) {
			t.Errorf("worker dirs %q lack %s", w.Dirs, d)
		}
	}
	for i := 1; i < len(w.Dirs); i++ {
		if strings.Count(w.Dirs[i], "/") > strings.Count(w.Dirs[i-1], "/") {
			t.Errorf("%s after %s: not deepest first", w.Dirs[i], w.Dirs[i-1])
		}
	}
	// A registry's file the inventory no longer names brings its directory.
	old := HostsTOML("old.example")
	if fp := HostFootprint(&ms[1], old); !slices.Contains(fp.Files, old) || !slices.Contains(fp.Dirs, CertsDir+"/old.example") || !slices.Contains(fp.Dirs, CertsDir) {
		t.Errorf("with %s: dirs %q", old, fp.Dirs)
	}
}
