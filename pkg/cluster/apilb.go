package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/apilb"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/verify"
)

// The workers' node-local apiserver load balancer (network.apiServerLoadBalancer:
// node-local): up waits for it before the kubelet starts, verify asks it
// what it sees. Everything goes through the worker's SSH connection to its
// loopback: the load balancer listens nowhere else.

// APIServerLB is the load balancer's component (and unit) name.
const APIServerLB = units.APIServerLB

// getThrough GETs url from the host's own side (a tunnel through its SSH
// connection), with tlsCfg for https: the load balancer's API and the
// kubelet's, which answer on the host.
func (c *Cluster) getThrough(ctx context.Context, worker, url string, tlsCfg *tls.Config) (int, []byte, error) {
	tr := &http.Transport{TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return c.dialFrom(ctx, worker, addr) }}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// lbBackends are the apiservers the worker's load balancer has, with their
// health as its last check saw it.
func (c *Cluster) lbBackends(ctx context.Context, worker string) ([]apilb.Backend, error) {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(units.APIServerLBAPIPort)) + apilb.ServicesPath
	code, body, err := c.getThrough(ctx, worker, url, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", apilb.ServicesPath, code, strings.TrimSpace(string(body)))
	}
	return apilb.Backends(body, units.APIServerLBService)
}

// lbVersion asks the apiserver for /version through the worker's
// 127.0.0.1:6443 — the way its kubelet and kube-proxy reach it — with the
// kubelet's own client certificate, verifying the apiserver's against the
// cluster CA's trust bundle (127.0.0.1 is one of its names). Not /readyz: with one etcd
// member gone every apiserver's readyz fails its etcd checks, yet the
// workers have the API; the apiservers' readiness is the control-plane
// checks' to tell.
func (c *Cluster) lbVersion(ctx context.Context, worker string) error {
	pool, err := c.clusterTrust()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.opt.State.Cert("kubelet-"+worker), c.opt.State.Key("kubelet-"+worker))
	if err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}
	code, body, err := c.getThrough(ctx, worker, c.Inv.WorkerAPIServerURL()+"/version", tlsCfg)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/version: %d %s", code, strings.TrimSpace(string(body)))
	}
	return nil
}

// lbReady is up's wait after the load balancer (re)started: it answers and
// at least one apiserver passed its health check, so the kubelet's first
// connection finds one.
func (c *Cluster) lbReady(ctx context.Context, worker string) error {
	return poll.Until(ctx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error {
		bs, err := c.lbBackends(ctx, worker)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.Status == apilb.Up {
				return nil
			}
		}
		return fmt.Errorf("no apiserver is reachable from %s: %s", worker, c.describeBackends(bs))
	})
}

// backendName is the control-plane host behind a backend address.
func (c *Cluster) backendName(addr string) string {
	for _, h := range c.Inv.ControlPlane {
		if net.JoinHostPort(h.IP(), strconv.Itoa(inventory.DefaultAPIServerPort)) == addr {
			return h.Name
		}
	}
	return "?"
}

