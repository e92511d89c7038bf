package release

import (
	"context"
	"fmt"
	"os"
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
	body, err := s.get(ctx, sp.SumURL)
	if err != nil {
		if IsNotFound(err) {
			return published{}, usererr.Errorf("hardway installs nothing it cannot verify; the mirror must publish checksums beside the files, as the official sites do",
				"%s %s: no published checksum at %s: %w", sp.Name, sp.Version, sp.SumURL, err)
		}
		return published{}, fmt.Errorf("%s %s: checksum: %w", sp.Name, sp.Version, err)
	}
	bad := func(why string) error {
		return usererr.Errorf("the mirror's checksum file is malformed; check releases in the inventory",
			"%s %s: %s: %s", sp.Name, sp.Version, sp.SumURL, why)
	}
	switch sp.SumKind {
	case sumSidecarSHA512:
		// dl.k8s.io serves the hex digest only; tolerate "<hex>  <name>" too.
		f := strings.Fields(string(body))
		if len(f) == 0 || !isHex(strings.ToLower(f[0]), 64) {
			return published{}, bad("not a sha512 digest")
		}
		return published{kind: "sha512", hex: strings.ToLower(f[0])}, nil
	case sumSHA256SUMS:
		base := sp.Name
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			if strings.TrimPrefix(f[1], "*") == base || strings.TrimPrefix(f[1], "./") == base {
				if !isHex(strings.ToLower(f[0]), 32) {
					return published{}, bad("the line for " + base + " has no sha256 digest")
				}
				return published{kind: "sha256", hex: strings.ToLower(f[0])}, nil
			}
		}
		return published{}, usererr.Errorf("hardway installs nothing it cannot verify; the mirror's SHA256SUMS must list every file",
			"%s %s: %s has no line for %s", sp.Name, sp.Version, sp.SumURL, base)
	}
	return published{}, fmt.Errorf("release: %s has no checksum kind", sp.Name)
}

func removeQuiet(p string) { _ = os.Remove(p) }
