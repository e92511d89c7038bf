package units

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/hashicorp/go-version"
	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/inventory"
)

// APIServerLB is the node-local apiserver load balancer on every worker
// (network.apiServerLoadBalancer: node-local): Traefik listening on
// 127.0.0.1:6443 and passing each TCP connection, TLS untouched, to a
// healthy kube-apiserver, so the kubelet and kube-proxy keep the API when
// any one control-plane host is gone.
const APIServerLB = "hardway-apiserver-lb"

// Ports and names of the load balancer.
const (
	// APIServerLBPort is the apiserver's own port: the workers' kubeconfigs
	// read https://127.0.0.1:6443, as a control-plane host's do.
	APIServerLBPort = APIServerPort
	// APIServerLBAPIPort serves Traefik's read-only API and /ping, on
	// loopback only: verify reads /api/tcp/services through SSH.
	APIServerLBAPIPort = 6444
	// APIServerLBService is the TCP service's name in the dynamic config;
	// Traefik's API calls it "<name>@file".
	APIServerLBService = "kube-apiserver"
	// APIServerLBConfig is the dynamic config (Traefik's file provider): the
	// router and the backends.
	APIServerLBConfig = HardwayEtcDir + "/apiserver-lb.yaml"
	// HardwayEtcDir holds configs of hardway's own services.
	HardwayEtcDir = "/etc/hardway"

	// The health check: a backend that does not accept a TCP connection
	// within the timeout leaves the pool at once and is tried again every
	// interval, so a lost control-plane host is out within 2–3 s.
	apiServerLBCheckInterval = "2s"
	apiServerLBCheckTimeout  = "1s"
	// apiServerLBDialTimeout bounds a connection to a backend that is gone
	// without a word (no RST, as from a powered-off host): Traefik's
	// default would keep a client waiting 30 s.
	apiServerLBDialTimeout = "3s"
)

func traefikVersion(inv *inventory.Inventory) *version.Version {
	v, err := version.NewVersion(inv.TraefikVersion)
	if err != nil {
		return nil
	}
	return v
}

func apiServerLBComponent() Component {
	return Component{
		Name: APIServerLB, Unit: APIServerLB + ".service", Role: Worker, Process: "traefik",
		Binaries: []Binary{{Name: "traefik", Path: BinPath("traefik")}},
		Ports: []Port{
			{Number: APIServerLBPort, Name: "apiserver", Loopback: true},
			{Number: APIServerLBAPIPort, Name: "api", Loopback: true},
		},
		Health:  Health{Scheme: "http", Port: APIServerLBAPIPort, Path: "/ping"},
		Configs: []Config{{Path: APIServerLBConfig, render: renderAPIServerLBConfig}},
		Dirs:    []Dir{{HardwayEtcDir, ModeDir, Owner}},
		// Traefik tells systemd READY=1 once its listeners are open, so
		// 'systemctl start' returns when the kubelet can connect.
		unit: unitData{Description: "Node-local load balancer in front of every kube-apiserver (Traefik, hardway)",
			Documentation: "https://doc.traefik.io/traefik/routing/services/#tcp-services",
			After:         []string{"network-online.target"}, Wants: []string{"network-online.target"}, Type: "notify"},
		version: traefikVersion, flags: apiServerLBFlags,
		enabled: func(r *renderer, _ inventory.Host) bool { return r.inv.NodeLocalLB() },
	}
}

// apiServerLBFlags are Traefik's static configuration, as flags: the two
// loopback entry points, the file provider, the API and ping, and nothing
// that reaches out.
func apiServerLBFlags(*inventory.Inventory, inventory.Host) []flagDef {
	return []flagDef{
		{"", "entryPoints.apiserver.address", hostPort("127.0.0.1", APIServerLBPort),
			"the kubelet and kube-proxy connect here (their kubeconfigs say https://127.0.0.1:6443); loopback only"},
		{"", "entryPoints.traefik.address", hostPort("127.0.0.1", APIServerLBAPIPort),
			"Traefik's API and /ping, on loopback only: verify reads the backends' status from /api/tcp/services"},
		{"", "api.insecure", "true", "serve the (read-only) API on the traefik entry point above, which only this host can reach"},
		{"", "api.dashboard", "false", "no web UI: the API is enough to list the backends"},
		{"", "ping", "true", "/ping on the traefik entry point: the health endpoint 'hardway up' waits for"},
		{"", "providers.file.filename", APIServerLBConfig, "the router and the apiserver backends, rendered by hardway (see below)"},
		{"", "providers.file.watch", "true", "the backends change without a restart (an apiserver leaves every worker's pool before 'hardway up' restarts it, and comes back once ready); hardway writes the file by rename, so Traefik never reads half of it"},
		{"", "global.checkNewVersion", "false", "no call home: hardway pins the version (traefikVersion)"},
		{"", "global.sendAnonymousUsage", "false", "no usage reports"},
		{"", "log.level", "WARN", "the journal gets each failed health check (\"Health check failed\", with the backend's address)"},
	}
}

