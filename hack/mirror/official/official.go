package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/release"
)

// File is one file of a release as its official site publishes it, with the
// published checksum files that vouch for it. Paths are relative to the
// site's base URL and, the same, to the component's directory in the mirror.
type File struct {
	Path string
	Sums []string // each must name this file (or be a sidecar holding one digest) with a matching digest
	Exec bool     // a bare binary: 0755 in the mirror
}

// Component is one of build.sh's components: where its official site is and
// which files the mirror takes from it.
type Component struct {
	Name  string // build.sh's name: kubernetes, etcd, ...
	Dir   string // its directory in the mirror
	Base  string // the official download site
	Files []File
}

// coreDNSSite is CoreDNS's official release downloads. hardway itself never
// fetches CoreDNS (the workers run it as an image), so the inventory has no
// field for it; the mirror makes the image from this binary.
const coreDNSSite = "https://github.com/coredns/coredns/releases/download"

// Layout lists the official files of a component, laid out as build.sh's
// header describes (the mirror copies the official sites' layout). The sites
// are the inventory's defaults, the same URLs `hardway fetch` downloads from.
func Layout(name, version, arch string) (Component, error) {
	v, bare := version, strings.TrimPrefix(version, "v")
	if v == "" || v == bare {
		return Component{}, fmt.Errorf("%s: version %q does not start with v", name, version)
	}
	sidecars := func(p string, exts ...string) File {
		f := File{Path: p}
		for _, e := range exts {
			f.Sums = append(f.Sums, p+e)
		}
		return f
	}
	switch name {
	case "kubernetes":
		c := Component{Name: name, Dir: "kubernetes", Base: inventory.DefaultKubernetesMirror}
		for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"} {
			f := sidecars(fmt.Sprintf("release/%s/bin/linux/%s/%s", v, arch, b), ".sha256", ".sha512")
			f.Exec = true
			c.Files = append(c.Files, f)
		}
		return c, nil
	case "kubernetes-test":
		// The conformance suite's binaries (kubernetes/test/bin/e2e.test, ginkgo) come in one
		// tarball beside the release's binaries, with the same two sidecars; it lands in the
		// kubernetes directory, where the site has it, so a file:// mirror serves it too.
		return Component{Name: name, Dir: "kubernetes", Base: inventory.DefaultKubernetesMirror, Files: []File{
			sidecars(fmt.Sprintf("release/%s/kubernetes-test-linux-%s.tar.gz", v, arch), ".sha256", ".sha512")}}, nil
	case "etcd":
		return Component{Name: name, Dir: "etcd", Base: inventory.DefaultEtcdMirror, Files: []File{
			{Path: fmt.Sprintf("%s/etcd-%s-linux-%s.tar.gz", v, v, arch), Sums: []string{v + "/SHA256SUMS"}}}}, nil
	case "containerd":
		return Component{Name: name, Dir: "containerd", Base: inventory.DefaultContainerdMirror, Files: []File{
			sidecars(fmt.Sprintf("%s/containerd-%s-linux-%s.tar.gz", v, bare, arch), ".sha256sum")}}, nil
	case "runc":
		return Component{Name: name, Dir: "runc", Base: inventory.DefaultRuncMirror, Files: []File{
			{Path: fmt.Sprintf("%s/runc.%s", v, arch), Sums: []string{v + "/runc.sha256sum"}, Exec: true}}}, nil
	case "cni":
		return Component{Name: name, Dir: "cni-plugins", Base: inventory.DefaultCNIPluginsMirror, Files: []File{
			sidecars(fmt.Sprintf("%s/cni-plugins-linux-%s-%s.tgz", v, arch, v), ".sha256", ".sha512")}}, nil
	case "crictl":
		return Component{Name: name, Dir: "crictl", Base: inventory.DefaultCrictlMirror, Files: []File{
			sidecars(fmt.Sprintf("%s/crictl-%s-linux-%s.tar.gz", v, v, arch), ".sha256")}}, nil
	case "coredns":
		return Component{Name: name, Dir: "coredns", Base: coreDNSSite, Files: []File{
			sidecars(fmt.Sprintf("%s/coredns_%s_linux_%s.tgz", v, bare, arch), ".sha256")}}, nil
	case "traefik":
		return Component{Name: name, Dir: "traefik", Base: inventory.DefaultTraefikMirror, Files: []File{
			{Path: fmt.Sprintf("%s/traefik_%s_linux_%s.tar.gz", v, v, arch), Sums: []string{fmt.Sprintf("%s/traefik_%s_checksums.txt", v, v)}}}}, nil
	}
	return Component{}, fmt.Errorf("%s has no official release to download", name)
}

// Outcome says which path a component took.
type Outcome struct {
	Official bool   // the official files are in the mirror, verified
	Reason   string // why not, when !Official: the site could not be reached or lacks the files
	// Unreachable: the reachability check failed (no answer within the
	// probe time), so other components from the same site need not ask.
	Unreachable bool
}

// ErrMismatch is a downloaded file whose digest is not the published one.
// Never a reason to fall back: something between here and the site changed
// the bytes, and a user must see that.
var ErrMismatch = errors.New("checksum mismatch")

// Fetcher gets the official files. Probe bounds the first request, the
// reachability check; the rest use Fetcher's own stall detection and retries.
type Fetcher struct {
	Probe   time.Duration
	Fetcher *release.Fetcher // nil: defaults
	Log     func(format string, args ...any)
}

const maxSumFile = 1 << 20

