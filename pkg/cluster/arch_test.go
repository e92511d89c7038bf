package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// mixedInventory: three amd64 controllers, an amd64 worker and an arm64
// worker, the pause image listed for each architecture.
func mixedInventory(t *testing.T) *inventory.Inventory {
	t.Helper()
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: c1, address: 10.240.0.11}
  - {name: c2, address: 10.240.0.12}
  - {name: c3, address: 10.240.0.13}
workers:
  - {name: w1, address: 10.240.0.21}
  - {name: w2, address: 10.240.0.22, arch: arm64}
images:
  - {name: registry.k8s.io/pause:3.10.2, url: "file:///m/images/pause-3.10.2.tar"}
  - {name: registry.k8s.io/pause:3.10.2, url: "file:///m/images/pause-3.10.2-arm64.tar", arch: arm64}
`))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func freshHost() *hostModel {
	return &hostModel{units: map[string]remote.UnitState{}, markers: map[string]bool{},
		files: map[string]string{}, content: map[string]string{}, dirs: map[string]string{}}
}

func mixedCluster(t *testing.T) *fakeCluster {
	inv := mixedInventory(t)
	ms := map[string]*hostModel{}
	for _, h := range inv.Hosts() {
		ms[h.Name] = freshHost()
	}
	fc := newFakeCluster(t, inv, Options{State: generated(t, inv)}, ms)
	fc.withRelease()
	return fc
}

// Every host's push takes the release files of its own architecture and no
// other: the arm64 worker's binaries and image are the arm64 artifacts.
func TestPushPerArch(t *testing.T) {
	fc := mixedCluster(t)
	set := fc.releaseSet()
	if arches := map[string]bool{}; true {
		for _, a := range set.Artifacts {
			arches[a.Arch] = true
		}
		if !arches["amd64"] || !arches["arm64"] {
			t.Fatalf("the fake set lacks an arch: %v", arches)
		}
	}
	byPath := map[string]release.Artifact{}
	for _, a := range set.Artifacts {
		byPath[a.Path] = a
	}
	for _, h := range fc.Inv.Hosts() {
		want := fc.Inv.HostArch(h)
		m := fc.manifest(h.Name)
		if m.Arch != want {
			t.Errorf("%s: manifest arch %s, want %s", h.Name, m.Arch, want)
		}
		files, err := fc.remoteFiles(m)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		bins := 0
		for i, f := range files {
			src := m.Files[i].Source
			if src == nil || src.Kind != units.SourceBinary {
				continue
			}
			bins++
			a, ok := byPath[f.Source]
			if !ok || a.Arch != want || a.Name != src.Name || f.SHA256 != a.SHA256 {
				t.Errorf("%s: %s from %s (%s %s), want %s's %s", h.Name, f.Path, f.Source, a.Name, a.Arch, want, src.Name)
			}
			if a.Image == nil {
				if err := platform.CheckELF(f.Source, want); err != nil {
					t.Errorf("%s: %s: %v", h.Name, f.Path, err)
				}
			}
		}
		if bins == 0 {
			t.Errorf("%s: no release files", h.Name)
		}
	}
	// The arm64 worker gets the image listed for arm64.
	imgs, err := fc.hostImages(fc.manifest("w2"))
	if err != nil || len(imgs) != 1 {
		t.Fatalf("w2 images: %v %v", imgs, err)
	}
	if a, _ := set.Get("arm64", release.ImagePrefix+"registry.k8s.io/pause:3.10.2"); imgs[0].ID != a.Image.ID {
		t.Errorf("w2 imports %s, the arm64 pause is %s", imgs[0].ID, a.Image.ID)
	}

	// The whole plan: every host, each file written once, from its arch.
	as, err := fc.planPush(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	writes := map[string]int{}
	for _, a := range as {
		if strings.HasPrefix(a.Desc, "write /usr/local/bin/") {
			writes[a.Host]++
		}
	}
	for _, h := range fc.Inv.Hosts() {
		if writes[h.Name] == 0 {
			t.Errorf("%s: no binary written: %q", h.Name, descs(as))
		}
	}
}

// A binary of the wrong machine in the set (the amd64 kubelet where the
// arm64 one belongs) stops the push when it is planned, naming the host,
// the file and both architectures; nothing is written anywhere. The same
// refusal with releases.fetchOn: hosts, where the host would install the
// same bytes.
func TestPushRefusesAnotherMachine(t *testing.T) {
	for _, fetchOn := range []string{inventory.FetchOnOperator, inventory.FetchOnHosts} {
		t.Run(fetchOn, func(t *testing.T) {
			fc := mixedCluster(t)
			fc.Inv.Releases.FetchOn = fetchOn
			set := fc.releaseSet()
			swapped := filepath.Join(t.TempDir(), "kubelet-amd64-build")
			if err := os.WriteFile(swapped, append(platform.FakeELF("amd64"), "kubelet"...), 0o644); err != nil {
				t.Fatal(err)
			}
			for i, a := range set.Artifacts {
				if a.Name == "kubelet" && a.Arch == "arm64" {
					set.Artifacts[i].Path = swapped
					set.Artifacts[i].URL = "https://dl.example/release/v1.36.3/bin/linux/arm64/kubelet"
				}
			}
			before := map[string]int{}
			for _, h := range fc.Inv.Hosts() {
				before[h.Name] = len(fc.commands(h.Name))
			}
			_, err := fc.planPush(context.Background(), nil)
			if err == nil {
				t.Fatal("an amd64 kubelet planned for the arm64 worker")
			}
			msg := err.Error() + "\nhint: " + usererr.HintOf(err)
			for _, want := range []string{"w2: /usr/local/bin/kubelet", "kubelet", "https://dl.example/release/v1.36.3/bin/linux/arm64/kubelet",
				"built for amd64 (EM_X86_64), not arm64", "nothing pushed", "--update-lock", "set arch: on it"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q:\n%s", want, msg)
				}
			}
			for _, h := range fc.Inv.Hosts() {
				for _, cmd := range fc.commands(h.Name)[before[h.Name]:] {
					if strings.Contains(cmd, "cat > ") || strings.Contains(cmd, "mv -f") || strings.Contains(cmd, "curl") {
						t.Errorf("%s: a write ran: %.200s", h.Name, cmd)
					}
				}
			}
			// verify says so too instead of comparing files.
			rs := fc.checkHostFiles(context.Background(), fc.Inv.Workers[1])
			if len(rs) == 0 || !strings.Contains(rs[0].Message, "built for amd64") {
				t.Errorf("verify: %+v", rs)
			}
		})
	}
}

// A file that is no ELF binary at all is refused the same way.
func TestPushRefusesNotABinary(t *testing.T) {
	fc := mixedCluster(t)
	set := fc.releaseSet()
	page := filepath.Join(t.TempDir(), "not-found.html")
	if err := os.WriteFile(page, []byte("<html>404</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, a := range set.Artifacts {
		if a.Name == "kube-apiserver" {
			set.Artifacts[i].Path = page
		}
	}
	_, err := fc.planPush(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "/usr/local/bin/kube-apiserver") || !strings.Contains(err.Error(), "not a Linux binary") {
		t.Fatalf("%v", err)
	}
}

// With releases.fetchOn: hosts each host downloads its own architecture's
// files, pinned by the lock's entry for that arch.
func TestHostFetchPerArch(t *testing.T) {
	fc := mixedCluster(t)
	fc.Inv.Releases.FetchOn = inventory.FetchOnHosts
	set := fc.releaseSet()
	set.LockPath, set.Lock = "/repo/hardway.lock", &release.Lock{}
	for i, a := range set.Artifacts {
		a.URL = "https://dl.example/" + a.Arch + "/" + strings.ReplaceAll(a.Name, "/", "_")
		set.Artifacts[i] = a
		set.Lock.Artifacts = append(set.Lock.Artifacts, release.LockEntry{Name: a.Name, Arch: a.Arch, URL: a.URL, SHA256: a.SHA256})
	}
	as, err := fc.planPush(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fetched := map[string]int{}
	for _, a := range as {
		if !strings.HasPrefix(a.Desc, "fetch on the host ") {
			continue
		}
		fetched[a.Host]++
		want := "https://dl.example/" + fc.Inv.HostArch(fc.Inv.Hosts()[indexOf(fc.Inv.Hosts(), a.Host)]) + "/"
		if !strings.Contains(a.Desc, "(from "+want) {
			t.Errorf("%s: %s", a.Host, a.Desc)
		}
	}
	for _, h := range fc.Inv.Hosts() {
		if fetched[h.Name] == 0 {
			t.Errorf("%s fetches nothing: %q", h.Name, descs(as))
		}
	}
}
