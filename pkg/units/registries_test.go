package units

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/inventory"
)

// registryInventory is the worker inventory with registries (YAML under
// registries:), in a directory holding the golden case's mirror-ca.pem.
func registryInventory(t *testing.T, registries string) *inventory.Inventory {
	t.Helper()
	dir := t.TempDir()
	ca, err := os.ReadFile(filepath.Join("testdata", "registries", "mirror-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mirror-ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	src := `cluster: lab
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
workers:
  - {name: worker-1, address: 10.240.0.21}
registries:
` + registries
	inv, err := inventory.Parse("inventory.yaml", filepath.Join(dir, "inventory.yaml"), []byte(src))
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	return inv
}

func workerManifest(t *testing.T, inv *inventory.Inventory) Manifest {
	t.Helper()
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Role == Worker {
			return m
		}
	}
	t.Fatal("no worker")
	return Manifest{}
}

// Registries add config_path to config.toml and nothing else there; the
// hosts.toml files and CAs restart nothing, config.toml restarts containerd.
func TestRegistriesConfigPath(t *testing.T) {
	without := workerManifest(t, workerInventory(t, "1.36", "", false))
	with := workerManifest(t, registryInventory(t, `  - name: registry.k8s.io
    mirrors: [{url: "http://10.240.16.1:5000"}, {url: "https://mirror.example.internal", ca: mirror-ca.pem}]
`))
	a, _ := without.File(ContainerdConfig)
	b, _ := with.File(ContainerdConfig)
	got := diffLines(a.Content, b.Content)
	want := []string{"[plugins.'io.containerd.cri.v1.images'.registry]", `  config_path = "/etc/containerd/certs.d"`, ""}
	if !slices.Equal(got, want) {
		t.Errorf("registries changed config.toml by %q, want %q", got, want)
	}
	if !slices.Equal(b.Components, []string{Containerd}) {
		t.Errorf("config.toml restarts %v", b.Components)
	}
	var certs []string
	for _, f := range with.Files {
		if strings.HasPrefix(f.Path, CertsDir+"/") {
			certs = append(certs, f.Path)
			if len(f.Components) != 0 {
				t.Errorf("%s restarts %v: containerd reads it at every pull", f.Path, f.Components)
			}
			if f.Mode != ModeConfig || f.Source != nil {
				t.Errorf("%s: mode %v source %v", f.Path, f.Mode, f.Source)
			}
		}
	}
	wantFiles := []string{MirrorCA("registry.k8s.io", "https://mirror.example.internal"), HostsTOML("registry.k8s.io")}
	if !slices.Equal(certs, wantFiles) {
		t.Errorf("certs.d files %q, want %q", certs, wantFiles)
	}
	ca, _ := with.File(wantFiles[0])
	if !strings.HasPrefix(string(ca.Content), "-----BEGIN CERTIFICATE-----") {
		t.Errorf("CA file: %q", ca.Content)
	}
	for _, s := range with.Settings[Containerd] {
		if strings.TrimSpace(s.Reason) == "" || strings.Contains(s.Reason, "\n") {
			t.Errorf("%s %s: reason must be one non-empty line, got %q", s.File, s.Key, s.Reason)
		}
	}
}

// Without registries: no certs.d file on any host, no config_path, no
// setting that names a registry; on every golden case's inventory too.
func TestNoRegistriesNoCertsD(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "*", "inventory.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	invs := []*inventory.Inventory{workerInventory(t, "1.36", "", false), workerInventory(t, "1.36", "", true)}
	for _, p := range cases {
		if strings.Contains(p, "registries") {
			continue
		}
		inv, err := inventory.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		invs = append(invs, inv)
	}
	for _, inv := range invs {
		ms, err := render(t, inv)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			for _, f := range m.Files {
				if strings.HasPrefix(f.Path, CertsDir) || strings.Contains(string(f.Content), "config_path") {
					t.Errorf("%s %s: %s without registries", inv.Cluster, m.Host, f.Path)
				}
			}
			for _, s := range m.Settings[Containerd] {
				if strings.Contains(s.Key, "registry") || strings.HasPrefix(s.File, CertsDir) {
					t.Errorf("%s %s: setting %s without registries", inv.Cluster, m.Host, s.Key)
				}
			}
		}
	}
}

// The hosts.toml of each shape, whole: the golden case shows them in a
// cluster; these pin the rules (mirror order, server, Docker Hub, mirrorOnly).
func TestHostsTOML(t *testing.T) {
	cases := []struct {
		name, registries, file, want string
	}{
		{"mirrors then the registry", `  - name: registry.k8s.io
    mirrors: [{url: "http://10.240.16.1:5000"}, {url: "https://b.example"}]
`, HostsTOML("registry.k8s.io"), `# Rendered by hardway: the mirrors of registry.k8s.io, read by containerd at every pull.
server = "https://registry.k8s.io"

[host."http://10.240.16.1:5000"]
  capabilities = ["pull", "resolve"]

[host."https://b.example"]
  capabilities = ["pull", "resolve"]
`},
		{"docker hub's endpoint", `  - name: docker.io
    mirrors: [{url: "https://hub.example", insecureSkipVerify: true}]
`, HostsTOML("docker.io"), `# Rendered by hardway: the mirrors of docker.io, read by containerd at every pull.
server = "https://registry-1.docker.io"

[host."https://hub.example"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
`},
		{"mirror only, one mirror", `  - name: "10.240.16.1:5000"
    mirrorOnly: true
    mirrors: [{url: "https://m.example:5443", ca: mirror-ca.pem}]
`, HostsTOML("10.240.16.1:5000"), `# Rendered by hardway: the mirrors of 10.240.16.1:5000, read by containerd at every pull.
server = "https://m.example:5443"
capabilities = ["pull", "resolve"]
ca = "/etc/containerd/certs.d/10.240.16.1:5000/hardway-ca-m.example_5443.pem"
`},
		{"mirror only, two mirrors", `  - name: quay.io
    mirrorOnly: true
    mirrors: [{url: "http://a.example"}, {url: "http://b.example:5000"}]
`, HostsTOML("quay.io"), `# Rendered by hardway: the mirrors of quay.io, read by containerd at every pull.
server = "http://b.example:5000"
capabilities = ["pull", "resolve"]

[host."http://a.example"]
  capabilities = ["pull", "resolve"]
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := workerManifest(t, registryInventory(t, c.registries))
			f, ok := m.File(c.file)
			if !ok {
				t.Fatalf("no %s", c.file)
			}
			if string(f.Content) != c.want {
				t.Errorf("%s:\n%s\nwant:\n%s", c.file, f.Content, c.want)
			}
			if !strings.HasPrefix(string(f.Content), RenderedMark) {
				t.Error("no RenderedMark: a removed registry's file would not be found as hardway's")
			}
		})
	}
}

// The real containerd reads config_path where hardway writes it.
func TestContainerdConfigPathAgainstRealBinary(t *testing.T) {
	bin := filepath.Join(mirrortest.ContainerdBinaries(t, "containerd"), "containerd")
	inv := registryInventory(t, "  - {name: registry.k8s.io, mirrors: [{url: \"http://10.240.16.1:5000\"}]}\n")
	inv.ContainerdVersion = mirrortest.Containerd
	m := workerManifest(t, inv)
	f, _ := m.File(ContainerdConfig)
	dump := containerdDump(t, bin, f.Content)
	if !strings.Contains(dump, "config_path = '"+CertsDir+"'") {
		t.Errorf("containerd's effective config lacks config_path = %q:\n%s", CertsDir, firstLines(dump, 200))
	}
}