func (c *Cluster) describeBackends(bs []apilb.Backend) string {
	var parts []string
	for _, b := range bs {
		st := b.Status
		if st == apilb.Unknown {
			st = "not checked yet"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", c.backendName(b.Address), b.Address, st))
	}
	return strings.Join(parts, ", ")
}

// checkAPIServerLB is verify's view of one worker's load balancer: the API
// answers through it, and it has every control-plane host as a backend, each
// passing its health check.
func (c *Cluster) checkAPIServerLB(ctx context.Context, w inventory.Host, lbActive bool) []verify.Result {
	res := func(check string, r verify.Result) verify.Result { r.Check = check; r.Host = w.Name; return r }
	journal := fmt.Sprintf("see 'journalctl -u %s' on %s", APIServerLB, w.Name)
	if !lbActive {
		hint := fmt.Sprintf("'hardway up' starts %s; %s", APIServerLB, journal)
		return []verify.Result{
			res("worker/lb-endpoint", verify.Failf(w.Name, hint, "%s is not active: the kubelet and kube-proxy have no API", APIServerLB)),
		}
	}
	var out []verify.Result
	if err := c.lbVersion(ctx, w.Name); err != nil {
		out = append(out, res("worker/lb-endpoint", verify.Failf(w.Name, "see worker/lb-backends; "+journal,
			"the API does not answer through %s: %v", inventory.NodeLocalLBAddress, err)))
	} else {
		out = append(out, res("worker/lb-endpoint", verify.OKf(w.Name, "the API answers through %s (the node-local load balancer) with the kubelet's certificate", inventory.NodeLocalLBAddress)))
	}
	bs, err := c.lbBackends(ctx, w.Name)
	if err != nil {
		return append(out, res("worker/lb-backends", verify.Failf(w.Name, journal, "cannot read the load balancer's backends: %v", err)))
	}
	return append(out, res("worker/lb-backends", c.lbVerdict(w.Name, bs)))
}

// lbVerdict judges the backends one worker's load balancer lists: every
// control-plane host and no other (else its config is stale), and how many
// pass the health check. One down is a warning — the API is still there,
// with less to spare — with the host named; none up fails.
func (c *Cluster) lbVerdict(worker string, bs []apilb.Backend) verify.Result {
	missing, extra := apilb.Diff(bs, c.Inv.APIServerBackends())
	if len(missing) > 0 || len(extra) > 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, "lacks "+strings.Join(missing, ", "))
		}
		if len(extra) > 0 {
			why = append(why, "has "+strings.Join(extra, ", ")+", which is not a control-plane host")
		}
		return verify.Failf(worker, "'hardway up' renders the backends from controlPlane and restarts the load balancer",
			"the load balancer's backends are not the control-plane hosts: it %s", strings.Join(why, " and "))
	}
	var down, unchecked []string
	up := 0
	for _, b := range bs {
		switch b.Status {
		case apilb.Up:
			up++
		case apilb.Unknown:
			unchecked = append(unchecked, c.backendName(b.Address)+" "+b.Address)
		default:
			down = append(down, c.backendName(b.Address)+" "+b.Address)
		}
	}
	list := c.describeBackends(bs)
	switch {
	case up == 0 && len(down) > 0:
		return verify.Failf(worker, fmt.Sprintf("%s reaches no apiserver on port %d: check the control-plane checks, and the network and firewall between %s and the control-plane hosts",
			worker, units.APIServerPort, worker), "no backend passes the health check: %s", list)
	case len(down) > 0:
		hosts := make([]string, len(down))
		for i, d := range down {
			hosts[i], _, _ = strings.Cut(d, " ")
		}
		return verify.Warnf(worker, fmt.Sprintf("the apiserver on %s does not accept connections from %s: see the control-plane checks for it ('systemctl status kube-apiserver' there) and the network between them; meanwhile %s uses the others",
			strings.Join(hosts, ", "), worker, worker), "%d of %d backends down: %s", len(down), len(bs), list)
	case len(unchecked) > 0:
		return verify.Warnf(worker, "the load balancer has just started; run verify again in a few seconds",
			"backends not health-checked yet: %s", list)
	}
	return verify.OKf(worker, "%d backends, all passing the health check: %s", len(bs), list)
}

// lbAround keeps the workers' load balancers away from an apiserver while
// it restarts: before, every worker's pool is rewritten without it and up
// waits until each Traefik has dropped it; after, the whole pool is put
// back. A restarting apiserver fails /readyz and then refuses connections
// while Traefik's TCP health check, every 2 s, still counts it; without
// this, a client that connects then gets a failure from the LB.
//
// The pool file is the manifest's own file when whole, so push finds it
// equal; a run that dies between the two leaves the smaller pool, which
// verify names and the next up's push replaces. An unreachable worker is
// skipped: it has no clients to keep.
func (c *Cluster) lbPool(ctx context.Context, out ...string) error {
	if !c.Inv.NodeLocalLB() {
		return nil
	}
	data, err := units.APIServerLBConfigWithout(c.Inv, out...)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, h := range c.Inv.ControlPlane {
		if !slices.Contains(out, h.Name) {
			want[net.JoinHostPort(h.IP(), strconv.Itoa(units.APIServerPort))] = true
		}
	}
	f := remote.File{Path: units.APIServerLBConfig, Mode: units.ModeConfig, Owner: "root", Group: "root", Data: data}
	if err := f.Prepare(); err != nil {
		return err
	}
	return remote.ForEach(ctx, c.Inv.Workers, hostsAtOnce, func(ctx context.Context, w inventory.Host) error {
		sh, err := c.Host(ctx, w.Name)
		if err != nil {
			c.logf("[control-plane] %s: not reachable, its load balancer is left as it is (%v)", w.Name, err)
			return nil
		}
		if err := remote.Put(ctx, sh, f, remote.PutOptions{Cache: sumsCache}); err != nil {
			return fmt.Errorf("%s: the load balancer's pool: %w", w.Name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = poll.Until(wctx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error {
			bs, err := c.lbBackends(ctx, w.Name)
			if err != nil {
				return err
			}
			got := map[string]bool{}
			for _, b := range bs {
				got[b.Address] = true
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("its pool is %s, not yet %s", strings.Join(slices.Sorted(maps.Keys(got)), ", "), strings.Join(slices.Sorted(maps.Keys(want)), ", "))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: the load balancer did not take its new pool within 30 s: %w", w.Name, err)
		}
		return nil
	})
}
