package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/hardway/hardway/pkg/usererr"
)

// The ways a backup file is refused; Open's errors wrap one of them.
var (
	// ErrDamaged: a flipped, missing or added byte anywhere in the file.
	ErrDamaged = errors.New("the backup file is damaged")
	// ErrWrongKey: the passphrase or identity does not open the file.
	ErrWrongKey = errors.New("wrong passphrase or identity for this backup")
	// ErrNeedKey: the file is encrypted and no passphrase or identity was given.
	ErrNeedKey = errors.New("the backup is encrypted")
	// ErrNotBackup: not a file hardway backup wrote.
	ErrNotBackup = errors.New("not a hardway backup")
)

const damagedHint = "nothing was changed: use another copy of the backup (compare its sha256 with the one 'hardway backup' printed)"

// maxManifest bounds the first entry so that a hostile file cannot make
// Open read gigabytes into memory before checking anything.
const maxManifest = 4 << 20

// Archive is a backup file opened and proven whole: every entry extracted
// into a private temporary directory and checked against the manifest.
// Close removes the directory (it holds the plaintext snapshot and keys).
type Archive struct {
	Path      string
	Manifest  Manifest
	Encrypted bool
	dir       string
}

// Open decrypts path with ids (none for a file written with --unencrypted),
// extracts it into a new directory under tmpDir ("" for the system's) and
// checks everything: age's authentication of every chunk, gzip's CRC, the
// tar structure, each entry's name, size and sha256 against the manifest,
// no entry missing or extra, and the snapshot's own sha256 trailer. Only a
// backup that passes all of them is returned.
func Open(path string, ids []age.Identity, tmpDir string) (*Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usererr.New(fmt.Errorf("backup: %w", err), "give the file 'hardway backup' wrote: --from FILE")
	}
	defer f.Close()
	src := &eofReader{r: f}
	br := bufio.NewReader(src)
	head, _ := br.Peek(64)
	var r io.Reader = br
	encrypted := true
	switch {
	case bytes.HasPrefix(head, []byte("age-encryption.org/v1\n")):
	case bytes.HasPrefix(head, []byte(armor.Header)):
		r = armor.NewReader(br)
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		encrypted = false
	default:
		return nil, usererr.New(fmt.Errorf("%s: %w (neither age-encrypted nor gzip)", path, ErrNotBackup),
			"give the file 'hardway backup' wrote (hardway-backup-<cluster>-<time>.tar.gz.age)")
	}
	if encrypted {
		if len(ids) == 0 {
			return nil, usererr.New(fmt.Errorf("%s: %w", path, ErrNeedKey),
				"give its passphrase (HARDWAY_BACKUP_PASSPHRASE, --passphrase-file FILE, or the prompt) or --identity FILE with an age key it was made for")
		}
		dr, err := age.Decrypt(r, ids...)
		if err != nil {
			var nm *age.NoIdentityMatchError
			if errors.As(err, &nm) || errors.Is(err, age.ErrIncorrectIdentity) {
				return nil, usererr.New(fmt.Errorf("%s: %w: %v", path, ErrWrongKey, err),
					"give the passphrase used when the backup was made, or --identity with the key of one of its recipients; nothing was changed")
			}
			return nil, damaged(path, err, src.eof)
		}
		r = dr
	}
	a := &Archive{Path: path, Encrypted: encrypted}
	if a.dir, err = os.MkdirTemp(tmpDir, "hardway-restore-"); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := a.extract(r); err != nil {
		a.Close()
		var ue *usererr.Error
		if errors.As(err, &ue) {
			return nil, err
		}
		return nil, damaged(path, err, src.eof)
	}
	return a, nil
}

// eofReader remembers whether the file was read to its end: a chunk that
// fails to authenticate there is most likely a cut-off file.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

// damaged names what is wrong as well as it can be told: age cannot tell a
// cut-off last chunk from a changed one.
func damaged(path string, err error, atEOF bool) error {
	msg := err.Error()
	what := ""
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(msg, "unexpected EOF") || strings.Contains(msg, "last chunk"):
		what = " (truncated)"
	case strings.Contains(msg, "authenticate") && atEOF:
		what = " (truncated, or a changed byte near its end)"
	case strings.Contains(msg, "authenticate") || strings.Contains(msg, "checksum") || strings.Contains(msg, "header MAC"):
		what = " (a changed byte)"
	}
	return usererr.New(fmt.Errorf("%s: %w%s: %w", path, ErrDamaged, what, err), damagedHint)
}

