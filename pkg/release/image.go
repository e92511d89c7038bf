package release

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hardway/hardway/pkg/usererr"
)

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
// set's architecture.
func inspectImages(specs []spec, arts []Artifact) error {
	for i, s := range specs {
		if s.Image == "" {
			continue
		}
		info, err := InspectImage(arts[i].Path, s.Image)
		if err != nil {
			return usererr.Errorf("images must be docker-archive tarballs ('docker save', 'ctr images export --platform', or hack/mirror/mkimage) that carry the name listed in the inventory",
				"%s (%s): %w", s.Name, s.URL, err)
		}
		if info.Arch != s.Arch || info.OS != "linux" {
			return usererr.Errorf("list the image built for linux/"+s.Arch+", the inventory's arch",
				"%s (%s): the image is for %s/%s, the workers are linux/%s", s.Name, s.URL, info.OS, info.Arch, s.Arch)
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
