package release

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/usererr"
)

// A bundle is a plain tar for carrying a release set into an air-gapped
// site: hardway.lock first, then artifacts/<arch>/<name> for every
// downloaded file (members are unpacked again from their archive on
// import): kube-apiserver for amd64 and for arm64 are two files. Names are
// path-escaped so an image's "image:registry.k8s.io/pause:3.10.2" stays one
// entry; the other names escape to themselves. A bundle of an earlier
// hardway has artifacts/<name>, of its lock's one arch; it imports as well.
const bundleDir = "artifacts/"

// WriteBundle writes set's lock and files to path atomically. Entries carry
// a fixed time and owner so the same set always makes the same bytes.
func WriteBundle(set *Set, dst string) error {
	lockData, err := set.Lock.Marshal()
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeBundleTar(pw, set, lockData))
	}()
	if err := fsutil.WriteFrom(dst, pr, 0o644); err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}

func writeBundleTar(w io.Writer, set *Set, lockData []byte) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0).UTC()
	hdr := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Size: size, Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(LockFileName, int64(len(lockData)))); err != nil {
		return err
	}
	if _, err := tw.Write(lockData); err != nil {
		return err
	}
	for _, e := range set.Lock.Artifacts {
		if e.Member != "" {
			continue
		}
		a, ok := set.Get(e.Arch, e.Name)
		if !ok {
			return fmt.Errorf("bundle: %s (%s) is not in the set", e.Name, e.Arch)
		}
		f, err := os.Open(a.Path)
		if err != nil {
			return err
		}
		err = tw.WriteHeader(hdr(bundleDir+a.Arch+"/"+url.PathEscape(a.Name), a.Size))
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("bundle %s: %w", a.Name, err)
		}
	}
	return tw.Close()
}

// ImportBundle verifies every file of the bundle at src against the
// bundle's lock (and the local lock, when there is one), puts them into the
// cache, writes the lock if there was none, then resolves offline.
func ImportBundle(ctx context.Context, src string, opts Options) (*Set, error) {
	r, err := newResolver(opts)
	if err != nil {
		return nil, err
	}
	hint := "the bundle is damaged or not made by 'hardway fetch --bundle'; make it again"
	f, err := os.Open(src)
	if err != nil {
		return nil, usererr.Errorf("check the path given to --from-bundle", "open bundle: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != LockFileName || hdr.Typeflag != tar.TypeReg || hdr.Size > 1<<20 {
		return nil, usererr.Errorf(hint, "%s: the first entry must be %s", src, LockFileName)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, usererr.Errorf(hint, "%s: read %s: %w", src, LockFileName, err)
	}
	bl, err := ParseLock(src+":"+LockFileName, data)
	if err != nil {
		return nil, err
	}
	k8sReq, err := ParseRequested(opts.Kubernetes, true)
	if err != nil {
		return nil, err
	}
	etcdReq, err := ParseRequested(opts.Etcd, false)
	if err != nil {
		return nil, err
	}
	if err := checkLockVersions(bl, src, k8sReq, etcdReq); err != nil {
		return nil, err
	}
	local, err := ReadLock(opts.LockPath)
	if err != nil {
		return nil, err
	}
	if opts.UpdateLock {
		local = nil
	}
	for _, e := range bl.Artifacts {
		le, ok := local.Entry(e.Arch, e.Name)
		if !ok {
			continue
		}
		if le.SHA256 != e.SHA256 {
			return nil, mismatchError(opts.LockPath, e.Name, src, "sha256", le.SHA256, e.SHA256)
		}
		if le.SHA512 != e.SHA512 {
			return nil, mismatchError(opts.LockPath, e.Name, src, "sha512", le.SHA512, e.SHA512)
		}
	}
	if err := os.MkdirAll(r.cache.tmpDir(), 0o700); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, usererr.Errorf(hint, "%s: %w", src, err)
		}
		e, ok := bundleEntry(bl, hdr)
		if !ok {
			return nil, usererr.Errorf(hint, "%s: unexpected entry %q", src, hdr.Name)
		}
		name := e.Name
		x, err := writeMember(tr, hdr.Size, r.cache.tmpDir())
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", src, name, err)
		}
		if x.SHA256 != e.SHA256 || x.SHA512 != e.SHA512 {
			removeQuiet(x.tmp)
			return nil, usererr.Errorf(hint, "%s: %s does not match the bundle's lock:\n  locked sha256 %s\n  got    sha256 %s",
				src, name, e.SHA256, x.SHA256)
		}
		if _, err := r.cache.commitFile(x.tmp, x.Digests); err != nil {
			return nil, err
		}
		label := name
		if len(bl.Arches) > 1 {
			label += " (" + e.Arch + ")"
		}
		r.prog.Done(label, e.Version+": imported from bundle")
	}
	if local == nil {
		if _, err := WriteLock(opts.LockPath, bl); err != nil {
			return nil, err
		}
	}
	opts.Offline = true
	opts.UpdateLock = false
	set, err := Resolve(ctx, opts)
	if err != nil {
		return nil, err
	}
	set.LockWritten = set.LockWritten || local == nil
	return set, nil
}

// bundleEntry is the lock entry a bundle's tar entry holds: one regular
// file artifacts/<arch>/<name>, or artifacts/<name> (an earlier hardway's,
// whose lock names the arch), of a downloaded file the bundle's lock pins.
func bundleEntry(bl *Lock, hdr *tar.Header) (LockEntry, bool) {
	rest, ok := strings.CutPrefix(hdr.Name, bundleDir)
	if !ok || hdr.Typeflag != tar.TypeReg || hdr.Size > maxArchiveBytes {
		return LockEntry{}, false
	}
	arch, escaped, withArch := strings.Cut(rest, "/")
	if !withArch {
		escaped = rest
	}
	name, err := url.PathUnescape(escaped)
	if err != nil || path.Base(escaped) != escaped {
		return LockEntry{}, false
	}
	var e LockEntry
	if withArch {
		e, ok = bl.Entry(arch, name)
	} else if es := bl.Named(name); len(es) == 1 {
		e, ok = es[0], true
	}
	return e, ok && e.Member == ""
}
