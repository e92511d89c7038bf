package units

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/hardway/hardway/pkg/fsutil"
)

// WriteTree writes each host's rendered files under dir/<host>/<path on the
// host>, and dir/<host>.manifest listing every file the host gets, rendered
// or not. Files copied from the state directory (keys!) or the release
// cache are named in the manifest, never written: the tree is safe to read,
// diff and share.
func WriteTree(dir string, ms []Manifest) error {
	for _, m := range ms {
		for _, f := range m.Files {
			if f.Source != nil {
				continue
			}
			// Rendered files hold no secrets; 0644 locally whatever the host mode.
			p := filepath.Join(dir, m.Host, filepath.FromSlash(f.Path))
			if err := fsutil.WriteFile(p, f.Content, 0o644); err != nil {
				return err
			}
		}
		if err := fsutil.WriteFile(filepath.Join(dir, m.Host+".manifest"), m.Text(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Explain writes, per host and component, one line per flag and per
// config setting: the flag or setting and why it is there.
func Explain(w io.Writer, ms []Manifest) error {
	for _, m := range ms {
		if _, err := fmt.Fprintf(w, "# %s\n", m.Host); err != nil {
			return err
		}
		for _, c := range m.Components {
			if v := m.Versions[c]; v != "" {
				fmt.Fprintf(w, "## %s %s\n", c, v)
			} else {
				fmt.Fprintf(w, "## %s\n", c)
			}
			for _, f := range m.Flags[c] {
				if _, err := fmt.Fprintf(w, "%-70s %s\n", f.Arg(), f.Reason); err != nil {
					return err
				}
			}
			file := ""
			for _, s := range m.Settings[c] {
				if s.File != file {
					file = s.File
					fmt.Fprintf(w, "### %s\n", file)
				}
				if _, err := fmt.Fprintf(w, "%-70s %s\n", s.Text(), s.Reason); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
