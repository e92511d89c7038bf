package initinv

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
)

// Target is one host of --hosts: [user@]host[:port].
type Target struct {
	Spec string // as given
	User string // "": the inventory-wide user
	Host string // an IP address or a DNS name
	Port int    // 0: the inventory-wide port
}

const targetHint = "write each host as [user@]address[:port], separated by commas, e.g. --hosts root@10.0.0.11,pi@10.0.0.13"

// ParseTargets reads the hosts of --hosts.
func ParseTargets(specs []string) ([]Target, error) {
	var out []Target
	seen := map[string]string{}
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		t := Target{Spec: spec}
		hp := spec
		if i := strings.LastIndex(hp, "@"); i >= 0 {
			t.User, hp = hp[:i], hp[i+1:]
			if t.User == "" || !inventory.ValidSSHUser(t.User) {
				return nil, usererr.WithCode(fmt.Errorf("--hosts %s: %q is not a user name the inventory accepts", spec, t.User), usererr.CodeUsage,
					"a POSIX user name: lower-case letters, digits, '_' and '-', starting with a letter or '_'")
			}
		}
		// A port only after a host that is not a bare IPv6 address:
		// 10.0.0.11:2222 and [fd00::11]:2222, but fd00::11 is a host.
		if h, p, err := net.SplitHostPort(hp); err == nil {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, usererr.WithCode(fmt.Errorf("--hosts %s: %q is not a TCP port", spec, p), usererr.CodeUsage, targetHint)
			}
			t.Host, t.Port = h, n
		} else {
			t.Host = strings.Trim(hp, "[]")
		}
		if a, err := netip.ParseAddr(t.Host); err == nil {
			if a.Zone() != "" {
				return nil, usererr.WithCode(fmt.Errorf("--hosts %s: an IPv6 zone names an interface of this machine only", spec), usererr.CodeUsage,
					"write a global or unique-local address")
			}
			t.Host = a.String()
		} else if t.Host == "" || strings.ContainsAny(t.Host, " \t/,@[]") {
			return nil, usererr.WithCode(fmt.Errorf("--hosts %s: no host", spec), usererr.CodeUsage, targetHint)
		}
		key := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
		if prev, dup := seen[key]; dup {
			return nil, usererr.WithCode(fmt.Errorf("--hosts names %s twice (%s and %s)", t.Host, prev, spec), usererr.CodeUsage, "list every host once")
		}
		seen[key] = spec
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, usererr.WithCode(fmt.Errorf("--hosts names no host"), usererr.CodeUsage, targetHint)
	}
	return out, nil
}

// SSHFlags are the SSH settings given on the command line; the zero
// value of each: not given.
type SSHFlags struct {
	Port           int // 0: not given
	IdentityFile   string
	KnownHostsFile string
	Bastion        string
}

// Connection is the inventory the hosts are reached with before their
// file exists: the SSH settings the file will have (the --like file's,
// then the flags'), at the path it will have, so that relative paths
// resolve as they will for 'hardway up'. Its hosts are the targets, in
// order, named by their spec, all in controlPlane: only their SSH matters.
//
// out is where the file goes ("" for standard output: the current
// directory); paths from the flags are relative to the current directory,
// and the --like file's to its own.
func Connection(targets []Target, flags SSHFlags, like *Like, out string) (*inventory.Inventory, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("current directory: %w", err)
	}
	path := filepath.Join(cwd, "inventory.yaml")
	if out != "" {
		if path, err = filepath.Abs(out); err != nil {
			return nil, fmt.Errorf("%s: %w", out, err)
		}
	}
	dir := filepath.Dir(path)
	s := inventory.SSH{User: inventory.DefaultSSHUser, Port: inventory.DefaultSSHPort}
	if like != nil {
		s = like.Inv.SSH
		s.IdentityFile = rebase(s.IdentityFile, like.Inv.Dir(), dir)
		s.KnownHostsFile = rebase(s.KnownHostsFile, like.Inv.Dir(), dir)
	}
	if flags.Port != 0 {
		if flags.Port < 1 || flags.Port > 65535 {
			return nil, usererr.WithCode(fmt.Errorf("--port %d is not a TCP port", flags.Port), usererr.CodeUsage, "")
		}
		s.Port = flags.Port
	}
	if flags.IdentityFile != "" {
		s.IdentityFile = rebase(flags.IdentityFile, cwd, dir)
	}
	if flags.KnownHostsFile != "" {
		s.KnownHostsFile = rebase(flags.KnownHostsFile, cwd, dir)
	}
	if flags.Bastion != "" {
		s.Bastion = flags.Bastion
	}
	users := make([]string, len(targets))
	for i, t := range targets {
		users[i] = t.User
		if users[i] == "" {
			users[i] = s.User
		}
	}
	s.User = majority(users)
	inv := &inventory.Inventory{SSH: s, Path: path}
	for i, t := range targets {
		h := inventory.Host{Name: t.Spec, Address: t.Host}
		var o inventory.SSH
		if users[i] != s.User {
			o.User = users[i]
		}
		if t.Port != 0 && t.Port != s.Port {
			o.Port = t.Port
		}
		if o != (inventory.SSH{}) {
			h.SSH = &o
		}
		inv.ControlPlane = append(inv.ControlPlane, h)
	}
	return inv, nil
}

// majority is the most common of ss; on a tie the one that comes first.
func majority(ss []string) string {
	n := map[string]int{}
	for _, s := range ss {
		n[s]++
	}
	best := ""
	for _, s := range ss {
		if n[s] > n[best] {
			best = s
		}
	}
	return best
}

// rebase makes a path written relative to from relative to to (where the
// new file is): a path outside to's tree becomes absolute, "~/" and
// absolute paths stay as they are.
func rebase(p, from, to string) string {
	if p == "" || strings.HasPrefix(p, "~/") || filepath.IsAbs(p) || from == to {
		return p
	}
	abs := filepath.Join(from, p)
	rel, err := filepath.Rel(to, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return abs
	}
	return rel
}
