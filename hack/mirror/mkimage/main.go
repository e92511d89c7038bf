// Command mkimage writes a single-layer container image as a docker-archive
// tarball (what `ctr images import` and `docker load` read) with no registry,
// no daemon and no base image, using go-containerregistry as a library.
//
//	mkimage -name registry.k8s.io/pause:3.10.2 -arch amd64 -created 2026-01-01T00:00:00Z \
//	  -entrypoint /pause -file ./pause:/pause -o pause.tar
//
// With -rootfs DIR the layer is a whole directory tree instead (directories,
// files and symbolic links with their modes and owners; device nodes and
// sockets are left out: the runtime makes /dev), and -file adds to it: the
// conformance suite's images (hack/conformance/images.sh).
//
// The output is reproducible: layer entries are sorted and carry the
// -created time; a -rootfs entry keeps its tree's owner and mode, a -file
// is owner 0 with mode 0755 or 0644 (by its execute bits) plus its setuid
// and setgid bits (a setuid-root program, as the nonewprivs image has);
// the config's created time is -created too. The same inputs give the
// same bytes, so the mirror's SHA256SUMS do not move on a rebuild.
//
// -user sets the config's User (the nonroot image's USER 1234); without it
// the config has none, as before the flag existed.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	var files fileList
	ref := flag.String("name", "", "image name, e.g. registry.k8s.io/pause:3.10.2")
	arch := flag.String("arch", "amd64", "image architecture (os is linux)")
	created := flag.String("created", "", "RFC 3339 time for the config and every layer entry")
	ep := flag.String("entrypoint", "", "entrypoint, arguments separated by commas")
	cmd := flag.String("cmd", "", "default arguments (the image's Cmd), separated by commas")
	rootfs := flag.String("rootfs", "", "a directory tree to put in the layer as /")
	user := flag.String("user", "", "the user the image runs as (the config's User), e.g. 1234")
	out := flag.String("o", "", "output tarball")
	flag.Var(&files, "file", "SRC:DEST, a file to put in the layer at the absolute path DEST (repeatable)")
	flag.Parse()
	if err := run(*ref, *arch, *created, *ep, *cmd, *user, *rootfs, *out, files); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ref, arch, created, ep, cmd, user, rootfs, out string, files []string) error {
	if ref == "" || out == "" || (ep == "" && cmd == "") || (len(files) == 0 && rootfs == "") || created == "" {
		return fmt.Errorf("-name, -created, -entrypoint or -cmd, -o and -rootfs or at least one -file are required")
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	t = t.UTC()
	data, err := layerTar(rootfs, files, t)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: t}, CreatedBy: "hack/mirror/mkimage"},
	})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: t}
	if ep != "" {
		cf.Config.Entrypoint = strings.Split(ep, ",")
	}
	if cmd != "" {
		cf.Config.Cmd = strings.Split(cmd, ",")
	}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.User = user // omitted from the JSON when empty
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "mkimage: %s %s (image id %s)\n", out, tag, cfgName)
	return nil
}

// layerTar is the layer: the rootfs tree (if any) and each DEST with its
// parent directories, sorted, with fixed times; owners 0 unless the tree
// says otherwise.
func layerTar(rootfs string, files []string, t time.Time) ([]byte, error) {
	type entry struct {
		src      string
		mode     int64
		link     string // a symbolic link's target
		uid, gid int
	}
	entries := map[string]entry{} // path inside the layer, no leading slash; dirs end in /
	if rootfs != "" {
		err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(rootfs, p)
			if err != nil || rel == "." {
				return err
			}
			rel = filepath.ToSlash(rel)
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			e := entry{mode: int64(info.Mode().Perm())}
			if info.Mode()&fs.ModeSetuid != 0 {
				e.mode |= 0o4000
			}
			if info.Mode()&fs.ModeSetgid != 0 {
				e.mode |= 0o2000
			}
			if info.Mode()&fs.ModeSticky != 0 {
				e.mode |= 0o1000
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				e.uid, e.gid = int(st.Uid), int(st.Gid)
			}
			switch {
			case info.IsDir():
				entries[rel+"/"] = e
			case info.Mode()&fs.ModeSymlink != 0:
				if e.link, err = os.Readlink(p); err != nil {
					return err
				}
				entries[rel] = e
			case info.Mode().IsRegular():
				e.src = p
				entries[rel] = e
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("-rootfs: %w", err)
		}
	}
	for _, f := range files {
		src, dest, ok := strings.Cut(f, ":")
		if !ok || !path.IsAbs(dest) || path.Clean(dest) != dest || dest == "/" {
			return nil, fmt.Errorf("-file %q: want SRC:/absolute/dest", f)
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("-file %q: %s is not a regular file", f, src)
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		// kept, not normalised away: nonewprivs' nnp is setuid root
		if st.Mode()&fs.ModeSetuid != 0 {
			mode |= 0o4000
		}
		if st.Mode()&fs.ModeSetgid != 0 {
			mode |= 0o2000
		}
		rel := strings.TrimPrefix(dest, "/")
		entries[rel] = entry{src: src, mode: mode}
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			if _, ok := entries[d+"/"]; !ok {
				entries[d+"/"] = entry{mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{Name: n, Mode: e.mode, ModTime: t, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		if e.link != "" {
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			continue
		}
		if strings.HasSuffix(n, "/") {
			h.Typeflag = tar.TypeDir
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			continue
		}
		b, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
