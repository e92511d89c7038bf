package daemon

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/hardway/hardway/pkg/usererr"
)

// CheckListen refuses a --listen address that is not loopback unless
// allowRemote: /metrics names every host, certificate and etcd member, and
// has no authentication. An empty host (":9479") is every interface; a
// name other than localhost may resolve to anything, so both count as
// remote.
func CheckListen(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usererr.WithCode(fmt.Errorf("--listen %q: %w", addr, err), usererr.CodeUsage,
			"write host:port, e.g. "+DefaultListen)
	}
	if isLoopback(host) || allowRemote {
		return nil
	}
	return usererr.WithCode(fmt.Errorf("--listen %s is not a loopback address: /metrics names every host and certificate of the cluster, without authentication", addr),
		usererr.CodeUsage,
		"keep the default "+DefaultListen+" and scrape through a local Prometheus or an SSH tunnel; "+
			"--allow-remote-listen serves it beyond this machine on purpose (put a firewall or an authenticating proxy in front)")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" && a.Unmap().IsLoopback()
}
