package backup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// StatePlan is what writing the backup's state directory would do.
type StatePlan struct {
	Write     []string // relative names missing locally
	Same      []string // already equal
	Conflicts []string // present locally with other content
}

// ConflictError names the local files that differ from the backup's; nil
// when there are none.
func (p *StatePlan) ConflictError(dir state.Dir) error {
	if len(p.Conflicts) == 0 {
		return nil
	}
	return usererr.New(fmt.Errorf("the state directory %s differs from the backup's in %d file(s): %s; nothing was written",
		dir, len(p.Conflicts), strings.Join(p.Conflicts, ", ")),
		"restore into an empty state directory (--state DIR), move these files away, or pass --force to replace them with the backup's")
}

// PlanState compares the backup's state files with dir; it only reads.
func (a *Archive) PlanState(dir state.Dir) (*StatePlan, error) {
	p := &StatePlan{}
	for _, f := range a.Manifest.Files {
		rel, ok := strings.CutPrefix(f.Name, StatePrefix)
		if !ok {
			continue
		}
		want, err := os.ReadFile(a.FilePath(f.Name))
		if err != nil {
			return nil, err
		}
		have, err := os.ReadFile(filepath.Join(string(dir), filepath.FromSlash(rel)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			p.Write = append(p.Write, rel)
		case err != nil:
			return nil, err
		case bytes.Equal(have, want):
			p.Same = append(p.Same, rel)
		default:
			p.Conflicts = append(p.Conflicts, rel)
		}
	}
	sort.Strings(p.Conflicts)
	return p, nil
}

// WriteState writes the backup's state files into dir (atomically, each
// with its recorded mode, directories 0700). A local file with other
// content is refused unless force: it may be newer than the backup (a
// rotated key), and losing it is the failure this package exists to
// prevent. It returns the names written.
func (a *Archive) WriteState(dir state.Dir, force bool) ([]string, error) {
	p, err := a.PlanState(dir)
	if err != nil {
		return nil, err
	}
	if err := p.ConflictError(dir); err != nil && !force {
		return nil, err
	}
	todo := append(append([]string{}, p.Write...), p.Conflicts...)
	sort.Strings(todo)
	modes := map[string]fs.FileMode{}
	for _, f := range a.Manifest.Files {
		modes[f.Name] = fs.FileMode(f.Mode).Perm()
	}
	for _, rel := range todo {
		b, err := os.ReadFile(a.FilePath(StatePrefix + rel))
		if err != nil {
			return nil, err
		}
		if err := fsutil.WriteFile(filepath.Join(string(dir), filepath.FromSlash(rel)), b, modes[StatePrefix+rel]); err != nil {
			return nil, err
		}
	}
	return todo, nil
}
