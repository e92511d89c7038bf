package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Extract copies the named members of a gzipped tarball into dir, each under
// its base name and executable: hack/conformance/build.sh takes e2e.test and
// ginkgo out of the verified kubernetes-test tarball this way. Only the named
// members are read, and only as regular files, so nothing else the tarball
// holds (links, other paths) lands anywhere. All or nothing: a member that is
// missing, twice there or not a regular file leaves dir as it was.
func Extract(tarball, dir string, members []string) error {
	want := map[string]string{} // member -> its temporary file, once read
	bases := map[string]bool{}
	var names []string
	for _, m := range members {
		m = path.Clean(strings.TrimPrefix(m, "./"))
		names = append(names, m)
		if bases[path.Base(m)] {
			return fmt.Errorf("%s: two members named %s", tarball, path.Base(m))
		}
		bases[path.Base(m)] = true
		want[m] = ""
	}
	var temps []string
	defer func() {
		for _, t := range temps {
			_ = os.Remove(t)
		}
	}()

	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", tarball, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tarball, err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		done, ok := want[name]
		if !ok {
			continue
		}
		if done != "" {
			return fmt.Errorf("%s: %s is there twice", tarball, name)
		}
		if h.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s: %s is not a regular file", tarball, name)
		}
		tmp, err := os.CreateTemp(dir, "."+path.Base(name)+".extract-*")
		if err != nil {
			return err
		}
		temps = append(temps, tmp.Name())
		want[name] = tmp.Name()
		_, err = io.Copy(tmp, tr)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o755)
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", tarball, name, err)
		}
	}
	for _, m := range names {
		if want[m] == "" {
			return fmt.Errorf("%s has no %s", tarball, m)
		}
	}
	for _, m := range names {
		if err := os.Rename(want[m], filepath.Join(dir, path.Base(m))); err != nil {
			return err
		}
	}
	temps = nil
	return nil
}
