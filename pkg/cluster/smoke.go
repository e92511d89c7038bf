package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/smoke"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// Smoke runs `hardway smoke` (pkg/smoke) against the cluster: the API and
// etcd through the SSH connection of a control-plane host whose apiserver
// is ready (apiHost), the NodePorts asked from that host.
func (c *Cluster) Smoke(ctx context.Context, opt smoke.Options) (*verify.Report, error) {
	if len(c.Inv.Workers) == 0 {
		return nil, usererr.New(errors.New("the inventory has no workers: nothing runs pods"), "add hosts under workers: and run 'hardway up'")
	}
	cp := c.apiHost()
	// client-go's port-forward and exec dial the apiserver themselves
	// (they ignore rest.Config.Dial): a loopback listener carries their
	// connections through SSH instead, so no port has to be open to this
	// machine. It lives as long as the run.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(cp.IP(), strconv.Itoa(units.APIServerPort))
	var wg sync.WaitGroup
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stop(); ln.Close(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				up, err := c.dialFrom(lctx, cp.Name, target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { <-lctx.Done(); conn.Close(); up.Close() }()
				// Each direction ends with a half-close and both are
				// waited for: closing both at the first EOF would reset a
				// connection whose last bytes (an exec's output) are still
				// on their way.
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, conn); closeWrite(up); done <- struct{}{} }()
				go func() { io.Copy(conn, up); closeWrite(conn); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	_, cfg, err := kube.Client(c.opt.State.Kubeconfig("admin"), "https://"+ln.Addr().String(), nil)
	if err != nil {
		return nil, err
	}
	// The apiserver's certificate names the host's address; the
	// connection arrives through 127.0.0.1.
	cfg.TLSClientConfig.ServerName = cp.IP()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	env := smoke.Env{
		Kube: cs, Rest: cfg,
		EtcdGet: func(ctx context.Context, key string) ([]byte, error) {
			cli, err := c.etcd()
			if err != nil {
				return nil, err
			}
			defer cli.Close()
			return cli.Get(ctx, key)
		},
		DialFrom:   c.dialFrom,
		From:       cp.Name,
		Workers:    c.Inv.Workers,
		Provider:   c.Inv.Encryption.Provider,
		Domain:     c.Inv.Network.ClusterDomain,
		PauseImage: units.PauseImage(c.Inv),
		DNSCause: func(ctx context.Context, node string, err error) (string, string) {
			return c.DNSCause(ctx, node, err)
		},
	}
	return smoke.Run(ctx, env, opt), nil
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
