package release

import (
	"context"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/hardway/hardway/pkg/usererr"
)

// published is a digest the mirror publishes for a file.
type published struct {
	kind string // sha512 or sha256
	hex  string
}

// sumFiles fetches each checksum file once, however many artifacts share it.
type sumFiles struct {
	f     *Fetcher
	mu    sync.Mutex
	files map[string]*sumFile
}

type sumFile struct {
	once sync.Once
	body []byte
	err  error
}

func (s *sumFiles) get(ctx context.Context, u string) ([]byte, error) {
	s.mu.Lock()
	sf, ok := s.files[u]
	if !ok {
		sf = &sumFile{}
		s.files[u] = sf
	}
	s.mu.Unlock()
	sf.once.Do(func() { sf.body, sf.err = s.f.GetSmall(ctx, u, 1<<20) })
	return sf.body, sf.err
}

// published fetches and parses the published digest of s. A missing
// checksum is an error: hardway never installs a file it cannot verify.
func (s *sumFiles) published(ctx context.Context, sp spec) (published, error) {
	if sp.SumKind == sumInline {
		return published{kind: "sha256", hex: sp.Sum}, nil
	}
	body, err := s.get(ctx, sp.SumURL)
	if err != nil {
		if IsNotFound(err) {
			return published{}, usererr.Errorf("hardway installs nothing it cannot verify; the mirror must publish checksums beside the files, as the official sites do"+imageSumHint(sp),
				"%s %s: no published checksum at %s: %w", sp.Name, sp.Version, sp.SumURL, err)
		}
		return published{}, fmt.Errorf("%s %s: checksum: %w", sp.Name, sp.Version, err)
	}
	return parsePublished(sp, body)
}

func imageSumHint(sp spec) string {
	if sp.Image == "" {
		return ""
	}
	return ", or write the tarball's sha256 in the inventory's images entry"
}

// parsePublished reads a checksum file of sp's kind. Where a line names a
// file, it must be the artifact's file: a checksum of another file is no
// checksum of this one.
func parsePublished(sp spec, body []byte) (published, error) {
	base := path.Base(sp.URL)
	bad := func(why string) error {
		return usererr.Errorf("the mirror's checksum file is malformed; check "+fieldOr(sp.Field, "releases")+" in the inventory",
			"%s %s: %s: %s", sp.Name, sp.Version, sp.SumURL, why)
	}
	switch sp.SumKind {
	case sumSidecarSHA512, sumSidecarSHA256:
		kind, n := "sha512", 64
		if sp.SumKind == sumSidecarSHA256 {
			kind, n = "sha256", 32
		}
		// dl.k8s.io serves the hex digest only; GitHub releases "<hex>  <file>".
		f := strings.Fields(string(body))
		if len(f) == 0 || len(f) > 2 || !isHex(strings.ToLower(f[0]), n) {
			return published{}, bad("not a " + kind + " digest")
		}
		if len(f) == 2 && sumFileName(f[1]) != base {
			return published{}, bad(fmt.Sprintf("it is the checksum of %s, not of %s", f[1], base))
		}
		return published{kind: kind, hex: strings.ToLower(f[0])}, nil
	case sumSHA256SUMS:
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			if sumFileName(f[1]) == base {
				if !isHex(strings.ToLower(f[0]), 32) {
					return published{}, bad("the line for " + base + " has no sha256 digest")
				}
				return published{kind: "sha256", hex: strings.ToLower(f[0])}, nil
			}
		}
		return published{}, usererr.Errorf("hardway installs nothing it cannot verify; the mirror's "+path.Base(sp.SumURL)+" must list every file"+imageSumHint(sp),
			"%s %s: %s has no line for %s", sp.Name, sp.Version, sp.SumURL, base)
	}
	return published{}, fmt.Errorf("release: %s has no checksum kind", sp.Name)
}

// sumFileName is the file a sha256sum line names: "*x" (binary mode) and "./x" are x.
func sumFileName(s string) string {
	return strings.TrimPrefix(strings.TrimPrefix(s, "*"), "./")
}

func fieldOr(f, def string) string {
	if f == "" {
		return def
	}
	return f
}

func removeQuiet(p string) { _ = os.Remove(p) }