// extract reads the archive from r into a.dir and checks it.
func (a *Archive) extract(r io.Reader) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err // gzip's own errors say "gzip:"; age's say what they are
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg || hdr.Size > maxManifest {
		return fmt.Errorf("first entry %q: want the manifest %s", hdr.Name, ManifestName)
	}
	mb, err := io.ReadAll(tr)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if err := json.Unmarshal(mb, &a.Manifest); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if err := a.Manifest.check(); err != nil {
		return err
	}
	for i, want := range a.Manifest.Files {
		hdr, err := tr.Next()
		if err != nil {
			return fmt.Errorf("tar: after %d of %d entries: %w", i, len(a.Manifest.Files), err)
		}
		if hdr.Name != want.Name || hdr.Typeflag != tar.TypeReg || hdr.Size != want.Size {
			return fmt.Errorf("entry %d is %q (%d bytes), the manifest says %q (%d bytes)", i+1, hdr.Name, hdr.Size, want.Name, want.Size)
		}
		dst := filepath.Join(a.dir, filepath.FromSlash(want.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		h := newHashWriter()
		ws := []io.Writer{out, h}
		var tc *trailerCheck
		if want.Name == SnapshotName {
			tc = newTrailerCheck()
			ws = append(ws, tc)
		}
		_, err = io.Copy(io.MultiWriter(ws...), tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", want.Name, err)
		}
		if h.n != want.Size || h.sum() != want.SHA256 {
			return fmt.Errorf("%s: sha256 %s, the manifest says %s", want.Name, h.sum(), want.SHA256)
		}
		if tc != nil {
			if err := tc.verify(); err != nil {
				return err
			}
		}
	}
	if hdr, err := tr.Next(); err != io.EOF {
		if err == nil {
			return fmt.Errorf("entry %q is not in the manifest", hdr.Name)
		}
		return fmt.Errorf("tar: %w", err)
	}
	// The rest of the gzip stream (its CRC and length) and, through it,
	// age's last chunk: a file cut after the tar's end is damaged too.
	if n, err := io.Copy(io.Discard, gz); err != nil || n != 0 {
		if err == nil {
			err = fmt.Errorf("%d bytes after the archive", n)
		}
		return fmt.Errorf("gzip: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	if n, err := io.Copy(io.Discard, r); err != nil || n != 0 {
		if err == nil {
			err = fmt.Errorf("%d bytes after the archive", n)
		}
		return err
	}
	return nil
}

// check proves the manifest is one hardway wrote and can restore.
func (m *Manifest) check() error {
	if m.Format != FormatVersion {
		return usererr.New(fmt.Errorf("%w: format %d (this hardway reads format %d)", ErrNotBackup, m.Format, FormatVersion),
			"restore it with the hardway version that wrote it ("+m.HardwayVersion+")")
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if err := validName(f.Name); err != nil {
			return err
		}
		if seen[f.Name] {
			return fmt.Errorf("entry %q twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 || len(f.SHA256) != 64 {
			return fmt.Errorf("entry %q: bad size or sha256", f.Name)
		}
	}
	for _, need := range []string{SnapshotName, InventoryName} {
		if !seen[need] {
			return fmt.Errorf("the manifest lists no %s", need)
		}
	}
	for _, f := range m.Files {
		if f.Name == SnapshotName && (f.SHA256 != m.Snapshot.SHA256 || f.Size != m.Snapshot.Size) {
			return errors.New("the snapshot entry and the manifest's snapshot disagree")
		}
	}
	return nil
}

// Close removes the extracted files.
func (a *Archive) Close() error {
	if a.dir == "" {
		return nil
	}
	err := os.RemoveAll(a.dir)
	a.dir = ""
	return err
}

// FilePath is where the named entry was extracted (0600).
func (a *Archive) FilePath(name string) string {
	return filepath.Join(a.dir, filepath.FromSlash(name))
}

// SnapshotPath is the extracted etcd snapshot.
func (a *Archive) SnapshotPath() string { return a.FilePath(SnapshotName) }

// Has says whether the backup holds the named entry.
func (a *Archive) Has(name string) bool {
	for _, f := range a.Manifest.Files {
		if f.Name == name {
			return true
		}
	}
	return false
}

// Encrypted says whether path is an age-encrypted backup (false for a plain
// .tar.gz), so that a caller asks for a passphrase only when one is needed.
// It reads the first bytes only; Open checks the rest.
func Encrypted(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, usererr.New(fmt.Errorf("backup: %w", err), "give the file 'hardway backup' wrote: --from FILE")
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	return !bytes.HasPrefix(head, []byte{0x1f, 0x8b}), nil
}

// Verify opens path, checks all of it and removes what it extracted.
func Verify(path string, ids []age.Identity, tmpDir string) (*Manifest, error) {
	a, err := Open(path, ids, tmpDir)
	if err != nil {
		return nil, err
	}
	m := a.Manifest
	return &m, a.Close()
}
