package inventory

import (
	"slices"
	"strings"
	"testing"
)

// A mixed cluster: amd64 by default, one arm64 worker.
const mixed = `cluster: lab
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
  - {name: controller-2, address: 10.240.0.12}
  - {name: controller-3, address: 10.240.0.13}
workers:
  - {name: worker-1, address: 10.240.0.21}
  - {name: worker-2, address: 10.240.0.22, arch: arm64}
images:
  - {name: registry.k8s.io/pause:3.10.2, url: file:///m/images/pause-3.10.2.tar}
  - {name: registry.k8s.io/pause:3.10.2, url: file:///m/images/arm64/pause-3.10.2.tar, arch: arm64}
  - {name: hardway.local/hello:v1, url: file:///m/images/hello-v1.tar}
`

func TestPerHostArch(t *testing.T) {
	inv, probs := parse(t, mixed)
	if probs != nil {
		t.Fatal(probs)
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %v", inv.Warnings)
	}
	for _, h := range inv.Hosts() {
		want := "amd64"
		if h.Name == "worker-2" {
			want = "arm64"
		}
		if got := inv.HostArch(h); got != want {
			t.Errorf("%s: arch %s, want %s", h.Name, got, want)
		}
	}
	if got := inv.Arches(); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Errorf("Arches() = %v", got)
	}
	if got := inv.ArchesOf(inv.ControlPlane); !slices.Equal(got, []string{"amd64"}) {
		t.Errorf("control-plane arches %v", got)
	}
	if got := inv.ArchesOf(nil); got != nil {
		t.Errorf("ArchesOf(nil) = %v", got)
	}
	var arm []string
	for _, im := range inv.ImagesFor("arm64") {
		arm = append(arm, im.URL)
	}
	if !slices.Equal(arm, []string{"file:///m/images/arm64/pause-3.10.2.tar"}) {
		t.Errorf("arm64 images %v", arm)
	}
	if n := len(inv.ImagesFor("amd64")); n != 2 {
		t.Errorf("%d amd64 images, want 2", n)
	}

	// The top-level arch is every host's default.
	top, _, _ := strings.Cut(mixed, "images:")
	inv, probs = parse(t, "arch: arm64\n"+strings.Replace(top, ", arch: arm64}", ", arch: amd64}", 1))
	if probs != nil {
		t.Fatal(probs)
	}
	if got := inv.HostArch(inv.ControlPlane[0]); got != "arm64" {
		t.Errorf("controller-1 with arch: arm64 at the top: %s", got)
	}
	if got := inv.HostArch(inv.Workers[1]); got != "amd64" {
		t.Errorf("worker-2's own arch: %s", got)
	}
}

func TestPerHostArchErrors(t *testing.T) {
	src := strings.Replace(mixed, "arch: arm64}\nimages", "arch: riscv64}\nimages", 1) +
		"  - {name: hardway.local/hello:v1, url: file:///m/images/other.tar}\n" +
		"  - {name: hardway.local/x:v1, url: file:///m/images/x.tar, arch: s390x}\n"
	_, probs := parse(t, src)
	want := []string{
		`inv.yaml:8:50: workers[1].arch: "riscv64" is not a supported architecture (hint: use amd64 or arm64)`,
		`inv.yaml:13:12: images[3].name: "hardway.local/hello:v1" for amd64 is already listed at images[2]`,
		`inv.yaml:14:67: images[4].arch: "s390x" is not a supported architecture`,
	}
	var errs []string
	for _, p := range probs {
		if !p.Warning {
			errs = append(errs, p.String())
		}
	}
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d:\n%s", len(errs), len(want), strings.Join(errs, "\n"))
	}
	for i, w := range want {
		if i < len(errs) && !strings.HasPrefix(errs[i], w) {
			t.Errorf("problem %d:\n  got  %s\n  want %s...", i, errs[i], w)
		}
	}
}

// An image whose architecture no worker has is fetched for nobody: a
// warning names it and the fix.
func TestImageForNoWorker(t *testing.T) {
	inv, probs := parse(t, strings.Replace(mixed, ", arch: arm64}\nimages", "}\nimages", 1))
	if probs != nil {
		t.Fatal(probs)
	}
	if len(inv.Warnings) != 1 {
		t.Fatalf("warnings: %v", inv.Warnings)
	}
	w := inv.Warnings[0].String()
	for _, part := range []string{"images[1].arch", "the image is for arm64 and no worker is arm64", "set the image's arch:"} {
		if !strings.Contains(w, part) {
			t.Errorf("warning %q lacks %q", w, part)
		}
	}
	// Without workers images are not used at all: nothing to warn of.
	if inv, _ := parse(t, good+"images:\n  - {name: a.b/c:v1, url: file:///m/c.tar, arch: arm64}\n"); inv == nil || len(inv.Warnings) != 0 {
		t.Errorf("warnings without workers: %v", inv.Warnings)
	}
}
