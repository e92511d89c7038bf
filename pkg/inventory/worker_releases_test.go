package inventory

import (
	"strings"
	"testing"
)

const goodWorkers = good + `workers:
  - name: worker-1
    address: 10.240.0.21
`

func TestWorkerReleaseDefaults(t *testing.T) {
	inv, probs := parse(t, goodWorkers)
	if probs != nil {
		t.Fatal(probs)
	}
	want := WorkerVersions{Containerd: "v2.4.2", Runc: "v1.5.3", CNIPlugins: "v1.10.0", Crictl: "v1.37.0", Traefik: "v3.7.13"}
	if got := inv.WorkerVersions(); got != want {
		t.Errorf("worker versions %+v, want %+v", got, want)
	}
	r := inv.Releases
	for got, want := range map[string]string{r.Containerd: DefaultContainerdMirror, r.Runc: DefaultRuncMirror, r.CNIPlugins: DefaultCNIPluginsMirror, r.Crictl: DefaultCrictlMirror, r.Traefik: DefaultTraefikMirror} {
		if got != want {
			t.Errorf("mirror %q, want %q", got, want)
		}
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %v", inv.Warnings)
	}
}

func TestWorkerReleaseOverrides(t *testing.T) {
	src := "containerdVersion: 2.4.3\nrunc" + "Version: v1.5.3\nreleases:\n  allowHTTP: true\n  containerd: file:///m/containerd/\n  crictl: http://10.0.0.1/crictl\n" +
		"images:\n  - name: registry.k8s.io/pause:3.10.2\n    url: file:///m/images/pause.tar\n    sha256: SHA256:" + strings.Repeat("AB", 32) + "\n" + goodWorkers
	inv, probs := parse(t, src)
	if probs != nil {
		t.Fatal(probs)
	}
	if inv.ContainerdVersion != "v2.4.3" || inv.Releases.Containerd != "file:///m/containerd" || inv.Releases.Crictl != "http://10.0.0.1/crictl" {
		t.Errorf("overrides: %s %s %s", inv.ContainerdVersion, inv.Releases.Containerd, inv.Releases.Crictl)
	}
	if inv.Images[0].SHA256 != strings.Repeat("ab", 32) {
		t.Errorf("sha256 not normalised: %s", inv.Images[0].SHA256)
	}
	// A version outside the table is allowed, with a warning at its line;
	// plain http allowed on purpose still warns.
	if len(inv.Warnings) != 2 || inv.Warnings[0].Path != "containerdVersion" || inv.Warnings[0].Line != 1 ||
		!strings.Contains(inv.Warnings[0].String(), "v2.4.3") || !strings.Contains(inv.Warnings[0].String(), "v2.4.2") ||
		inv.Warnings[1].Path != "releases.crictl" || !strings.Contains(inv.Warnings[1].String(), "plain http") {
		t.Errorf("warnings: %v", inv.Warnings)
	}
}

func TestWorkerReleaseErrors(t *testing.T) {
	src := `runcVersion: 1.5
crictlVersion: latest
releases:
  cniPlugins: ftp://x/y
images:
  - name: registry.k8s.io/pause
    url: file:///m/images/pause.tar
  - name: "Bad Name:1"
    url: ""
    sha256: abc
  - name: registry.k8s.io/coredns/coredns:v1.14.7
    url: https://10.0.0.1/images/
  - name: registry.k8s.io/coredns/coredns:v1.14.7
    url: file:///m/images/coredns.tar
` + goodWorkers
	_, probs := parse(t, src)
	want := []string{
		`inv.yaml:1:14: runcVersion: "1.5" is not a version like v1.36.3`,
		`inv.yaml:2:16: crictlVersion: "latest" is not a version`,
		`inv.yaml:4:15: releases.cniPlugins: "ftp://x/y" is not a mirror URL`,
		`inv.yaml:6:11: images[0].name: "registry.k8s.io/pause" has no tag`,
		`inv.yaml:8:11: images[1].name: "Bad Name:1" is not an image name`,
		`inv.yaml:9:10: images[1].url: a URL is required`,
		`inv.yaml:10:13: images[1].sha256: "abc" is not a sha256 digest`,
		`inv.yaml:12:10: images[2].url: "https://10.0.0.1/images/" is not a file URL`,
		`inv.yaml:13:11: images[3].name: "registry.k8s.io/coredns/coredns:v1.14.7" for amd64 is already listed at images[2]`,
	}
	if len(probs) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(probs), len(want), probs)
	}
	for i, w := range want {
		if i < len(probs) && !strings.HasPrefix(probs[i].String(), w) {
			t.Errorf("problem %d:\n  got  %s\n  want %s...", i, probs[i], w)
		}
	}
}

func TestWorkerVersionsOtherMinor(t *testing.T) {
	inv, probs := parse(t, "kubernetesVersion: v1.34.1\n"+goodWorkers)
	if probs != nil {
		t.Fatal(probs)
	}
	if inv.ContainerdVersion != "v2.4.2" {
		t.Errorf("containerd %s, want the nearest row's v2.4.2", inv.ContainerdVersion)
	}
	if len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0].Msg, "tested with Kubernetes 1.36 only") {
		t.Errorf("warnings: %v", inv.Warnings)
	}
	// Without workers nothing of theirs is worth a warning.
	if inv, _ := parse(t, "kubernetesVersion: v1.34.1\n"+good); len(inv.Warnings) != 0 {
		t.Errorf("warnings without workers: %v", inv.Warnings)
	}
}
