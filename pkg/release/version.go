package release

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/usererr"
)

// Requested is a version as the inventory wrote it: exact ("v1.36.3") or,
// for Kubernetes, a minor ("1.36") that the mirror's stable-1.36.txt turns
// into an exact one once, after which the lock pins it.
type Requested struct {
	Raw   string
	Minor bool             // "1.36": any patch of this minor satisfies it
	V     *version.Version // X.Y.Z; X.Y.0 for a minor
}

// ParseRequested accepts "v1.36.3", "1.36.3" and, when minorOK, "1.36" or "v1.36".
func ParseRequested(s string, minorOK bool) (Requested, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	core, _, _ := strings.Cut(t, "-")
	parts := strings.Split(core, ".")
	switch {
	case len(parts) == 2 && minorOK:
		v, err := version.NewSemver(t + ".0")
		if err != nil {
			return Requested{}, fmt.Errorf("%q is not a version like 1.36: %w", s, err)
		}
		return Requested{Raw: s, Minor: true, V: v}, nil
	case len(parts) == 3:
		v, err := version.NewSemver(t)
		if err != nil {
			return Requested{}, fmt.Errorf("%q is not a version like v1.36.3: %w", s, err)
		}
		return Requested{Raw: s, V: v}, nil
	}
	return Requested{}, fmt.Errorf("%q is not a version like v1.36.3", s)
}

// Tag is the release tag used in URLs: "v" + the canonical form, so that
// "1.36.3" and "v1.36.3" name the same directory on the mirror.
func Tag(v *version.Version) string { return "v" + v.String() }

// MinorOf is "1.36" for 1.36.3.
func MinorOf(v *version.Version) string {
	s := v.Segments()
	return fmt.Sprintf("%d.%d", s[0], s[1])
}

// Satisfies reports whether the exact version v is what r asks for.
func (r Requested) Satisfies(v *version.Version) bool {
	if r.Minor {
		return MinorOf(v) == MinorOf(r.V) && v.Prerelease() == ""
	}
	return v.Equal(r.V) && v.Prerelease() == r.V.Prerelease()
}

// stableURL is where the mirror publishes the latest patch of a minor.
func stableURL(k8sMirror string, minor string) string {
	return k8sMirror + "/release/stable-" + minor + ".txt"
}

// resolveMinor asks the mirror for the latest patch of r's minor.
func (f *Fetcher) resolveMinor(ctx context.Context, k8sMirror string, r Requested) (*version.Version, error) {
	u := stableURL(k8sMirror, MinorOf(r.V))
	body, err := f.GetSmall(ctx, u, 256)
	if err != nil {
		return nil, usererr.Errorf("check the releases.kubernetes mirror, or write an exact kubernetesVersion such as v"+MinorOf(r.V)+".3",
			"resolve Kubernetes %s: %w", r.Raw, err)
	}
	got, err := version.NewSemver(strings.TrimPrefix(strings.TrimSpace(string(body)), "v"))
	if err != nil {
		return nil, fmt.Errorf("resolve Kubernetes %s: %s holds %q, not a version: %w", r.Raw, u, strings.TrimSpace(string(body)), err)
	}
	if !r.Satisfies(got) {
		return nil, fmt.Errorf("resolve Kubernetes %s: %s names %s, outside the minor", r.Raw, u, Tag(got))
	}
	return got, nil
}

// LatestPatch asks the mirror (stable-X.Y.txt) for the newest patch of a
// Kubernetes minor ("1.36"): a read, for 'hardway upgrade plan --to 1.36'.
func LatestPatch(ctx context.Context, k8sMirror, minor string) (*version.Version, error) {
	r, err := ParseRequested(minor, true)
	if err != nil {
		return nil, err
	}
	return (&Fetcher{}).resolveMinor(ctx, k8sMirror, r)
}
