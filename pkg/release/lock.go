package release

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/platform"
	"github.com/hardway/hardway/pkg/usererr"
)

// LockFileName is the lock's name, next to the inventory.
const LockFileName = "hardway.lock"

const lockHeader = `# hardway.lock: the exact release binaries this cluster is built from.
# Written by 'hardway fetch' on first resolve; commit it. Every later run
# refuses bytes that differ from these digests. To move versions on purpose:
#   hardway fetch --update-lock
`

// Lock pins versions and the digests of every artifact, per architecture.
//
// A lock of one architecture names it in Arch, as every lock did before
// hosts could have their own: such a file reads, and is written, byte for
// byte as before. A lock of several names them in Arches instead. Either
// way each entry carries its own arch, and an entry is known by its name
// and arch together (kube-apiserver for amd64 and for arm64 are two).
type Lock struct {
	Kubernetes string      `yaml:"kubernetes" json:"kubernetes"`
	Etcd       string      `yaml:"etcd" json:"etcd"`
	Arch       string      `yaml:"arch,omitempty" json:"arch,omitempty"`
	Arches     []string    `yaml:"arches,omitempty" json:"arches,omitempty"`
	Artifacts  []LockEntry `yaml:"artifacts" json:"artifacts"`
}

// LockEntry is one artifact: a downloaded file, or a member extracted from
// a downloaded archive (Member set, URL the archive's).
type LockEntry struct {
	Name    string `yaml:"name" json:"name"`
	Version string `yaml:"version" json:"version"`
	Arch    string `yaml:"arch" json:"arch"`
	URL     string `yaml:"url" json:"url"`
	Member  string `yaml:"member,omitempty" json:"member,omitempty"`
	SHA256  string `yaml:"sha256" json:"sha256"`
	SHA512  string `yaml:"sha512" json:"sha512"`
}

// Entry returns the entry named name for arch.
func (l *Lock) Entry(arch, name string) (LockEntry, bool) {
	if l == nil {
		return LockEntry{}, false
	}
	for _, e := range l.Artifacts {
		if e.Name == name && e.Arch == arch {
			return e, true
		}
	}
	return LockEntry{}, false
}

// Named returns every entry named name, whatever its arch.
func (l *Lock) Named(name string) []LockEntry {
	if l == nil {
		return nil
	}
	var out []LockEntry
	for _, e := range l.Artifacts {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// setArches names the entries' architectures at the top: Arch when there
// is one (the format of every lock before per-host architectures), Arches
// when there are several.
func (l *Lock) setArches() {
	var arches []string
	for _, e := range l.Artifacts {
		if !slices.Contains(arches, e.Arch) {
			arches = append(arches, e.Arch)
		}
	}
	slices.Sort(arches)
	l.Arch, l.Arches = "", nil
	if len(arches) == 1 {
		l.Arch = arches[0]
	} else {
		l.Arches = arches
	}
}

// Marshal is the lock's file content: sorted, so the same set of artifacts
// always gives the same bytes and a diff shows only what moved.
func (l *Lock) Marshal() ([]byte, error) {
	c := *l
	c.Artifacts = append([]LockEntry{}, l.Artifacts...)
	// By arch, then name: one architecture's entries together (adding one
	// is one block in the diff), and a lock of one architecture sorted by
	// name as it always was.
	sort.Slice(c.Artifacts, func(i, j int) bool {
		a, b := c.Artifacts[i], c.Artifacts[j]
		if a.Arch != b.Arch {
			return a.Arch < b.Arch
		}
		return a.Name < b.Name
	})
	var buf bytes.Buffer
	buf.WriteString(lockHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("encode lock: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode lock: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseLock reads a lock's content; name is used in errors.
func ParseLock(name string, data []byte) (*Lock, error) {
	var l Lock
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil {
		return nil, usererr.Errorf("the lock is generated: restore it from version control, or delete it and run 'hardway fetch' to write a new one",
			"%s: %w", name, err)
	}
	if l.Arch != "" && len(l.Arches) > 0 {
		return nil, usererr.Errorf("the lock is generated: restore it from version control, or delete it and run 'hardway fetch' to write a new one",
			"%s: both arch and arches", name)
	}
	seen := map[string]bool{}
	for i, e := range l.Artifacts {
		if e.Arch == "" {
			// An entry without its own arch is for the lock's one arch.
			e.Arch = l.Arch
			l.Artifacts[i].Arch = l.Arch
		}
		key := e.Arch + "/" + e.Name
		bad := ""
		switch {
		case e.Name == "":
			bad = "no name"
		case e.Arch == "":
			bad = "no arch"
		case !platform.Supported(e.Arch):
			bad = fmt.Sprintf("%q is not a supported architecture", e.Arch)
		case seen[key]:
			bad = "listed twice"
		case !isHex(e.SHA256, 32):
			bad = "sha256 is not 64 hex digits"
		case !isHex(e.SHA512, 64):
			bad = "sha512 is not 128 hex digits"
		}
		if bad != "" {
			return nil, usererr.Errorf("the lock is generated: restore it from version control, or delete it and run 'hardway fetch' to write a new one",
				"%s: artifacts[%d] (%s): %s", name, i, e.Name, bad)
		}
		seen[key] = true
	}
	return &l, nil
}

// ReadLock reads the lock at path; a missing file is (nil, nil).
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lock: %w", err)
	}
	return ParseLock(path, data)
}

// WriteLock writes l to path atomically, leaving an identical file untouched.
func WriteLock(path string, l *Lock) (changed bool, err error) {
	data, err := l.Marshal()
	if err != nil {
		return false, err
	}
	if fsutil.SameContent(path, data) {
		return false, nil
	}
	if err := fsutil.WriteFile(path, data, 0o644); err != nil {
		return false, fmt.Errorf("write lock: %w", err)
	}
	return true, nil
}

func isHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// mismatchError is the refusal when bytes differ from what the lock pins:
// the attack the lock exists for, or a mirror that rebuilt a release.
func mismatchError(lockPath, name, url, kind, want, got string) error {
	return usererr.Errorf(
		"if the mirror is trusted and the change is intended, run 'hardway fetch --update-lock' and commit "+lockPath+
			"; otherwise the mirror serves different bytes than when the lock was written — do not use it",
		"%s: %s from %s does not match %s:\n  locked %s\n  got    %s", name, kind, url, lockPath, want, got)
}
