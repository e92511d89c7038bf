package units

import (
	"path"
	"slices"
	"strings"
)

// Footprint is everything hardway may have put on one host: what 'hardway
// reset' takes away. It is the host's manifest and, beyond it, every row of
// the component table that the host's role runs, enabled or not, with every
// file of the row whatever the inventory says now: a unit, binary or config
// an earlier inventory wanted (the node-local load balancer since turned
// off, the bridge plugins of a cluster now on network.cni: none, the admin
// kubeconfig of pki.adminKubeconfigOnHosts) is hardway's all the same.
type Footprint struct {
	Host string
	Role Role
	// Units are the systemd units ("etcd.service") in reverse start
	// order: the order to stop them in.
	Units []string
	// Files are the files' paths, sorted: units, binaries, copied and
	// rendered files. None is under a State path.
	Files []string
	// State are the rows' State paths and HardwayDataDir, sorted: each is
	// removed with everything in it.
	State []string
	// Dirs are the directories hardway makes and the ones its paths sit
	// in below the system's own (/etc/kubernetes, /opt/cni; never /etc,
	// /opt, /var/lib, ...), deepest first: each is removed only when
	// nothing is left in it. None is under a State path.
	Dirs []string
}

// systemDirs are directories of the system itself: never part of a
// footprint, even when hardway's paths are all that is in them.
var systemDirs = []string{"/", "/etc", "/opt", "/run", "/usr", "/usr/local", "/var", "/var/lib", "/var/log"}

// HostFootprint is the footprint of m's host. extra are files hardway wrote
// there that m no longer lists (a hosts.toml of a registry since removed
// from the inventory), found on the host by the caller.
func HostFootprint(m *Manifest, extra ...string) Footprint {
	fp := Footprint{Host: m.Host, Role: m.Role}
	files := map[string]bool{}
	dirs := map[string]bool{}
	state := map[string]bool{HardwayDataDir: true}
	cs := Components()
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if !c.RunsOn(m.Role) {
			continue
		}
		fp.Units = append(fp.Units, c.Unit)
		files[UnitPath(c.Name)] = true
		for _, b := range c.Binaries {
			files[b.Path] = true
		}
		for _, f := range c.Files {
			files[f.Path] = true
		}
		for _, cf := range c.Configs {
			files[cf.Path] = true
		}
		for _, d := range c.Dirs {
			dirs[d.Path] = true
		}
		for _, s := range c.State {
			state[s] = true
		}
	}
	for _, f := range m.Files {
		files[f.Path] = true
	}
	for _, d := range m.Dirs {
		dirs[d.Path] = true
	}
	for _, p := range extra {
		files[p] = true
	}
	underState := func(p string) bool {
		for s := range state {
			if Under(p, s) {
				return true
			}
		}
		return false
	}
	// The directories a file sits in, up to the nearest of hardway's own
	// (a registry's directory under containerd's hosts directory).
	for f := range files {
		var between []string
		for d := path.Dir(f); !slices.Contains(systemDirs, d); d = path.Dir(d) {
			if dirs[d] {
				for _, b := range between {
					dirs[b] = true
				}
				break
			}
			between = append(between, d)
		}
	}
	// The directories hardway's directories and data sit in, below the
	// system's own.
	for _, p := range append(keys(dirs), keys(state)...) {
		for d := path.Dir(p); !slices.Contains(systemDirs, d); d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for f := range files {
		if !underState(f) {
			fp.Files = append(fp.Files, f)
		}
	}
	slices.Sort(fp.Files)
	fp.State = keys(state)
	slices.Sort(fp.State)
	for d := range dirs {
		if !underState(d) {
			fp.Dirs = append(fp.Dirs, d)
		}
	}
	slices.SortFunc(fp.Dirs, func(a, b string) int {
		if n := strings.Count(b, "/") - strings.Count(a, "/"); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	return fp
}

// Owns says whether p is one of the footprint's paths or inside one of
// its State paths.
func (fp Footprint) Owns(p string) bool {
	if slices.Contains(fp.Files, p) || slices.Contains(fp.Dirs, p) {
		return true
	}
	for _, s := range fp.State {
		if Under(p, s) {
			return true
		}
	}
	return false
}

// Under says whether p is dir or inside it.
func Under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
