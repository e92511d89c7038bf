package inventory

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// DockerHub is the name images of Docker Hub carry ("nginx" is
// docker.io/library/nginx): the name a registries: entry for it must use.
const DockerHub = "docker.io"

// dockerHubAliases are names that look like Docker Hub's but never match an
// image: index.docker.io is normalised to docker.io before containerd looks
// for a hosts directory, and registry-1.docker.io is Docker Hub's endpoint,
// not a name images carry.
var dockerHubAliases = map[string]bool{"index.docker.io": true, "registry-1.docker.io": true}

// validateRegistries checks registries: and reads each mirror's CA file.
// A mirror's certificate is verified unless insecureSkipVerify says
// otherwise, against ca: or the hosts' system roots.
func (l *loader) validateRegistries(inv *Inventory) {
	names := map[string]string{}
	for i := range inv.Registries {
		r := &inv.Registries[i]
		p := fmt.Sprintf("registries[%d]", i)
		if r.Name == "" {
			l.errorf(p+".name", "the registry as image names carry it, e.g. registry.k8s.io, or docker.io for Docker Hub", "a name is required")
		} else if ok := l.registryName(p+".name", r.Name); ok {
			if prev, dup := names[r.Name]; dup {
				l.errorf(p+".name", "list each registry once, with all its mirrors", "%q is already listed at %s", r.Name, prev)
			} else {
				names[r.Name] = p
			}
		}
		if len(r.Mirrors) == 0 {
			l.errorf(p+".mirrors", "list at least one mirror, e.g. '- url: https://mirror.example.internal:5000'", "a registry needs at least one mirror")
		}
		urls := map[string]string{}
		for j := range r.Mirrors {
			l.validateMirror(inv, fmt.Sprintf("%s.mirrors[%d]", p, j), &r.Mirrors[j], urls)
		}
	}
}

// registryName checks a registry's name: host[:port] as an image name
// carries it, which is also the name of its directory under certs.d.
func (l *loader) registryName(path, s string) bool {
	switch {
	case strings.Contains(s, "://"):
		l.errorf(path, "write the registry as image names carry it, without a scheme, e.g. registry.k8s.io; the mirrors' url: have one",
			"%q is a URL, not a registry name", s)
		return false
	case strings.Contains(s, "/"):
		l.errorf(path, "write only the host[:port] part of the image names, e.g. docker.io, not docker.io/library",
			"%q is not a registry name (it has a path)", s)
		return false
	case dockerHubAliases[s]:
		l.errorf(path, "images of Docker Hub are named docker.io/…; write docker.io", "%q never matches an image name", s)
		return false
	}
	if _, _, ok := hostPort(s); !ok {
		l.errorf(path, "write host or host:port in lower case, e.g. registry.k8s.io or 10.240.16.1:5000", "%q is not a registry name", s)
		return false
	}
	return true
}

// hostPort splits a host[:port] whose host is a lower-case DNS name or an
// IP address (IPv6 in brackets) and whose port, if any, is a TCP port.
func hostPort(s string) (host string, port int, ok bool) {
	host, p := s, ""
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.HasSuffix(s, "]") {
		host, p = s[:i], s[i+1:]
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || p != strconv.Itoa(n) {
			return "", 0, false
		}
		port = n
	}
	if b, found := strings.CutPrefix(host, "["); found {
		a, err := netip.ParseAddr(strings.TrimSuffix(b, "]"))
		return host, port, strings.HasSuffix(b, "]") && err == nil && a.Is6() && a.Zone() == ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return host, port, a.Is4()
	}
	return host, port, isDNS1123Subdomain(host)
}

// validateMirror checks one mirror's URL and TLS settings and reads its CA.
func (l *loader) validateMirror(inv *Inventory, p string, m *Mirror, seen map[string]string) {
	if m.URL == "" {
		l.errorf(p+".url", "the mirror's http:// or https:// URL, e.g. https://mirror.example.internal:5000", "a URL is required")
		return
	}
	u, err := url.Parse(m.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		l.errorf(p+".url", "write http(s)://host[:port], e.g. https://mirror.example.internal:5000", "%q is not a mirror URL", m.URL)
		return
	case u.User != nil:
		l.errorf(p+".url", "hardway writes no registry credentials; use a mirror that serves pulls without them",
			"%q has a user name or password in it", m.URL)
		return
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		// containerd appends /v2 to a path; a mirror serving under a
		// path needs override_path, which hardway does not write.
		l.errorf(p+".url", "write only scheme, host and port: containerd adds /v2/ itself", "%q has a path, query or fragment", m.URL)
		return
	}
	if _, _, ok := hostPort(u.Host); !ok {
		l.errorf(p+".url", "write a lower-case host name or an IP address, and a port from 1 to 65535", "%q has no valid host[:port]", m.URL)
		return
	}
	m.URL = u.Scheme + "://" + u.Host // the key of its [host] table: one spelling
	if prev, dup := seen[m.URL]; dup {
		l.errorf(p+".url", "list each mirror once", "%s is already listed at %s", m.URL, prev)
	}
	seen[m.URL] = p
	if u.Scheme == "http" {
		if m.InsecureSkipVerify || m.CA != "" {
			l.errorf(p+".url", "use https:// for a mirror with ca: or insecureSkipVerify, or drop them: plain http has no certificate",
				"%s is plain http: ca and insecureSkipVerify mean nothing there", m.URL)
		} else {
			l.warnf(p+".url", "fine on a network you trust (the lab, a homelab's LAN); else serve the mirror over https",
				"%s is plain http: anyone on the path between the workers and the mirror can serve other images", m.URL)
		}
		return
	}
	if m.InsecureSkipVerify && m.CA != "" {
		l.errorf(p+".insecureSkipVerify", "keep ca: (the certificate is then verified against it) and drop insecureSkipVerify",
			"ca and insecureSkipVerify contradict each other")
		return
	}
	if m.InsecureSkipVerify {
		l.warnf(p+".insecureSkipVerify", "give the CA that signed the mirror's certificate with ca: instead",
			"%s's certificate is not verified: anyone on the path can pose as the mirror", m.URL)
	}
	if m.CA != "" {
		l.readCA(inv, p+".ca", m)
	}
}

// readCA reads a mirror's CA file (relative to the inventory) and checks
// that it holds a certificate: a wrong path is found here, at its line,
// and not as a TLS error in a pod's events on the first pull.
func (l *loader) readCA(inv *Inventory, p string, m *Mirror) {
	path := inv.Resolve(m.CA)
	data, err := os.ReadFile(path)
	if err != nil {
		l.errorf(p, "the path of a PEM file, relative to the inventory file", "%v", err)
		return
	}
	certs := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			l.errorf(p, "the CA's certificate in PEM (-----BEGIN CERTIFICATE-----)", "%s: %v", path, err)
			return
		}
		certs++
	}
	if certs == 0 {
		l.errorf(p, "the CA's certificate in PEM (-----BEGIN CERTIFICATE-----)", "%s holds no PEM certificate", path)
		return
	}
	m.CAData = data
}
