package cluster

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/units"
)

// shellHost runs commands with sh on this machine, with units.CertsDir
// moved to root (and back in the output): the listing and the removal run
// as a worker's shell would.
type shellHost struct {
	root string
	cmds []string
}

func (h *shellHost) Name() string { return "worker-1" }

func (h *shellHost) Run(_ context.Context, cmd string, _ io.Reader) ([]byte, error) {
	h.cmds = append(h.cmds, cmd)
	out, err := exec.Command("sh", "-c", strings.ReplaceAll(cmd, units.CertsDir, h.root)).Output()
	return []byte(strings.ReplaceAll(string(out), h.root, units.CertsDir)), err
}

// A registry that left the inventory: its hosts.toml and CA go, and its
// directory with them; files hardway did not write stay, and so does every
// file the manifest still lists.
func TestOldRegistriesAction(t *testing.T) {
	root := filepath.Join(t.TempDir(), "certs.d")
	write := func(p, content string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mark := units.RenderedMark + ": the mirrors of x, read by containerd at every pull.\n"
	write("registry.k8s.io/hosts.toml", mark)                                    // wanted
	write("registry.k8s.io/hardway-ca-old.example.pem", "pem")                   // a mirror's CA no longer listed
	write("quay.io/hosts.toml", mark)                                            // a registry no longer listed
	write("quay.io/hardway-ca-m.example_5443.pem", "pem")                        // its CA
	write("10.0.0.5:5000/hosts.toml", mark)                                      // a registry with a port, no longer listed
	write("docker.io/hosts.toml", "server = \"https://registry-1.docker.io\"\n") // someone else's
	write("ghcr.io/hosts.toml", "# my notes\n"+mark)                             // edited by hand: no longer hardway's
	write("ghcr.io/ca.crt", "pem")                                               // someone else's

	c := &Cluster{manifests: map[string]*units.Manifest{"worker-1": {Host: "worker-1", Files: []units.File{{Path: units.HostsTOML("registry.k8s.io")}}}}}
	sh := &shellHost{root: root}
	// As the workers step reads it: inside the worker's read script, by a
	// real shell.
	out, err := sh.Run(t.Context(), workerReadsScript, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.oldRegistriesAction(t.Context(), sh, &snapshot{out: string(out)}, "worker-1")
	if err != nil || a == nil {
		t.Fatalf("%v %v", a, err)
	}
	if len(sh.cmds) != 1 {
		t.Errorf("the listing ran again: %q", sh.cmds[1:])
	}
	want := "remove " + strings.Join([]string{
		units.CertsDir + "/10.0.0.5:5000/hosts.toml",
		units.CertsDir + "/quay.io/hardway-ca-m.example_5443.pem",
		units.CertsDir + "/quay.io/hosts.toml",
		units.CertsDir + "/registry.k8s.io/hardway-ca-old.example.pem",
	}, ", ") + " (no longer in registries:"
	if !strings.HasPrefix(a.Desc, want) || len(a.Restarts) != 0 {
		t.Fatalf("action %q restarts %v, want %q", a.Desc, a.Restarts, want)
	}
	assertReadOnly(t, "worker-1", []string{readRegistryFilesCmd})
	if err := a.Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	var left []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			left = append(left, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantLeft := []string{"docker.io", "docker.io/hosts.toml", "ghcr.io", "ghcr.io/ca.crt", "ghcr.io/hosts.toml", "registry.k8s.io", "registry.k8s.io/hosts.toml"}
	if !slices.Equal(left, wantLeft) {
		t.Errorf("left %q, want %q", left, wantLeft)
	}
	// Converged: nothing more to remove.
	if a, err := c.oldRegistriesAction(t.Context(), sh, nil, "worker-1"); err != nil || a != nil {
		t.Errorf("after the removal: %v %v", a, err)
	}
	// No hosts directory at all: nothing, no error.
	sh.root = filepath.Join(t.TempDir(), "missing")
	if a, err := c.oldRegistriesAction(t.Context(), sh, nil, "worker-1"); err != nil || a != nil {
		t.Errorf("no directory: %v %v", a, err)
	}
}

// In the workers step: read with the worker's other reads (no round trip
// of its own), removed by one action that restarts nothing.
func TestPlanWorkersRemovesOldRegistries(t *testing.T) {
	wf, models := convergedWorkers(t)
	models["worker-1"].registryFiles = units.HostsTOML("quay.io") + "\n"
	as, err := wf.planWorkers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := wdescs(as); len(got) != 1 || !strings.HasPrefix(got[0], "write worker-1: remove "+units.HostsTOML("quay.io")+" (no longer in registries:") {
		t.Fatalf("plan: %v", got)
	}
	if w := wf.writes(); len(w) > 0 {
		t.Fatalf("the plan changed hosts: %v", w)
	}
	for _, h := range []string{"worker-1", "worker-2"} {
		for _, cmd := range wf.hosts[h].Commands() {
			if cmd == readRegistryFilesCmd {
				t.Errorf("%s: the listing ran on its own, not in the worker's read script", h)
			}
		}
	}
	if err := as[0].Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := "worker-1: rm -f -- " + units.HostsTOML("quay.io") + "\nrmdir --ignore-fail-on-non-empty -- " + units.CertsDir + "/quay.io"
	if w := wf.writes(); !slices.Equal(w, []string{want}) {
		t.Fatalf("removal ran %q, want %q", w, want)
	}
}
