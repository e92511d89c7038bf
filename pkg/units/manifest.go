package units

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/state"
)

// SourceKind says where a file that is not rendered comes from.
type SourceKind string

const (
	SourceCert             SourceKind = "cert"              // state.Dir.Cert(Name)
	SourceKey              SourceKind = "key"               // state.Dir.Key(Name)
	SourcePublicKey        SourceKind = "public-key"        // <state>/pki/<Name>.pub (service-account)
	SourceKubeconfig       SourceKind = "kubeconfig"        // state.Dir.Kubeconfig(Name)
	SourceEncryptionConfig SourceKind = "encryption-config" // state.Dir.EncryptionConfig()
	SourceBinary           SourceKind = "binary"            // a release binary by name, for the manifest's Arch; pkg/release knows where it is cached
)

// Source names a local file to copy to the host.
type Source struct {
	Kind SourceKind
	Name string // PKI table name, kubeconfig name or binary name; "" for the encryption config
	// Optional: copied only when the state directory has it (see
	// Copy.Optional); a missing one is no error and nothing to push.
	Optional bool
}

// LocalPath is the file in the state directory, or "" for a binary (whose
// cache path belongs to pkg/release: render stays independent of it).
func (s Source) LocalPath(d state.Dir) string {
	switch s.Kind {
	case SourceCert:
		return d.Cert(s.Name)
	case SourceKey:
		return d.Key(s.Name)
	case SourcePublicKey:
		return filepath.Join(d.PKIDir(), s.Name+".pub")
	case SourceKubeconfig:
		return d.Kubeconfig(s.Name)
	case SourceEncryptionConfig:
		return d.EncryptionConfig()
	}
	return ""
}

func (s Source) String() string {
	if s.Name == "" {
		return string(s.Kind)
	}
	return string(s.Kind) + " " + s.Name
}

// File is one file a host needs: rendered (Content) or copied (Source).
type File struct {
	Path  string // absolute path on the host
	Mode  fs.FileMode
	Owner string // user:group
	// Components are the services to restart when the file changes (sorted
	// in start order; empty: nothing restarts, e.g. etcdctl).
	Components []string
	Content    []byte  // rendered content; nil when Source is set
	Source     *Source // local file to copy; nil when rendered
	// Apply is a command the host runs right after writing the file, in
	// the same script (systemd-sysusers for a sysusers.d file); "": none.
	Apply string
}

// Dir is a directory a host needs before its files are written.
type Dir struct {
	Path  string
	Mode  fs.FileMode
	Owner string
}

// Manifest is everything one control-plane host needs, sorted by path.
type Manifest struct {
	Host string
	Role Role // ControlPlane or Worker
	// Arch is the host's architecture (amd64, arm64): its SourceBinary
	// files are the release set's artifacts for it, and no others.
	Arch string
	// Components are the services the host runs, in start order: what
	// 'hardway up' starts and verify checks there.
	Components []string
	Dirs       []Dir
	Files      []File
	// Flags are each component's command-line flags with the reason for
	// each, as rendered into its unit (for --explain).
	Flags map[string][]Flag
	// Settings are the keys of each component's rendered config files
	// (and the pod routes) with the reason for each, for --explain.
	Settings map[string][]Setting
	// Versions are the versions the flags were chosen for, per component.
	Versions map[string]string
}

// File returns the file at path on the host, if the manifest has one.
func (m *Manifest) File(path string) (File, bool) {
	i := slices.IndexFunc(m.Files, func(f File) bool { return f.Path == path })
	if i < 0 {
		return File{}, false
	}
	return m.Files[i], true
}

// Restarts returns the services to restart, in start order, after the given
// files changed on the host.
func Restarts(changed []File) []string {
	var out []string
	for _, c := range Components() {
		for _, f := range changed {
			if slices.Contains(f.Components, c.Name) {
				out = append(out, c.Name)
				break
			}
		}
	}
	return out
}

// Text is the manifest as a human-readable listing: one line per directory
// and file with mode, owner, restarted services and origin.
func (m *Manifest) Text() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# Files hardway pushes to %s (linux/%s). \"rendered\" files are in this tree;\n", m.Host, m.Arch)
	b.WriteString("# the others are copied from the state directory or the release cache.\n")
	for _, d := range m.Dirs {
		fmt.Fprintf(&b, "%s/ %04o %s\n", d.Path, d.Mode.Perm(), d.Owner)
	}
	for _, f := range m.Files {
		origin := "rendered"
		if f.Source != nil {
			origin = f.Source.String()
		}
		restart := "-"
		if len(f.Components) > 0 {
			restart = strings.Join(f.Components, ",")
		}
		apply := ""
		if f.Apply != "" {
			apply = " then=" + strings.ReplaceAll(f.Apply, " ", "_")
		}
		fmt.Fprintf(&b, "%s %04o %s restart=%s from=%s%s\n", f.Path, f.Mode.Perm(), f.Owner, restart, origin, apply)
	}
	return []byte(b.String())
}
