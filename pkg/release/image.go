package release

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/usererr"
)

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ImageInfo says what an image tarball holds, so a worker can tell whether
// containerd already has the image without importing it again.
type ImageInfo struct {
	Name string `json:"name"` // as the inventory and the tarball name it: registry.k8s.io/pause:3.10.2
	// ID is the digest of the image's config ("sha256:..."): what
	// `crictl images -o json` shows as id and `ctr images ls` as the
	// config of the imported image; the same bytes give the same ID on
	// every host.
	ID   string `json:"id"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// inspectImages fills in Image for every image artifact after checking its
// verified tarball is a docker-archive that holds the named image for the
// architecture it is listed for. What a tarball holds follows from its bytes, so the
// answer is kept in the cache's image memo under the tarball's sha256 (the
// lookup has just verified the bytes are those): a run does not read the
// layers again (the largest part of a no-op up's own CPU time).
func inspectImages(c Cache, specs []spec, arts []Artifact) error {
	for i, s := range specs {
		if s.Image == "" {
			continue
		}
		info, ok := c.rememberedImage(arts[i].SHA256, s.Image)
		var err error
		if !ok {
			info, err = InspectImage(arts[i].Path, s.Image)
			if err == nil {
				c.rememberImage(arts[i].SHA256, info)
			}
		}
		if err != nil {
			return usererr.Errorf("images must be docker-archive tarballs ('docker save', 'ctr images export --platform', or hack/mirror/mkimage) that carry the name listed in the inventory",
				"%s (%s): %w", s.Name, s.URL, err)
		}
		if info.Arch != s.Arch || info.OS != "linux" {
			hint := "list the image built for linux/" + s.Arch + " (the images entry's arch, else the inventory's)"
			if info.OS == "linux" && platform.Supported(info.Arch) {
				hint += ", or set arch: " + info.Arch + " on the images entry if the tarball is meant for the " + info.Arch + " workers"
			}
			return usererr.Errorf(hint, "%s (%s): the image is for %s/%s, the workers it is listed for are linux/%s", s.Name, s.URL, info.OS, info.Arch, s.Arch)
		}
		arts[i].Image = &info
	}
	return nil
}

// InspectImage reads the docker-archive at path and returns what it says
// about the image named ref: its config digest (the image ID), OS and
// architecture. Names compare as containerd would: "pause:1" is
// docker.io/library/pause:1.
func InspectImage(path, ref string) (ImageInfo, error) {
	want, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("%q is not an image name: %w", ref, err)
	}
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("not a docker-archive (no readable manifest.json): %w", err)
	}
	var tags []string
	var found *name.Tag
	for _, d := range m {
		for _, t := range d.RepoTags {
			tags = append(tags, t)
			if got, err := name.NewTag(t, name.WeakValidation); err == nil && got.Name() == want.Name() && found == nil {
				found = &got
			}
		}
	}
	if found == nil {
		if len(tags) == 0 {
			tags = []string{"no names"}
		}
		return ImageInfo{}, fmt.Errorf("the tarball holds %s, not %s", strings.Join(tags, ", "), ref)
	}
	img, err := tarball.Image(opener, found)
	if err != nil {
		return ImageInfo{}, fmt.Errorf("read the image: %w", err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return ImageInfo{}, fmt.Errorf("read the image config: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return ImageInfo{}, fmt.Errorf("read the image config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return ImageInfo{}, fmt.Errorf("read the image layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return ImageInfo{}, fmt.Errorf("the manifest lists %d layers, the config %d", len(layers), len(cf.RootFS.DiffIDs))
	}
	return ImageInfo{Name: ref, ID: id.String(), OS: cf.OS, Arch: cf.Architecture}, nil
}

// The image memo, <dir>/images: one line per inspected tarball,
// "sha256 name<TAB>id os arch". A lost or damaged line only costs one
// inspection.
func (c Cache) imageMemoPath() string { return filepath.Join(c.Dir, "images") }

// rememberedImage returns what the tarball with this sha256 was found to
// hold for the image name.
func (c Cache) rememberedImage(sha256hex, ref string) (ImageInfo, bool) {
	b, err := os.ReadFile(c.imageMemoPath())
	if err != nil || !hexDigest.MatchString(sha256hex) {
		return ImageInfo{}, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "\t")
		if !ok || k != sha256hex+" "+ref {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 3 && strings.HasPrefix(f[0], "sha256:") {
			return ImageInfo{Name: ref, ID: f[0], OS: f[1], Arch: f[2]}, true
		}
	}
	return ImageInfo{}, false
}

// rememberImage records info for the tarball with this sha256; best effort,
// and only where the cache may be written (not from a plan).
func (c Cache) rememberImage(sha256hex string, info ImageInfo) {
	if !c.Memo || !hexDigest.MatchString(sha256hex) || strings.ContainsAny(info.Name+info.ID+info.OS+info.Arch, " \t\n") {
		return
	}
	f, err := os.OpenFile(c.imageMemoPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%s %s\t%s %s %s\n", sha256hex, info.Name, info.ID, info.OS, info.Arch)
	_ = f.Close()
}