// The dynamic configuration's shape: only what hardway writes, in the order
// a reader expects (router, service, transport).
type lbDynamic struct {
	TCP lbTCP `yaml:"tcp"`
}

type lbTCP struct {
	Routers           map[string]lbRouter    `yaml:"routers"`
	Services          map[string]lbService   `yaml:"services"`
	ServersTransports map[string]lbTransport `yaml:"serversTransports"`
}

type lbRouter struct {
	EntryPoints []string `yaml:"entryPoints"`
	Rule        string   `yaml:"rule"`
	Service     string   `yaml:"service"`
}

type lbService struct {
	LoadBalancer lbLoadBalancer `yaml:"loadBalancer"`
}

type lbLoadBalancer struct {
	Servers          []lbServer    `yaml:"servers"`
	HealthCheck      lbHealthCheck `yaml:"healthCheck"`
	ServersTransport string        `yaml:"serversTransport"`
}

type lbServer struct {
	Address string `yaml:"address"`
}

type lbHealthCheck struct {
	Interval string `yaml:"interval"`
	Timeout  string `yaml:"timeout"`
}

type lbTransport struct {
	DialTimeout string `yaml:"dialTimeout"`
}

// APIServerLBConfigWithout is the load balancer's dynamic config with the
// backends of the control-plane hosts named in out left out: what a worker
// runs while those apiservers restart, so that no new connection reaches
// one that is shutting down (its /readyz already fails, yet Traefik's TCP
// health check still finds the port open). Not a file of the manifest: a
// later push puts the whole one back.
func APIServerLBConfigWithout(inv *inventory.Inventory, out ...string) ([]byte, error) {
	sub := *inv
	sub.ControlPlane = nil
	for _, h := range inv.ControlPlane {
		if !slices.Contains(out, h.Name) {
			sub.ControlPlane = append(sub.ControlPlane, h)
		}
	}
	b, _, err := renderAPIServerLBConfig(&renderer{inv: &sub}, inventory.Host{})
	return b, err
}

func renderAPIServerLBConfig(r *renderer, _ inventory.Host) ([]byte, []Setting, error) {
	backends := r.inv.APIServerBackends()
	if len(backends) == 0 {
		return nil, nil, fmt.Errorf("%s: no control-plane host to balance over", APIServerLB)
	}
	var servers []lbServer
	for _, b := range backends {
		host, port, err := net.SplitHostPort(b)
		if err != nil || port != strconv.Itoa(APIServerPort) || net.ParseIP(host) == nil {
			return nil, nil, fmt.Errorf("%s: backend %q is not an IP:%d", APIServerLB, b, APIServerPort)
		}
		servers = append(servers, lbServer{Address: b})
	}
	const svc = APIServerLBService
	doc := lbDynamic{TCP: lbTCP{
		// HostSNI(`*`) on a router without tls: plain TCP, every connection,
		// bytes passed through untouched (TLS passthrough): the apiserver
		// terminates TLS and sees the kubelet's own client certificate.
		Routers: map[string]lbRouter{svc: {EntryPoints: []string{"apiserver"}, Rule: "HostSNI(`*`)", Service: svc}},
		Services: map[string]lbService{svc: {LoadBalancer: lbLoadBalancer{
			Servers:          servers,
			HealthCheck:      lbHealthCheck{Interval: apiServerLBCheckInterval, Timeout: apiServerLBCheckTimeout},
			ServersTransport: svc,
		}}},
		ServersTransports: map[string]lbTransport{svc: {DialTimeout: apiServerLBDialTimeout}},
	}}
	var b bytes.Buffer
	b.WriteString("# Rendered by hardway: the node-local apiserver load balancer (Traefik's file provider).\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	f := APIServerLBConfig
	p := "tcp.services." + svc + ".loadBalancer."
	settings := []Setting{
		{File: f, Key: "tcp.routers." + svc + ".rule", Value: "HostSNI(`*`)",
			Reason: "every TCP connection on 127.0.0.1:6443, passed through untouched: the apiserver terminates TLS and authenticates the client's certificate"},
		{File: f, Key: p + "servers", Value: backends,
			Reason: "every control-plane host's apiserver (controlPlane in the inventory), round robin over the healthy ones"},
		{File: f, Key: p + "healthCheck.interval", Value: apiServerLBCheckInterval,
			Reason: "each backend is tried this often; one that fails leaves the pool, and comes back once it answers again"},
		{File: f, Key: p + "healthCheck.timeout", Value: apiServerLBCheckTimeout,
			Reason: "a backend that does not accept a TCP connection this fast counts as down: a lost host is out within seconds"},
		{File: f, Key: "tcp.serversTransports." + svc + ".dialTimeout", Value: apiServerLBDialTimeout,
			Reason: "a connection to a host that is gone gives up after this, instead of Traefik's 30 s"},
	}
	return b.Bytes(), settings, nil
}
