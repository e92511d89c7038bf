package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
)

// An image is compared by its ID: the digest of its config blob, which
// pkg/release reads from the verified tarball. That is what the CRI reports
// as an image's id, and it is fixed by the tarball's content, so "already
// present" needs no import and no guess about how containerd converts a
// docker archive into its own manifest.

// hostImage is one image in the host's containerd (k8s.io namespace).
type hostImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags"`
}

// parseCrictlImages reads 'crictl images -o json'.
func parseCrictlImages(out []byte) ([]hostImage, error) {
	var v struct {
		Images []hostImage `json:"images"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("crictl images: %w", err)
	}
	return v.Images, nil
}

// normalizeRef is a docker reference as containerd names it.
func normalizeRef(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	switch {
	case !ok:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}

// imagePresent says whether the host has the image with this ID under name.
func imagePresent(have []hostImage, name, id string) bool {
	want := normalizeRef(name)
	for _, h := range have {
		if h.ID != id {
			continue
		}
		for _, t := range h.RepoTags {
			if normalizeRef(t) == want {
				return true
			}
		}
	}
	return false
}

// wantedImage is one image tarball the manifest pushes to a host.
type wantedImage struct {
	Name string // registry.k8s.io/pause:3.10.2
	Path string // on the host
	ID   string // sha256:<config digest>
}

// hostImages lists the image tarballs of a host's manifest.
func (c *Cluster) hostImages(m *units.Manifest) ([]wantedImage, error) {
	var out []wantedImage
	if m == nil {
		return nil, nil
	}
	for _, f := range m.Files {
		if f.Source == nil || f.Source.Kind != units.SourceBinary {
			continue
		}
		name, ok := strings.CutPrefix(f.Source.Name, release.ImagePrefix)
		if !ok {
			continue
		}
		set := c.releaseSet()
		if set == nil {
			return nil, errors.New("the release set is not resolved (run 'hardway fetch')")
		}
		a, ok := set.Get(m.Arch, f.Source.Name)
		if !ok || a.Image == nil {
			return nil, fmt.Errorf("release set has no image %s for %s", f.Source.Name, m.Arch)
		}
		out = append(out, wantedImage{Name: name, Path: f.Path, ID: a.Image.ID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// planImages returns the import action for the images a worker lacks. When
// containerd is not running (a new host, or one about to get a new
// containerd) nothing can be asked, and every image is imported: importing
// one already present only costs time.
func (c *Cluster) planImages(ctx context.Context, sh remote.Host, sn *snapshot, m *units.Manifest, runtimeUp bool) ([]plan.Action, error) {
	want, err := c.hostImages(m)
	if err != nil || len(want) == 0 {
		return nil, err
	}
	var have []hostImage
	why := "containerd not running yet"
	if runtimeUp {
		out, err := sn.read(ctx, sh, "images", readImagesCmd)
		if err != nil {
			return nil, fmt.Errorf("list images in containerd: %w", err)
		}
		if have, err = parseCrictlImages(out); err != nil {
			return nil, err
		}
		why = "not present"
	}
	var todo []wantedImage
	var names []string
	for _, w := range want {
		if runtimeUp && imagePresent(have, w.Name, w.ID) {
			continue
		}
		todo = append(todo, w)
		names = append(names, fmt.Sprintf("%s (%s)", w.Name, shortID(w.ID)))
	}
	if len(todo) == 0 {
		return nil, nil
	}
	desc := fmt.Sprintf("import %d image(s) into containerd (%s): %s", len(todo), why, strings.Join(names, ", "))
	return []plan.Action{{Host: sh.Name(), Kind: plan.Write, Desc: desc, Do: func(ctx context.Context) error {
		for _, w := range todo {
			// The CRI plugin serves the k8s.io namespace; import unpacks
			// for the host's platform with the default snapshotter.
			if _, err := sh.Run(ctx, ctrCmd+" images import "+remote.Quote(w.Path), nil); err != nil {
				return fmt.Errorf("import %s: %w", w.Name, err)
			}
		}
		return nil
	}}}, nil
}

func shortID(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
