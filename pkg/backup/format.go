// Package backup writes and reads hardway's backup file: one file holding
// everything a rebuild needs — an etcd snapshot taken from the leader, the
// whole state directory (CAs, keys, every encryption key ever used), the
// inventory and hardway.lock — encrypted with age unless asked otherwise.
//
// The file is age(gzip(tar)). The tar's first entry is a manifest naming
// every other entry with its size and sha256, so that Open can prove the
// whole file before anything uses it: age authenticates every 64 KiB chunk
// (a flipped byte, a truncation, a wrong passphrase all fail there), gzip
// has its CRC, each entry its sha256, and the snapshot etcd's own sha256
// trailer. `hardway backup`, `hardway restore` and the daemon's scheduled
// backups all go through Create and Open:
//
//	rs, err := backup.Keys{PassphraseFile: f}.EncryptTo()     // or Recipients: age1…
//	res, err := backup.Create(ctx, backup.Options{
//		Source: c, // a *cluster.Cluster: the leader's snapshot through SSH
//		Inventory: inv, State: st, Dir: dir, Keep: 7, Recipients: rs,
//	})                                                         // res.Path, .Size, .Duration, .Snapshot.SHA256
//	m, err := backup.Verify(res.Path, ids, "")                 // ids from Keys.DecryptWith
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"path"
	"strings"
	"time"
)

// FormatVersion is the manifest's format; Open refuses others.
const FormatVersion = 1

// The entries of the archive, in this order: the manifest, the snapshot,
// the inventory, hardway.lock (when there is one), then the state
// directory's files under StatePrefix.
const (
	ManifestName  = "hardway-backup.json"
	SnapshotName  = "etcd/snapshot.db"
	InventoryName = "inventory.yaml"
	LockName      = "hardway.lock"
	StatePrefix   = "state/"
)

// Manifest describes one backup; it is the archive's first entry.
type Manifest struct {
	Format         int          `json:"format"`
	Created        time.Time    `json:"created"`
	HardwayVersion string       `json:"hardwayVersion,omitempty"`
	Cluster        string       `json:"cluster"`
	ControlPlane   []string     `json:"controlPlane"`
	Snapshot       SnapshotInfo `json:"snapshot"`
	// Files are every entry after the manifest, in archive order.
	Files []File `json:"files"`
}

// SnapshotInfo is where the etcd snapshot came from and what it is.
type SnapshotInfo struct {
	Member      string `json:"member"` // the leader it was taken from
	Endpoint    string `json:"endpoint"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
	Revision    int64  `json:"revision,omitempty"`
	// Size and SHA256 are of the snapshot file as etcd sent it, its own
	// sha256 trailer included (`etcdutl snapshot restore` checks that).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// File is one entry of the archive.
type File struct {
	Name   string `json:"name"`
	Mode   uint32 `json:"mode"` // permission bits
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// validName accepts the relative, clean names Create writes and nothing
// that could escape the directory Open extracts into.
func validName(n string) error {
	switch {
	case n == "" || strings.HasPrefix(n, "/") || path.Clean(n) != n || n == "." || strings.HasPrefix(n, "../") || n == "..":
		return fmt.Errorf("entry %q: not a clean relative name", n)
	case strings.ContainsAny(n, "\\\x00"):
		return fmt.Errorf("entry %q: unexpected character", n)
	case n == SnapshotName || n == InventoryName || n == LockName:
		return nil
	case strings.HasPrefix(n, StatePrefix) && len(n) > len(StatePrefix):
		return nil
	}
	return fmt.Errorf("entry %q: not part of a hardway backup", n)
}

// etcd appends a sha256 of the database to every snapshot it streams;
// `etcdutl snapshot restore` recognises it by the size (a bbolt file is a
// whole number of 512-byte blocks, so the remainder is the digest's size).
const trailerSize = sha256.Size

// trailerCheck hashes everything written to it but the last 32 bytes, which
// it keeps: at the end the two must match. It proves the snapshot is what
// the member read from its database, without reading it twice.
type trailerCheck struct {
	h    hash.Hash
	tail []byte
	n    int64
}

func newTrailerCheck() *trailerCheck { return &trailerCheck{h: sha256.New()} }

func (t *trailerCheck) Write(p []byte) (int, error) {
	t.n += int64(len(p))
	t.tail = append(t.tail, p...)
	if over := len(t.tail) - trailerSize; over > 0 {
		t.h.Write(t.tail[:over])
		t.tail = append(t.tail[:0], t.tail[over:]...)
	}
	return len(p), nil
}

// ErrSnapshotHash is a snapshot whose sha256 trailer does not match it.
var ErrSnapshotHash = errors.New("etcd snapshot: its sha256 trailer does not match its content")

// verify says whether the bytes seen form a snapshot with a matching trailer.
func (t *trailerCheck) verify() error {
	if t.n <= trailerSize || (t.n%512) != trailerSize {
		return fmt.Errorf("%w (%d bytes: not a database followed by its sha256; truncated?)", ErrSnapshotHash, t.n)
	}
	if !bytes.Equal(t.h.Sum(nil), t.tail) {
		return ErrSnapshotHash
	}
	return nil
}

// hashWriter counts and hashes what passes through it.
type hashWriter struct {
	h hash.Hash
	n int64
}

func newHashWriter() *hashWriter { return &hashWriter{h: sha256.New()} }

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *hashWriter) sum() string { return hex.EncodeToString(w.h.Sum(nil)) }
