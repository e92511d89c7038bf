package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// Source takes the etcd snapshot: it writes the snapshot, exactly as the
// leader streams it (sha256 trailer included), to w and says where it came
// from. pkg/cluster's Cluster is one (through the SSH connection).
type Source interface {
	Snapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error)
}

// Options say what to back up and where to.
type Options struct {
	Source    Source
	Inventory *inventory.Inventory // its file and the hardway.lock beside it go in
	State     state.Dir            // the caller holds its lock

	Dir  string // output directory, created 0700 if missing
	Keep int    // keep the newest Keep backups of this cluster in Dir; 0: keep all

	// Recipients encrypt the file (a passphrase's scrypt recipient, or age
	// public keys). None is an error unless Plaintext is set on purpose.
	Recipients []age.Recipient
	Plaintext  bool

	HardwayVersion string
	Log            io.Writer        // progress lines; nil: none
	Now            func() time.Time // nil: time.Now
}

// Result is one backup written.
type Result struct {
	Path      string        `json:"path"`
	Size      int64         `json:"size"`
	SHA256    string        `json:"sha256"` // of the file as written
	Duration  time.Duration `json:"durationNanos"`
	Encrypted bool          `json:"encrypted"`
	Snapshot  SnapshotInfo  `json:"snapshot"`
	Files     int           `json:"files"` // entries besides the manifest
	Removed   []string      `json:"removed,omitempty"`
}

// Create writes one backup file into o.Dir: temp file, fsync, rename, mode
// 0600. The snapshot is taken first into a private temporary directory (a
// tar entry needs its size up front) and its trailer checked; nothing is
// written under the final name unless every part is whole.
func Create(ctx context.Context, o Options) (*Result, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	start := now()
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "[backup] "+format+"\n", args...)
		}
	}
	if len(o.Recipients) == 0 && !o.Plaintext {
		return nil, usererr.WithCode(errors.New("backup: no passphrase or recipient: the file holds every key of the cluster"), usererr.CodeUsage,
			"set HARDWAY_BACKUP_PASSPHRASE, or --passphrase-file FILE, or --recipient age1…; --unencrypted only if the file is kept somewhere safe")
	}
	if o.Inventory == nil || o.Source == nil {
		return nil, errors.New("backup: no inventory or snapshot source")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup directory: %w", err)
	}
	tmp, err := os.MkdirTemp(o.Dir, ".hardway-backup-")
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(tmp)

	// 1. The snapshot, checked against etcd's own trailer as it arrives.
	snapPath := filepath.Join(tmp, "snapshot.db")
	sf, err := os.OpenFile(snapPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	tc, hw := newTrailerCheck(), newHashWriter()
	t0 := now()
	info, err := o.Source.Snapshot(ctx, io.MultiWriter(sf, tc, hw))
	if cerr := sf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := tc.verify(); err != nil {
		return nil, usererr.New(fmt.Errorf("backup: the snapshot from %s: %w", info.Member, err),
			"nothing was written; run the backup again (a snapshot damaged in transit is never kept)")
	}
	info.Size, info.SHA256 = hw.n, hw.sum()
	logf("etcd snapshot from %s (leader): %s in %s, sha256 trailer ok", info.Member, humanBytes(info.Size), now().Sub(t0).Round(time.Millisecond))

	// 2. What goes in, besides the snapshot.
	entries := []entry{{File: File{Name: SnapshotName, Mode: 0o600}, path: snapPath}}
	entries = append(entries, entry{File: File{Name: InventoryName, Mode: 0o644}, path: o.Inventory.Path})
	if _, err := os.Stat(o.Inventory.LockPath()); err == nil {
		entries = append(entries, entry{File: File{Name: LockName, Mode: 0o644}, path: o.Inventory.LockPath()})
	}
	st, err := stateEntries(o.State)
	if err != nil {
		return nil, err
	}
	entries = append(entries, st...)
	// Hash every local file first: the manifest leads the archive.
	for i := range entries {
		if err := entries[i].hash(); err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
	}
	entries[0].Size, entries[0].SHA256 = info.Size, info.SHA256 // as checked above
	m := Manifest{Format: FormatVersion, Created: start.UTC(), HardwayVersion: o.HardwayVersion,
		Cluster: o.Inventory.Cluster, Snapshot: info}
	for _, h := range o.Inventory.ControlPlane {
		m.ControlPlane = append(m.ControlPlane, h.Name)
	}
	for _, e := range entries {
		m.Files = append(m.Files, e.File)
	}

	// 3. The file: tar → gzip → age → temp file → rename.
	name, err := freeName(o.Dir, o.Inventory.Cluster, start, len(o.Recipients) > 0)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeArchive(pw, m, entries, o.Recipients)) }()
	out := newHashWriter()
	if err := fsutil.WriteFrom(name, io.TeeReader(pr, out), 0o600); err != nil {
		pr.CloseWithError(err)
		return nil, fmt.Errorf("backup: %w", err)
	}
	res := &Result{Path: name, Size: out.n, SHA256: out.sum(), Encrypted: len(o.Recipients) > 0,
		Snapshot: info, Files: len(entries)}
	logf("wrote %s (%s, %d files, %s)", name, humanBytes(res.Size), res.Files, map[bool]string{true: "age-encrypted", false: "NOT encrypted"}[res.Encrypted])

	// 4. --keep: only this cluster's backups, only files named like ours.
	if o.Keep > 0 {
		removed, err := prune(o.Dir, o.Inventory.Cluster, o.Keep)
		res.Removed = removed
		for _, r := range removed {
			logf("removed %s (--keep %d)", r, o.Keep)
		}
		if err != nil {
			return res, err
		}
	}
	res.Duration = now().Sub(start)
	return res, nil
}

