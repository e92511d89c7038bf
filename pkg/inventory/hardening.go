package inventory

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
)

// validateTransport refuses plain-http mirrors and image URLs unless
// releases.allowHTTP says so. hardway verifies every download against a
// checksum, but on a first fetch the checksum comes from the same server:
// over plain http whoever sits on the path serves both, and the check
// protects nothing. file:// (a local or mounted mirror, the lab's) and
// https:// are fine.
func (l *loader) validateTransport(inv *Inventory) {
	r := inv.Releases
	type field struct{ path, url string }
	fields := []field{
		{"releases.kubernetes", r.Kubernetes}, {"releases.etcd", r.Etcd},
		{"releases.containerd", r.Containerd}, {"releases.runc", r.Runc},
		{"releases.cniPlugins", r.CNIPlugins}, {"releases.crictl", r.Crictl},
		{"releases.traefik", r.Traefik},
	}
	for i, im := range inv.Images {
		fields = append(fields, field{fmt.Sprintf("images[%d].url", i), im.URL})
	}
	for _, f := range fields {
		u, err := url.Parse(f.url)
		if err != nil || u.Scheme != "http" {
			continue
		}
		if r.AllowHTTP {
			l.warnf(f.path, "serve the mirror over https (or mount it and use file://)",
				"%s is plain http (allowed by releases.allowHTTP): anyone on the path can replace a download and its checksum together", f.url)
			continue
		}
		l.errorf(f.path, "serve the mirror over https, or mount it and use file://; releases.allowHTTP: true accepts plain http on purpose",
			"%s is plain http: the checksum comes from the same server, so it protects nothing on a first fetch", f.url)
	}
}

// sshUser is a conservative POSIX user name (what useradd accepts by
// default, without a trailing $): it is printed into commands and hints,
// and passed to ssh, so nothing in it may mean something to a shell.
var sshUser = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// ValidSSHUser says whether user passes the rule of ssh.user ("" is the
// default): 'hardway init --hosts' checks a user@ with it before it
// connects, as the loader checks the file it writes.
func ValidSSHUser(user string) bool { return user == "" || sshUser.MatchString(user) }

// validateSSHUser refuses a user name outside sshUser, in ssh.user, a
// host's ssh.user and the user part of a bastion.
func (l *loader) validateSSHUser(path, user string) {
	if ValidSSHUser(user) {
		return
	}
	l.errorf(path, "a POSIX user name: lower-case letters, digits, '_' and '-', starting with a letter or '_', at most 32",
		"%q is not a safe user name", user)
}

// hasZone reports whether an address carries an IPv6 zone (fe80::1%eth0):
// a zone names an interface of one machine, means nothing to the other
// hosts, certificates or etcd's peer URLs, and its '%' breaks URLs.
func hasZone(a string) bool {
	ip, err := netip.ParseAddr(a)
	return err == nil && ip.Zone() != ""
}
