// Package fsutil holds the one way hardway writes local files: atomically.
package fsutil

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile writes data to path atomically: a temporary file in the same
// directory (so the rename cannot cross file systems), fsync, chmod, rename,
// then fsync of the directory so the rename itself survives a crash. A reader
// sees either the old file or the new one, never a half-written one, and an
// interrupted write leaves at most a stray ".tmp-*" file that the next write
// does not trip over.
//
// Parent directories are created with dirPerm 0700 because everything hardway
// keeps locally (the state directory, the cache) may hold secrets.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(data), perm)
}

// WriteFrom is WriteFile for a stream; the content is never held in memory whole.
func WriteFrom(path string, r io.Reader, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600; chmod before any byte is written so a
	// more open mode never exposes a partial secret and a tighter one is never
	// loosened after the fact.
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = io.Copy(f, r); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // best effort: not every file system supports it
		d.Close()
	}
	return nil
}

// SameContent reports whether the file at path exists and holds exactly data.
func SameContent(path string, data []byte) bool {
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, data)
}
