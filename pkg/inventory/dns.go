package inventory

import (
	"net/netip"
	"strconv"
	"strings"
)

// DNS configures the cluster DNS (CoreDNS) that `up` applies when the
// inventory has workers.
type DNS struct {
	// Upstream are the resolvers CoreDNS forwards names outside the cluster
	// domain to (ip or ip:port). None (the lab): such names get SERVFAIL,
	// nothing leaves the cluster.
	Upstream []string `yaml:"upstream"`
	// Image overrides the CoreDNS image. Default: the CoreDNS image in
	// images: (imported on every worker), else the tested upstream one.
	Image string `yaml:"image"`
}

func (l *loader) validateDNS(inv *Inventory) {
	for i, u := range inv.DNS.Upstream {
		p := "dns.upstream[" + strconv.Itoa(i) + "]"
		if _, err := netip.ParseAddr(u); err == nil {
			continue
		}
		if ap, err := netip.ParseAddrPort(u); err == nil && ap.Port() != 0 {
			continue
		}
		l.errorf(p, "write a resolver's IP address, e.g. 10.240.0.1 or 10.240.0.1:53", "%q is not an IP address", u)
	}
	if im := inv.DNS.Image; im != "" && (strings.ContainsAny(im, " \t") || !hasExplicitTag(im) && !strings.Contains(im, "@")) {
		l.errorf("dns.image", "write a name with a tag, e.g. registry.k8s.io/coredns/coredns:v1.14.7", "%q is not an image name with a tag or digest", im)
	}
}
