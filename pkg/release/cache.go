package release

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hardway/hardway/pkg/fsutil"
)

// Cache is a content-addressed store of verified files:
//
//	<dir>/blobs/sha256/<hex>   verified content, named by its sha256
//	<dir>/sources/<key>.json   what a URL served last time (digests, fingerprint)
//	<dir>/tmp/<key>.partial    an interrupted download, resumed next time
//	<dir>/tmp/<key>.lock       flock'd while one process downloads that URL
//
// A blob only appears by rename after its digest matched, so a reader never
// sees a partial file, and a blob whose bytes rotted is found out by
// hashing it on use.
type Cache struct {
	Dir string
	// Memo lets lookups record what they hashed in the stat memo (see
	// remembered); plans resolve without it, as a plan writes nothing.
	Memo bool
}

// DefaultCacheDir is $XDG_CACHE_HOME/hardway, else ~/.cache/hardway.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory (set XDG_CACHE_HOME or pass --cache-dir): %w", err)
	}
	return filepath.Join(d, "hardway"), nil
}

// BlobPath is where content with this sha256 lives.
func (c Cache) BlobPath(sha256hex string) string {
	return filepath.Join(c.Dir, "blobs", "sha256", sha256hex)
}

func (c Cache) tmpDir() string { return filepath.Join(c.Dir, "tmp") }

func urlKey(u string) string {
	s := sha256.Sum256([]byte(u))
	return hex.EncodeToString(s[:16])
}

// Digests of one file.
type Digests struct {
	SHA256 string `json:"sha256"`
	SHA512 string `json:"sha512"`
	Size   int64  `json:"size"`
}

// hasher computes sha256 and sha512 in one pass, the two on separate
// cores: hashing, not the disk or loopback, bounds a download's speed.
type hasher struct {
	h256, h512 hash.Hash
	n          int64
}

func newHasher() *hasher { return &hasher{h256: sha256.New(), h512: sha512.New()} }

func (h *hasher) Write(p []byte) (int, error) {
	if len(p) >= 64<<10 {
		var wg sync.WaitGroup
		wg.Go(func() { h.h256.Write(p) })
		h.h512.Write(p)
		wg.Wait()
	} else {
		h.h256.Write(p)
		h.h512.Write(p)
	}
	h.n += int64(len(p))
	return len(p), nil
}

func (h *hasher) sum() Digests {
	return Digests{SHA256: hex.EncodeToString(h.h256.Sum(nil)), SHA512: hex.EncodeToString(h.h512.Sum(nil)), Size: h.n}
}

// HashFile returns both digests of the file at path.
func HashFile(path string) (Digests, error) {
	f, err := os.Open(path)
	if err != nil {
		return Digests{}, err
	}
	defer f.Close()
	h := newHasher()
	if _, err := io.CopyBuffer(h, f, make([]byte, copyBufSize)); err != nil {
		return Digests{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return h.sum(), nil
}

// SHA512File returns the sha512 of the file at path.
func SHA512File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, copyBufSize)); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookup returns the blob with this sha256 after hashing it again; a blob
// whose content no longer matches its name is removed so it is fetched anew.
func (c Cache) lookup(sha256hex string) (Digests, string, bool, error) {
	if sha256hex == "" {
		return Digests{}, "", false, nil
	}
	p := c.BlobPath(sha256hex)
	if d, ok := c.remembered(p, sha256hex); ok {
		return d, p, true, nil
	}
	d, err := HashFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Digests{}, "", false, nil
	}
	if err != nil {
		return Digests{}, "", false, err
	}
	if d.SHA256 != sha256hex {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Digests{}, "", false, fmt.Errorf("remove corrupted cache entry: %w", err)
		}
		return Digests{}, "", false, errCorrupted
	}
	if c.Memo {
		c.remember(p, d)
	}
	return d, p, true, nil
}

// The stat memo, <dir>/verified, spares hashing a blob again on every run
// (seconds for a release set): one line per blob hashed, "path size inode
// mtime ctime<TAB>sha256 sha512". A blob whose stat is still the one
// recorded is the file that was hashed: ctime cannot be set from user space,
// so any change to it since (rot aside) shows. Git's index works the same
// way. Deleting the file makes the next run hash every blob again.
func (c Cache) memoPath() string { return filepath.Join(c.Dir, "verified") }

// memoLines bounds the memo; past it the oldest half goes (a lost line
// only costs one hash).
const memoLines = 1024

func statKey(p string) (string, bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s %d %d %d.%09d %d.%09d", p, fi.Size(), st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec), true
}

