package release

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/hardway/hardway/pkg/usererr"
)

// Limits on what an archive may hold. The real etcd binaries are ~25 MB
// each and the whole tarball unpacks to under 100 MB.
const (
	maxMemberSize   = 512 << 20
	maxArchiveBytes = 2 << 30
	maxEntries      = 10000
)

// extracted is one member written to a temporary file in the cache.
type extracted struct {
	tmp string
	Digests
}

// extractMembers unpacks exactly the wanted members (paths inside the
// archive) of a verified .tar.gz into temporary files under dir. Anything
// unsafe anywhere in the archive refuses the whole archive: an absolute path,
// a ".." component, a link, a device or fifo, an oversized or duplicate
// entry. Other regular files (README.md, Documentation/) are skipped.
func extractMembers(archive, name, field string, wanted []string, dir string) (_ map[string]extracted, err error) {
	refuse := func(format string, args ...any) error {
		return usererr.Errorf("this is not a release archive hardway can trust; check "+fieldOr(field, "releases")+" in the inventory",
			"%s: %s; refusing the archive", name, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, refuse("not gzip: %v", err)
	}
	want := map[string]bool{}
	for _, w := range wanted {
		want[w] = true
	}
	out := map[string]extracted{}
	defer func() {
		if err != nil {
			for _, e := range out {
				os.Remove(e.tmp)
			}
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	var total int64
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, refuse("corrupt tar: %v", err)
		}
		if i >= maxEntries {
			return nil, refuse("more than %d entries", maxEntries)
		}
		n := hdr.Name
		if strings.HasPrefix(n, "/") {
			return nil, refuse("entry %q has an absolute path", n)
		}
		for _, part := range strings.Split(n, "/") {
			if part == ".." {
				return nil, refuse("entry %q escapes the archive with '..'", n)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, refuse("entry %q is a link (to %q)", n, hdr.Linkname)
		default:
			return nil, refuse("entry %q is not a regular file (type %q)", n, hdr.Typeflag)
		}
		if hdr.Size < 0 || hdr.Size > maxMemberSize {
			return nil, refuse("entry %q is %d bytes, over the %d limit", n, hdr.Size, maxMemberSize)
		}
		total += hdr.Size
		if total > maxArchiveBytes {
			return nil, refuse("unpacks to more than %d bytes", maxArchiveBytes)
		}
		clean := path.Clean(n)
		if !want[clean] {
			continue
		}
		if _, dup := out[clean]; dup {
			return nil, refuse("entry %q appears twice", n)
		}
		e, err := writeMember(tr, hdr.Size, dir)
		if err != nil {
			return nil, fmt.Errorf("%s: unpack %s: %w", name, n, err)
		}
		out[clean] = e
	}
	var missing []string
	for _, w := range wanted {
		if _, ok := out[w]; !ok {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return nil, refuse("missing %s", strings.Join(missing, ", "))
	}
	return out, nil
}

func writeMember(r io.Reader, size int64, dir string) (extracted, error) {
	f, err := os.CreateTemp(dir, ".x-*")
	if err != nil {
		return extracted{}, err
	}
	h := newHasher()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(r, size), make([]byte, copyBufSize))
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		os.Remove(f.Name())
		return extracted{}, err
	}
	return extracted{tmp: f.Name(), Digests: h.sum()}, nil
}
