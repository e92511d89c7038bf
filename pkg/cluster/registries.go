package cluster

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
)

// A registry that leaves the inventory's registries: leaves its hosts.toml
// (and its mirrors' CAs) in containerd's hosts directory, where containerd
// would go on reading them at every pull while config_path names the
// directory. The workers step removes them, as it removes the old loopback
// config: hardway's own files only, the hosts.toml files that begin with
// units.RenderedMark and the hardway-ca-*.pem beside them. Files someone
// else put there stay.

// readRegistryFilesCmd prints hardway's files under units.CertsDir, one
// absolute path a line; nothing when the directory is missing. One line:
// it rides along in the worker's read script (workerReadsScript).
var readRegistryFilesCmd = fmt.Sprintf(`cd %[1]s 2>/dev/null && for f in */hosts.toml */hardway-ca-*.pem; do [ -f "$f" ] || continue; `+
	`case "$f" in */hosts.toml) head -n 1 -- "$f" | grep -q %[2]s || continue;; esac; echo "%[3]s/$f"; done; true`,
	remote.Quote(units.CertsDir), remote.Quote("^"+units.RenderedMark), units.CertsDir)

// staleRegistryFiles are the paths in out (readRegistryFilesCmd's output)
// that m no longer lists, sorted.
func staleRegistryFiles(out []byte, m *units.Manifest) []string {
	var stale []string
	for _, l := range strings.Split(string(out), "\n") {
		// Only what the command can print: a name with a newline in it, or
		// anything else, is no path of hardway's.
		if !strings.HasPrefix(l, units.CertsDir+"/") || strings.Count(l[len(units.CertsDir)+1:], "/") != 1 {
			continue
		}
		if _, wanted := m.File(l); !wanted {
			stale = append(stale, l)
		}
	}
	slices.Sort(stale)
	return stale
}

// oldRegistriesAction plans the removal of the stale files, then of each
// of their directories that is left empty; nil when there are none.
// Reading is the plan; rm is the action. containerd needs no restart: it
// reads the directory at every pull.
func (c *Cluster) oldRegistriesAction(ctx context.Context, sh remote.Host, sn *snapshot, host string) (*plan.Action, error) {
	out, err := sn.read(ctx, sh, "registries", readRegistryFilesCmd)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", units.CertsDir, err)
	}
	m := c.manifest(host)
	if m == nil {
		return nil, nil
	}
	stale := staleRegistryFiles(out, m)
	if len(stale) == 0 {
		return nil, nil
	}
	var files, dirs []string
	for _, p := range stale {
		files = append(files, remote.Quote(p))
		if d := remote.Quote(path.Dir(p)); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	cmd := "rm -f -- " + strings.Join(files, " ") + "\nrmdir --ignore-fail-on-non-empty -- " + strings.Join(dirs, " ")
	return &plan.Action{Host: host, Kind: plan.Write,
		Desc: "remove " + strings.Join(stale, ", ") + " (no longer in registries:; containerd reads the directory at every pull, nothing restarts)",
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, cmd, nil)
			return err
		}}, nil
}