// remembered returns the digests the memo holds for the blob at p with the
// name sha256hex, if its stat is unchanged since they were recorded.
func (c Cache) remembered(p, sha256hex string) (Digests, bool) {
	key, ok := statKey(p)
	if !ok {
		return Digests{}, false
	}
	b, err := os.ReadFile(c.memoPath())
	if err != nil {
		return Digests{}, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "\t")
		if !ok || k != key {
			continue
		}
		s256, s512, ok := strings.Cut(v, " ")
		if ok && s256 == sha256hex && len(s512) == 128 {
			fields := strings.Fields(k)
			size, _ := strconv.ParseInt(fields[len(fields)-4], 10, 64)
			return Digests{SHA256: s256, SHA512: s512, Size: size}, true
		}
	}
	return Digests{}, false
}

// remember records d for the blob at p; best effort.
func (c Cache) remember(p string, d Digests) {
	key, ok := statKey(p)
	if !ok {
		return
	}
	f, err := os.OpenFile(c.memoPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%s\t%s %s\n", key, d.SHA256, d.SHA512)
	_ = f.Close()
	if b, err := os.ReadFile(c.memoPath()); err == nil {
		if lines := strings.SplitAfter(string(b), "\n"); len(lines) > memoLines {
			_ = fsutil.WriteFile(c.memoPath(), []byte(strings.Join(lines[len(lines)-memoLines/2:], "")), 0o600)
		}
	}
}

var errCorrupted = errors.New("corrupted cache entry removed")

// source records what a URL served when it was last downloaded.
type source struct {
	URL         string `json:"url"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Digests
}

func (c Cache) sourcePath(u string) string {
	return filepath.Join(c.Dir, "sources", urlKey(u)+".json")
}

func (c Cache) readSource(u string) (source, bool) {
	data, err := os.ReadFile(c.sourcePath(u))
	if err != nil {
		return source{}, false
	}
	var s source
	if json.Unmarshal(data, &s) != nil || s.URL != u {
		return source{}, false
	}
	return s, true
}

func (c Cache) writeSource(s source) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFile(c.sourcePath(s.URL), append(data, '\n'), 0o644)
}

// commitFile moves a verified temporary file into the cache. Renaming over
// an existing blob is harmless: same name, same bytes.
func (c Cache) commitFile(tmp string, d Digests) (string, error) {
	dst := c.BlobPath(d.SHA256)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("add to cache: %w", err)
	}
	// Just verified: the next run need not hash it again.
	c.remember(dst, d)
	return dst, nil
}

// urlLock serialises downloads of one URL across processes sharing the
// cache. It is a separate file from the partial because the partial is
// renamed into the cache, and a lock on a renamed inode would protect the
// blob instead.
type urlLock struct{ f *os.File }

func (c Cache) lockURL(ctx context.Context, u string) (*urlLock, error) {
	if err := os.MkdirAll(c.tmpDir(), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.tmpDir(), urlKey(u)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// Poll instead of blocking so a cancelled ctx (Ctrl-C) still ends the wait.
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &urlLock{f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock cache entry: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *urlLock) release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// partial is a download in progress, kept across runs so it can resume. It
// hashes as it goes; bytes already there from an earlier run are hashed
// when it is opened.
type partial struct {
	f       *os.File
	h       *hasher
	resumed int64 // bytes found from an earlier run
}

// openPartial must be called with the URL's lock held.
func (c Cache) openPartial(u string) (*partial, error) {
	if err := os.MkdirAll(c.tmpDir(), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.tmpDir(), urlKey(u)+".partial"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	h := newHasher()
	if _, err := io.CopyBuffer(h, f, make([]byte, copyBufSize)); err != nil {
		f.Close()
		return nil, fmt.Errorf("read partial download: %w", err)
	}
	return &partial{f: f, h: h, resumed: h.n}, nil
}

func (p *partial) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.h.Write(b[:n])
	return n, err
}

func (p *partial) Len() int64 { return p.h.n }

func (p *partial) Truncate() error {
	if err := p.f.Truncate(0); err != nil {
		return err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p.h = newHasher()
	return nil
}

// discard throws the bytes away: they are wrong, resuming from them would be too.
func (p *partial) discard() {
	name := p.f.Name()
	p.f.Close()
	os.Remove(name)
}

// close keeps the bytes for the next run to resume from.
func (p *partial) close() { p.f.Close() }

// commit moves the finished, verified download into the cache.
func (p *partial) commit(c Cache, d Digests) (string, error) {
	if err := p.f.Sync(); err != nil {
		p.f.Close()
		return "", err
	}
	if err := p.f.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(p.f.Name(), 0o644); err != nil {
		return "", err
	}
	return c.commitFile(p.f.Name(), d)
}