// entry is a File and where its bytes are.
type entry struct {
	File
	path string
}

func (e *entry) hash() error {
	f, err := os.Open(e.path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := newHashWriter()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read %s: %w", e.path, err)
	}
	e.Size, e.SHA256 = h.n, h.sum()
	return nil
}

// stateEntries is every file of the state directory but the lock (it names
// a process, not state), the run logs and stray temp files of interrupted
// writes. A symlink or other special file is refused: restoring it could
// point anywhere.
func stateEntries(dir state.Dir) ([]entry, error) {
	var out []entry
	root := string(dir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && rel == "logs":
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case rel == "lock" || strings.HasPrefix(d.Name(), ".tmp-"):
			return nil
		case !d.Type().IsRegular():
			return usererr.New(fmt.Errorf("backup: %s is not a regular file", p), "hardway's state directory holds only regular files: move it away")
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, entry{File: File{Name: StatePrefix + rel, Mode: uint32(fi.Mode().Perm())}, path: p})
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, usererr.New(fmt.Errorf("backup: no state directory at %s", root), "run it where 'hardway up' ran (--state DIR), or rebuild it with 'hardway state pull'")
		}
		return nil, fmt.Errorf("backup: %w", err)
	}
	if len(out) == 0 {
		return nil, usererr.New(fmt.Errorf("backup: the state directory %s is empty", root), "rebuild it with 'hardway state pull HOST' first")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// writeArchive writes the manifest and every entry, checking each against
// the size and hash the manifest promises (a file that changed since it
// was hashed fails the backup instead of making a file Open refuses).
func writeArchive(w io.Writer, m Manifest, entries []entry, recipients []age.Recipient) error {
	var dst io.Writer = w
	var enc io.WriteCloser
	if len(recipients) > 0 {
		var err error
		if enc, err = age.Encrypt(w, recipients...); err != nil {
			return fmt.Errorf("age: %w", err)
		}
		dst = enc
	}
	gz := gzip.NewWriter(dst)
	tw := tar.NewWriter(gz)
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	mtime := m.Created
	if err := tw.WriteHeader(&tar.Header{Name: ManifestName, Mode: 0o644, Size: int64(len(mb)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(mb); err != nil {
		return err
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.Name, Mode: int64(e.Mode), Size: e.Size, ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		f, err := os.Open(e.path)
		if err != nil {
			return err
		}
		h := newHashWriter()
		_, err = io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, e.Size))
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if h.n != e.Size || h.sum() != e.SHA256 {
			return fmt.Errorf("%s changed while it was backed up; run the backup again", e.path)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	if enc != nil {
		return enc.Close()
	}
	return nil
}

// FileName is the name Create gives a backup of cluster taken at t.
func FileName(cluster string, t time.Time, encrypted bool) string {
	n := "hardway-backup-" + cluster + "-" + t.UTC().Format("20060102T150405Z") + ".tar.gz"
	if encrypted {
		n += ".age"
	}
	return n
}

var nameRE = regexp.MustCompile(`^hardway-backup-(.+)-(\d{8}T\d{6}Z)(-\d+)?\.tar\.gz(\.age)?$`)

// freeName is the path for a new backup; a second one in the same second
// gets a suffix instead of replacing the first.
func freeName(dir, cluster string, t time.Time, encrypted bool) (string, error) {
	base := FileName(cluster, t, encrypted)
	p := filepath.Join(dir, base)
	for i := 2; ; i++ {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
		if i > 100 {
			return "", fmt.Errorf("backup: no free name for %s in %s", base, dir)
		}
		stem, ext, _ := strings.Cut(base, ".tar.gz")
		p = filepath.Join(dir, fmt.Sprintf("%s-%d.tar.gz%s", stem, i, ext))
	}
}

// List is this cluster's backups in dir, oldest first (by the time in the
// name, which Create writes in UTC).
func List(dir, cluster string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type item struct{ name, key string }
	var items []item
	for _, d := range des {
		m := nameRE.FindStringSubmatch(d.Name())
		if m == nil || m[1] != cluster || !d.Type().IsRegular() {
			continue
		}
		n := 0
		if m[3] != "" {
			n, _ = strconv.Atoi(m[3][1:])
		}
		items = append(items, item{d.Name(), fmt.Sprintf("%s-%03d", m[2], n)})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].key < items[j].key })
	var out []string
	for _, it := range items {
		out = append(out, filepath.Join(dir, it.name))
	}
	return out, nil
}

// prune removes all but the newest keep backups of cluster in dir.
func prune(dir, cluster string, keep int) ([]string, error) {
	all, err := List(dir, cluster)
	if err != nil || len(all) <= keep {
		return nil, err
	}
	var removed []string
	for _, p := range all[:len(all)-keep] {
		if err := os.Remove(p); err != nil {
			return removed, fmt.Errorf("backup --keep: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