// Fetch puts the component's official files and their published checksum
// files into mirror/<Dir>, each file verified against every checksum file
// that names it, or reports why it could not (the site is not reachable,
// answers with an error, or a transfer broke off), leaving the mirror as it
// was. Checksum files are written last, so build.sh's check of a component
// (its files match their checksum files) never sees half of one.
func (f Fetcher) Fetch(ctx context.Context, c Component, mirror string) (Outcome, error) {
	fetcher := f.Fetcher
	if fetcher == nil {
		fetcher = &release.Fetcher{}
	}
	logf := f.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	url := func(p string) string { return strings.TrimSuffix(c.Base, "/") + "/" + p }
	dir := filepath.Join(mirror, c.Dir)

	// Reachability: the first checksum file, with a short timeout and one
	// attempt, so a machine without internet falls back at once.
	var order []string
	sums := map[string][]byte{}
	for _, fl := range c.Files {
		for _, s := range fl.Sums {
			if _, ok := sums[s]; !ok {
				sums[s] = nil
				order = append(order, s)
			}
		}
	}
	if len(order) == 0 {
		return Outcome{}, fmt.Errorf("%s: no published checksum file in its layout", c.Name)
	}
	probe := f.Probe
	if probe <= 0 {
		probe = 5 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, probe)
	one := &release.Fetcher{Client: fetcher.Client, StallTimeout: probe, Attempts: 1}
	body, err := one.GetSmall(pctx, url(order[0]), maxSumFile)
	cancel()
	var se *release.StatusError
	if errors.As(err, &se) {
		return Outcome{Reason: fmt.Sprintf("%s answers, but: %v", c.Base, err)}, nil
	}
	if err != nil {
		return Outcome{Reason: fmt.Sprintf("%s not reachable within %s: %v", c.Base, probe, err), Unreachable: true}, nil
	}
	sums[order[0]] = body
	for _, s := range order[1:] {
		if sums[s], err = fetcher.GetSmall(ctx, url(s), maxSumFile); err != nil {
			return Outcome{Reason: err.Error()}, nil
		}
	}

	// Every file's published digests, before any download: a layout that
	// names a file no checksum file vouches for is a bug here, not a fallback.
	want := map[string][]string{}
	for _, fl := range c.Files {
		for _, s := range fl.Sums {
			d, ok := digestFor(sums[s], path.Base(fl.Path))
			if !ok {
				return Outcome{}, fmt.Errorf("%s: %s does not name %s", c.Name, url(s), path.Base(fl.Path))
			}
			want[fl.Path] = append(want[fl.Path], d)
		}
	}

	var temps []string
	defer func() {
		for _, t := range temps {
			_ = os.Remove(t)
		}
	}()
	tmpFor := map[string]string{}
	for _, fl := range c.Files {
		dst := filepath.Join(dir, filepath.FromSlash(fl.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return Outcome{}, err
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".official-*")
		if err != nil {
			return Outcome{}, err
		}
		temps = append(temps, tmp.Name())
		tmpFor[fl.Path] = tmp.Name()
		logf("%s: downloading %s", c.Name, url(fl.Path))
		err = fetcher.Download(ctx, url(fl.Path), &fileWriter{f: tmp}, nil)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Outcome{Reason: err.Error()}, nil
		}
		got, err := release.HashFile(tmp.Name())
		if err != nil {
			return Outcome{}, err
		}
		for _, w := range want[fl.Path] {
			if w != got.SHA256 && w != got.SHA512 {
				return Outcome{}, fmt.Errorf("%s: %s: %w: published %s, downloaded sha256 %s (nothing was written to the mirror)",
					c.Name, url(fl.Path), ErrMismatch, w, got.SHA256)
			}
		}
		mode := os.FileMode(0o644)
		if fl.Exec {
			mode = 0o755
		}
		if err := os.Chmod(tmp.Name(), mode); err != nil {
			return Outcome{}, err
		}
	}
	for _, s := range order {
		dst := filepath.Join(dir, filepath.FromSlash(s))
		tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".official-*")
		if err != nil {
			return Outcome{}, err
		}
		temps = append(temps, tmp.Name())
		tmpFor[s] = tmp.Name()
		_, err = tmp.Write(sums[s])
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err != nil {
			return Outcome{}, err
		}
	}
	// files first, checksum files last
	for _, p := range append(filePaths(c.Files), order...) {
		if err := os.Rename(tmpFor[p], filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return Outcome{}, err
		}
	}
	temps = nil
	return Outcome{Official: true}, nil
}

func filePaths(fs []File) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

// digestFor finds the hex digest a published checksum file gives for name:
// a "<hex>  <name>" or "<hex> *<name>" line, or, in a sidecar, a lone "<hex>"
// (dl.k8s.io's .sha256 and .sha512). sha256 or sha512, told by its length.
func digestFor(body []byte, name string) (string, bool) {
	var lone []string
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		lines++
		if !isHex(fields[0]) {
			continue
		}
		if len(fields) == 1 {
			lone = append(lone, strings.ToLower(fields[0]))
			continue
		}
		n := strings.TrimPrefix(fields[1], "*")
		if n == name || strings.TrimPrefix(n, "./") == name {
			return strings.ToLower(fields[0]), true
		}
	}
	if lines == 1 && len(lone) == 1 {
		return lone[0], true
	}
	return "", false
}

func isHex(s string) bool {
	if len(s) != 64 && len(s) != 128 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// fileWriter is the release.ResumableWriter Download writes to.
type fileWriter struct {
	f *os.File
	n int64
}

func (w *fileWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *fileWriter) Len() int64 { return w.n }

func (w *fileWriter) Truncate() error {
	if err := w.f.Truncate(0); err != nil {
		return err
	}
	_, err := w.f.Seek(0, 0)
	w.n = 0
	return err
}
