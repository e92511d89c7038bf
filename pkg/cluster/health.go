package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/units"
)

// healthPoll is how health waits poll: a probe is one request through the
// host's SSH connection, so a short first interval costs little and spares
// each (re)start's wait most of a second. It backs off only to 500ms: a
// wait ends at most that long after the component became healthy, and a
// cold up chains several (etcd, each apiserver, then its controllers).
var healthPoll = poll.Options{Interval: 200 * time.Millisecond, Max: 500 * time.Millisecond, Attempt: 5 * time.Second}

// componentHealthy polls a component's health endpoint through SSH.
func (c *Cluster) componentHealthy(ctx context.Context, h inventory.Host, comp string) error {
	return poll.Until(ctx, healthPoll, func(ctx context.Context) error { return c.healthProbe(ctx, h, comp) })
}

// probe GETs the component's health endpoint once, through the host's SSH
// connection. The apiserver's certificate is checked against the cluster
// CA's trust bundle; controller-manager and scheduler serve self-signed certificates they
// make at start, which no CA vouches for, so only their answer counts.
func (c *Cluster) probe(ctx context.Context, h inventory.Host, comp string) error {
	row, ok := units.Lookup(comp)
	if !ok || row.Health.Scheme != "https" {
		return fmt.Errorf("no HTTPS health endpoint for %s", comp)
	}
	ep := row.Health
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if comp == units.APIServer {
		pool, err := c.clusterTrust()
		if err != nil {
			return err
		}
		tlsCfg.RootCAs, tlsCfg.ServerName = pool, "127.0.0.1"
	} else {
		tlsCfg.InsecureSkipVerify = true // self-signed serving cert on loopback; see above
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return c.dialFrom(ctx, h.Name, addr) }}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL("127.0.0.1"), nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", ep.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// leaderElected polls until comp's leader-election Lease names a holder,
// asking h's apiserver. A controller-manager or scheduler answers /healthz
// before it has won its first election; an up that ended there left a
// cluster whose verify, run right after, found no Lease (a CI run did).
// Only a start waits for it: a running component's Lease exists already.
func (c *Cluster) leaderElected(ctx context.Context, h inventory.Host, comp string) error {
	cs, err := c.Kube(h)
	if err != nil {
		return err
	}
	return poll.Until(ctx, healthPoll, func(ctx context.Context) error {
		holder, err := kube.LeaseHolder(ctx, cs, comp)
		if err == nil && holder == "" {
			err = fmt.Errorf("lease kube-system/%s has no holder", comp)
		}
		return err
	})
}
