package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// hierarchy is one mounted cgroup hierarchy and the cgroup this process is
// in there.
type hierarchy struct {
	key   string // sorted controllers ("cpu,cpuacct", "name=systemd"); "" for v2
	mount string // where it is mounted: /sys/fs/cgroup/cpu
	path  string // our cgroup in it, relative to the mount: /process_api/x
}

// controllerHierarchies are the hierarchies a controller host gets a cgroup
// of its own in: the ones systemd inside the container uses. The accounting
// of whoever runs the lab still applies, and every other hierarchy stays the
// caller's.
var controllerHierarchies = []string{"name=systemd", "memory", "pids", ""}

// cgroupDirs are the cgroups host `name` gets: a child, named name, of the
// cgroup this process is in, in each hierarchy (every one when all is set,
// else controllerHierarchies).
func cgroupDirs(name string, all bool) ([]string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	var out []string
	for _, h := range hierarchies(string(self), string(mi)) {
		if !all && !slices.Contains(controllerHierarchies, h.key) {
			continue
		}
		if exists(filepath.Join(h.mount, "cgroup.procs")) {
			out = append(out, filepath.Join(h.mount, h.path, name))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no usable cgroup hierarchy under /sys/fs/cgroup")
	}
	return out, nil
}

// hierarchies pairs the lines of /proc/self/cgroup with the mounts of
// /proc/self/mountinfo. A hierarchy that is not mounted (or mounted only
// below our cgroup) is left out.
func hierarchies(procCgroup, mountinfo string) []hierarchy {
	type mnt struct{ root, point string }
	mounts := map[string]mnt{}
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		var key string
		switch g[0] {
		case "cgroup2":
			key = ""
		case "cgroup":
			key = v1Key(g[2])
		default:
			continue
		}
		point := unescapeMount(f[4])
		// The first mount wins, unless a later one is the usual place.
		if old, seen := mounts[key]; seen && !(strings.HasPrefix(point, "/sys/fs/cgroup/") && !strings.HasPrefix(old.point, "/sys/fs/cgroup/")) {
			continue
		}
		mounts[key] = mnt{root: unescapeMount(f[3]), point: point}
	}
	var out []hierarchy
	for _, line := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		key := f[1]
		if key != "" {
			key = v1Key(f[1])
		}
		m, ok := mounts[key]
		if !ok {
			continue
		}
		rel := f[2]
		if m.root != "/" {
			if rel != m.root && !strings.HasPrefix(rel, m.root+"/") {
				continue // we are outside what is mounted
			}
			rel = strings.TrimPrefix(rel, m.root)
		}
		out = append(out, hierarchy{key: key, mount: m.point, path: "/" + strings.TrimPrefix(rel, "/")})
	}
	return out
}

// v1Key is the sorted controller list of a v1 hierarchy from its mount
// options ("rw,cpu,cpuacct", "rw,xattr,name=systemd") or from the second
// field of /proc/self/cgroup ("cpu,cpuacct").
func v1Key(opts string) string {
	var ctrls []string
	for _, o := range strings.Split(opts, ",") {
		switch {
		case o == "rw" || o == "ro" || o == "noprefix" || o == "xattr" || o == "clone_children" ||
			o == "cpuset_v2_mode" || o == "favordynmods" || o == "none":
		case strings.HasPrefix(o, "name="):
			ctrls = append(ctrls, o)
		case strings.Contains(o, "="): // release_agent=...
		case o != "":
			ctrls = append(ctrls, o)
		}
	}
	slices.Sort(ctrls)
	return strings.Join(ctrls, ",")
}

// inheritCpuset copies cpuset.cpus and cpuset.mems from the parent into a new
// v1 cpuset cgroup: they start empty there, and a cgroup with no CPUs takes no
// process (writing cgroup.procs fails with ENOSPC). A no-op anywhere else.
func inheritCpuset(dir string) error {
	parent := filepath.Dir(dir)
	if !exists(filepath.Join(parent, "cpuset.cpus")) || exists(filepath.Join(parent, "cgroup.controllers")) {
		return nil // not a v1 cpuset hierarchy (v2 inherits on its own)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, f), err)
		}
	}
	return nil
}

// removeCgroup removes a cgroup tree depth-first: systemd inside the
// container leaves its child cgroups behind, and so do containerd and
// kubelet on a worker (kubepods.slice and below). Their last processes may
// take a moment to be gone.
func removeCgroup(dir string) error {
	var last error
	for range 50 {
		var dirs []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if err != nil || len(dirs) == 0 {
			return nil
		}
		last = nil
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				last = err
			}
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, last)
}
