package units

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
)

// Worker components and the pod routes unit.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	KubeProxy  = "kube-proxy"
	// PodRoutes is hardway's own oneshot unit: a route to every other
	// worker's pod subnet, on every host, so they come back after a reboot;
	// on workers also the masquerade rule for pods' egress (see egressRule).
	PodRoutes = "hardway-pod-routes"
)

// Ports of the worker components.
const (
	KubeletPort          = 10250 // the kubelet API: logs, exec, port-forward (authenticated)
	KubeletHealthzPort   = 10248 // plain HTTP /healthz, loopback only
	KubeProxyHealthzPort = 10256 // plain HTTP /healthz
	KubeProxyMetricsPort = 10249 // loopback only
	KubeletReadOnlyPort  = 10255 // the unauthenticated read-only API: off (readOnlyPort: 0); verify checks it stays closed
)

const (
	// DefaultPauseImage is the pod sandbox image: containerd 2.4's own
	// default, pinned so the kubelet never garbage-collects it and an
	// air-gapped worker never tries to pull it.
	DefaultPauseImage = "registry.k8s.io/pause:3.10.2"
	// podRouteProto marks hardway's pod routes in the routing table
	// ('ip route show proto 70'), so stopping the unit removes exactly
	// them. 70 is not reserved in iproute2's rt_protos.
	podRouteProto = "70"
	// PodRouteProto is podRouteProto for verify, which names hardway's
	// routes that no worker wants any more.
	PodRouteProto = podRouteProto
	// ipCommand is iproute2's ip: /sbin/ip on Debian, Ubuntu, Fedora and
	// Arch alike (a link into /usr where /sbin is merged).
	ipCommand = "/sbin/ip"
	// iptablesCommand is iptables (ip6tables for an IPv6 pod network), like
	// ip under /sbin on every distribution hardway supports; kube-proxy's
	// iptables mode needs the same package.
	iptablesCommand  = "/sbin/iptables"
	ip6tablesCommand = "/sbin/ip6tables"
	// egressComment marks the pods' egress masquerade rule, so it can be
	// found ('iptables -t nat -S POSTROUTING') and removed exactly.
	egressComment = "hardway-pod-egress"
	// PodEgressComment is egressComment for 'hardway reset', which removes
	// the rule a stopped unit left.
	PodEgressComment = egressComment
)

// containerdVersion is the inventory's containerdVersion (defaulted by
// Load from the tested worker table).
func containerdVersion(inv *inventory.Inventory) *version.Version {
	v, err := version.NewVersion(inv.ContainerdVersion)
	if err != nil {
		return nil
	}
	return v
}

// containerdConfigV3 is what config version 3 (the CRI plugin split into
// io.containerd.cri.v1.images and .runtime) needs.
var containerdConfigV3 = version.MustConstraints(version.NewConstraint(">= 2.0.0"))

func workerComponents() []Component {
	bin := func(name string) Binary { return Binary{Name: name, Path: BinPath(name)} }
	tool := func(name, path string) Binary { return Binary{Name: name, Path: path, NoRestart: true} }
	cni := func(plugin string) Binary {
		return Binary{Name: "cni-" + plugin, Path: CNIBinDir + "/" + plugin, NoRestart: true}
	}
	return []Component{
		{
			Name: Containerd, Unit: Containerd + ".service", Role: Worker, Process: "containerd",
			Binaries: []Binary{
				bin(Containerd),
				// Each pod's shim and runc are started anew: a new binary is
				// used by the next pod without restarting containerd.
				tool("containerd-shim-runc-v2", BinPath("containerd-shim-runc-v2")),
				tool("ctr", BinPath("ctr")), tool("crictl", BinPath("crictl")),
				tool("runc", SbinDir+"/runc"),
				// containerd's CRI sets up every pod's loopback with this plugin,
				// whatever the CNI; the others only for hardway's bridge CNI (with
				// network.cni none, your CNI installs its own).
				cni("loopback"), bridgeOnly(cni("bridge")), bridgeOnly(cni("host-local")), bridgeOnly(cni("portmap")),
			},
			Configs: []Config{
				{Path: ContainerdConfig, render: renderContainerdConfig},
				// The kernel a node needs, at every boot (the unit applies them
				// before containerd starts, for the first boot): nothing restarts.
				{Path: ModulesLoadConf, NoRestart: true, render: renderModulesConf},
				{Path: SysctlConf, NoRestart: true, render: renderSysctlConf},
				{Path: CrictlConfig, NoRestart: true, render: renderCrictlConfig},
				// containerd watches the CNI directory: no restart. No
				// loopback config (the tutorial's 99-loopback.conf): the CRI
				// sets lo up with the loopback plugin itself, and containerd
				// would fall back to that config without the bridge one and
				// report the network ready with pods that have only lo.
				{Path: BridgeConflist, NoRestart: true, render: renderBridgeConflist},
			},
			moreConfigs: registryConfigs,
			Dirs:        []Dir{{ContainerdDir, ModeDir, Owner}, {CNIConfDir, ModeDir, Owner}, {CNIBinDir, ModeDir, Owner}, {ImageDir, ModeDir, Owner}},
			State:       []string{ContainerdRootDir, ContainerdStateDir, ContainerdOptDir, CNINetworkDir, CNIResultsDir},
			unit: unitData{Description: "containerd container runtime", Documentation: "https://containerd.io",
				After: []string{"network.target", "local-fs.target"}, Type: "notify",
				// "-": a host with the modules built in, or a container (the lab)
				// whose /proc/sys is partly read-only, is no failure; kube-proxy and
				// verify say what is missing.
				ExecStartPre: []string{"-/sbin/modprobe overlay", "-/sbin/modprobe br_netfilter", "-/sbin/sysctl -p " + SysctlConf},
				// containerd's own unit: the shims and containers live in the
				// unit's cgroup but must outlive a containerd restart; no
				// OOMScoreAdjust (a container host cannot lower it, and a real
				// host does not need it for kubelet-managed pods).
				Delegate: true, KillMode: "process", Unlimited: []string{"LimitNPROC", "LimitCORE", "TasksMax"}},
			version: containerdVersion,
			flags: func(*inventory.Inventory, inventory.Host) []flagDef {
				return []flagDef{{"", "config", ContainerdConfig, "the CRI, runc and CNI settings below (config version 3, containerd 2.x)"}}
			},
		},
		// Before the kubelet: its kubeconfig names 127.0.0.1:6443 when the
		// workers run the node-local load balancer.
		apiServerLBComponent(),
		{
			Name: Kubelet, Unit: Kubelet + ".service", Role: Worker, Process: "kubelet",
			Binaries: []Binary{bin(Kubelet)},
			Ports: []Port{
				{Number: KubeletPort, Name: "secure"},
				{Number: KubeletHealthzPort, Name: "healthz", Loopback: true},
			},
			Health: Health{Scheme: "http", Port: KubeletHealthzPort, Path: "/healthz"},
			Files: []Copy{
				// clientCAFile: the cluster CA's trust bundle (both CAs during
				// a rotation), under the path kubelets always had.
				{Path: KubeletCACert, Kind: SourceCert, Name: "ca-trust-bundle"},
				{Path: KubeletCert, Kind: SourceCert, Name: "kubelet-{host}"},
				{Path: KubeletKey, Kind: SourceKey, Name: "kubelet-{host}"},
				{Path: KubeletKubeconfig, Kind: SourceKubeconfig, Name: "{host}"},
			},
			Kubeconfig: KubeletKubeconfig,
			Configs:    []Config{{Path: KubeletConfig, render: renderKubeletConfig}},
			Dirs:       []Dir{{KubeletDir, ModePriv, Owner}, {ConfigDir, ModeDir, Owner}},
			// Its directory holds its certificates, kubeconfig and
			// resolv.conf link (the host step's) too, and the pods' volumes.
			State: []string{KubeletDir, PodLogsDir, ContainerLogsDir},
			unit: unitData{Description: "Kubernetes node agent",
				Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/",
				After:         []string{"containerd.service"}, Requires: []string{"containerd.service"}, Type: "simple",
				Environment: apiClientEnv},
			version: k8sVersion, flags: kubeletFlags,
		},
		{
			Name: KubeProxy, Unit: KubeProxy + ".service", Role: Worker, Process: "kube-proxy",
			Binaries: []Binary{bin(KubeProxy)},
			Ports: []Port{
				{Number: KubeProxyHealthzPort, Name: "healthz"},
				{Number: KubeProxyMetricsPort, Name: "metrics", Loopback: true},
			},
			Health:     Health{Scheme: "http", Port: KubeProxyHealthzPort, Path: "/healthz"},
			Files:      []Copy{{Path: KubeProxyKubeconfig, Kind: SourceKubeconfig, Name: "kube-proxy"}},
			Kubeconfig: KubeProxyKubeconfig,
			Dirs:       []Dir{{KubeProxyDir, ModePriv, Owner}},
			State:      []string{KubeProxyDir},
			unit: unitData{Description: "Kubernetes network proxy",
				Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/",
				After:         []string{"network-online.target"}, Wants: []string{"network-online.target"}, Type: "simple",
				Environment: apiClientEnv},
			version: k8sVersion, flags: kubeProxyFlags,
		},
		{
			Name: PodRoutes, Unit: PodRoutes + ".service", Role: EveryHost,
			enabled:  func(r *renderer, h inventory.Host) bool { return len(r.routes(h)) > 0 || r.egress(h) != nil },
			unitFile: renderRoutesUnit,
		},
	}
}

// apiClientEnv shortens client-go's HTTP/2 health check (defaults 30 s + 15 s)
// for the kubelet and kube-proxy, which reach the API through a TCP load
// balancer (the node-local one, or the user's in front of
// apiServerEndpoint). When the control-plane host behind a connection loses
// power, the balancer keeps the worker's side of the connection open and no
// error ever comes back; the kubelet's requests on it hang until the health
// check declares it dead. With the defaults that took 45 s: its node lease
// went unrenewed past its 40 s duration, close to the controller-manager's
// 50 s grace period, and now and then the node turned NotReady although two
// apiservers were up (measured in the lab). 10 s + 5 s bounds that to 15 s;
// the price is an HTTP/2 PING on a connection that read nothing for 10 s.
var apiClientEnv = []envVar{
	{"HTTP2_READ_IDLE_TIMEOUT_SECONDS", "10", "send an HTTP/2 PING on an API connection that read nothing for 10 s (client-go's default: 30 s), so a connection to a lost control-plane host is noticed"},
	{"HTTP2_PING_TIMEOUT_SECONDS", "5", "close the connection when the PING is not answered within 5 s (default 15 s) and reconnect through the load balancer to a live apiserver (the kubelet: well before its node lease expires)"},
}

func kubeletFlags(_ *inventory.Inventory, h inventory.Host) []flagDef {
	return []flagDef{
		{"", "config", KubeletConfig, "KubeletConfiguration: authentication, cgroups, DNS, TLS (see below)"},
		{"", "kubeconfig", KubeletKubeconfig, "register and report as system:node:" + h.Name + " with the node's client certificate"},
		{"", "node-ip", h.IP(), "the node's InternalIP: the address the apiserver and the pod routes use"},
		{"", "hostname-override", h.Name, "the Node name must be the certificate's name (system:node:" + h.Name + "), whatever the hostname"},
	}
}

func kubeProxyFlags(inv *inventory.Inventory, h inventory.Host) []flagDef {
	mode := inv.Network.KubeProxyMode
	why := "iptables: works on every kernel hardway supports (the default)"
	if mode == inventory.ProxyNFTables {
		why = "nftables: needs Linux 5.13 or later and the nft command on the host"
	}
	defs := []flagDef{
		// Flags, not a config file: KubeProxyConfiguration exists only as
		// kubeproxy.config.k8s.io/v1alpha1, and hardway uses no alpha API;
		// these flags are stable and not deprecated.
		{"", "kubeconfig", KubeProxyKubeconfig, "watch Services and EndpointSlices as system:kube-proxy"},
		{"", "hostname-override", h.Name, "find this node's Node object by its name, not the hostname"},
		{"", "cluster-cidr", inv.Network.PodCIDR, "traffic from outside the pod network to a Service is masqueraded"},
		{"", "proxy-mode", mode, why},
	}
	if h.ContainerHost {
		defs = append(defs, flagDef{"", "conntrack-max-per-core", "0",
			"containerHost only: leave nf_conntrack_max alone (a global sysctl a container cannot write)"})
	}
	return defs
}

// routes are the routes host h needs: every other worker's pod subnet via
// that worker's address. None with network.cni none.
func (r *renderer) routes(h inventory.Host) []Setting {
	if r.inv.Network.CNI == inventory.CNINone {
		return nil
	}
	var out []Setting
	for _, w := range r.inv.Workers {
		if w.Name == h.Name {
			continue
		}
		s, ok := r.pods[w.Name]
		if !ok {
			continue // Render checked every worker has one
		}
		out = append(out, Setting{File: UnitPath(PodRoutes), Key: s.String(), Value: "via " + w.IP(),
			Reason: "pods on " + w.Name + " are reached through its address (" + r.inv.Network.PodCIDR + " is split per worker)"})
	}
	return out
}

// egressRule is the iptables rule (nat POSTROUTING) a worker with the bridge
// CNI masquerades its pods' egress with: from podCIDR to anywhere outside
// it. Traffic between pods keeps the pod's address, on one node and across
// nodes (Kubernetes' network model: no NAT between pods); the bridge
// plugin's own ipMasq would also masquerade traffic to other nodes' pods,
// because it only exempts the node's own pod subnet. Nil on other hosts.
func (r *renderer) egress(h inventory.Host) *Setting {
	if r.inv.Network.CNI == inventory.CNINone {
		return nil
	}
	if _, ok := r.pods[h.Name]; !ok {
		return nil // not a worker: no pods
	}
	pod := r.inv.Network.PodCIDR
	return &Setting{File: UnitPath(PodRoutes), Key: "masquerade",
		Value:  "-s " + pod + " ! -d " + pod,
		Reason: "pods' traffic leaving the pod network (" + pod + ") goes out with the node's address; pod to pod keeps the pod IP (no NAT between pods)"}
}

func renderRoutesUnit(r *renderer, h inventory.Host) ([]byte, []Setting, error) {
	routes := r.routes(h)
	egress := r.egress(h)
	desc := "Routes to the pod subnets of the other workers (hardway)"
	if egress != nil {
		desc = "Routes to the pod subnets of the other workers and masquerade of pods' egress (hardway)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[Unit]
Description=%s
Documentation=https://github.com/kelseyhightower/kubernetes-the-hard-way/blob/master/docs/11-pod-network-routes.md
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
`, desc)
	var rule string
	if egress != nil {
		pod := r.inv.Network.PodCIDR
		if err := checkArg("podCIDR", pod); err != nil {
			return nil, nil, err
		}
		ipt := iptablesCommand
		if r.inv.Network.PodNet().Addr().Is6() {
			ipt = ip6tablesCommand
		}
		// -w: wait for the xtables lock kube-proxy also takes.
		rule = fmt.Sprintf("%s -w -t nat %%s POSTROUTING -s %s ! -d %s -m comment --comment %s -j MASQUERADE", ipt, pod, pod, egressComment)
		// Idempotent without a shell: delete a copy left by an earlier
		// start ("-": none is no failure), then append exactly one.
		fmt.Fprintf(&b, "ExecStartPre=-"+rule+"\n", "-D")
		fmt.Fprintf(&b, "ExecStart="+rule+"\n", "-A")
	}
	for _, s := range routes {
		via := strings.TrimPrefix(s.Value.(string), "via ")
		if err := checkArg("route", s.Key+via); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(&b, "ExecStart=%s route replace %s via %s proto %s\n", ipCommand, s.Key, via, podRouteProto)
	}
	// Stopping (and so a restart after the worker set changed) removes
	// exactly the routes this unit added, stale ones included.
	fmt.Fprintf(&b, "ExecStop=%s route flush proto %s\n", ipCommand, podRouteProto)
	if egress != nil {
		// "-": a rule someone already removed is no failure to stop.
		fmt.Fprintf(&b, "ExecStop=-"+rule+"\n", "-D")
		routes = append(routes, *egress)
	}
	b.WriteString("Restart=on-failure\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\n")
	return []byte(b.String()), routes, nil
}

func renderContainerdConfig(r *renderer, h inventory.Host) ([]byte, []Setting, error) {
	const (
		images  = "plugins.'io.containerd.cri.v1.images'"
		runtime = "plugins.'io.containerd.cri.v1.runtime'"
		runc    = runtime + ".containerd.runtimes.runc"
	)
	defs := []settingDef{
		{"", "", "root", ContainerdRootDir, "images, snapshots and container state"},
		{"", "", "state", ContainerdStateDir, "sockets and runtime state (tmpfs)"},
		{"", "grpc", "address", ContainerdSocket, "the CRI socket the kubelet's containerRuntimeEndpoint names"},
		{"", images, "snapshotter", "overlayfs", "container root filesystems as overlay mounts"},
		{"", images + ".pinned_images", "sandbox", r.pauseImage(), "the pause image every pod starts with; pinned, so never garbage-collected or pulled"},
	}
	if len(r.inv.Registries) > 0 {
		// Only with registries: an inventory without them renders the
		// config it always did (containerd's default: no hosts directory).
		defs = append(defs, settingDef{"", images + ".registry", "config_path", CertsDir,
			"pull " + registryNames(r.inv) + " through the mirrors in registries: (one <registry>/hosts.toml each, read at every pull)"})
	}
	if h.ContainerHost {
		defs = append(defs, settingDef{"", runtime, "restrict_oom_score_adj", true,
			"containerHost only: a container cannot lower oom_score_adj (no CAP_SYS_RESOURCE), so clamp pods to containerd's own"})
	}
	defs = append(defs,
		settingDef{"", runtime + ".containerd", "default_runtime_name", "runc", "every pod runs with runc"},
		settingDef{"", runc, "runtime_type", "io.containerd.runc.v2", "the runc shim (containerd-shim-runc-v2)"},
		settingDef{"", runc + ".options", "BinaryName", SbinDir + "/runc", "the runc hardway installs, whatever PATH says"},
		settingDef{"", runc + ".options", "SystemdCgroup", true, "systemd owns the cgroups, as the kubelet's cgroupDriver: systemd says"},
	)
	if h.ContainerHost {
		defs = append(defs, settingDef{"", runc + ".options", "NoNewKeyring", true,
			"containerHost only: the container's seccomp filter refuses keyctl(), which runc needs for a session keyring"})
	}
	defs = append(defs,
		settingDef{"", runtime + ".cni", "bin_dirs", []string{CNIBinDir}, "where the CNI plugins are"},
		settingDef{"", runtime + ".cni", "conf_dir", CNIConfDir, "where the CNI config is (10-bridge.conflist, or your CNI's)"},
	)
	v := containerdVersion(r.inv)
	if v == nil || !containerdConfigV3.Check(v.Core()) {
		return nil, nil, fmt.Errorf("containerd %q: hardway writes the config of containerd 2.x (version 3); set containerdVersion to v2.0 or later", r.inv.ContainerdVersion)
	}
	settings, err := selectSettings(Containerd, ContainerdConfig, defs, v)
	if err != nil {
		return nil, nil, err
	}
	body := tomlDoc("# Rendered by hardway: containerd 2.x (config version 3).\nversion = 3\n", settings, tomlTables(defs))
	return body, settings, nil
}

// PauseImage is the sandbox image containerd runs on inv's workers.
func PauseImage(inv *inventory.Inventory) string { return (&renderer{inv: inv}).pauseImage() }

// pauseImage is the inventory's pause image if it lists one, else the default.
func (r *renderer) pauseImage() string {
	for _, name := range r.images() {
		repo, _, _ := strings.Cut(name, "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		if strings.HasSuffix(repo, "/pause") {
			return name
		}
	}
	return DefaultPauseImage
}

// NodeModules are the kernel modules a worker needs: loaded at every boot
// (ModulesLoadConf) and, by the host step, now.
func NodeModules() []Setting {
	return []Setting{
		{File: ModulesLoadConf, Key: "overlay", Value: "module", Reason: "containerd's overlayfs snapshotter"},
		{File: ModulesLoadConf, Key: "br_netfilter", Value: "module", Reason: "bridged pod traffic passes iptables/nftables: a Service answered by a pod on the same bridge"},
	}
}

// NodeSysctls are the kernel settings worker h needs: set at every boot
// (SysctlConf) and, by the host step, now.
func NodeSysctls(inv *inventory.Inventory, h inventory.Host) []Setting {
	settings := []Setting{
		{File: SysctlConf, Key: "net.ipv4.ip_forward", Value: 1, Reason: "the node routes pod traffic to and from the other nodes"},
		{File: SysctlConf, Key: "net.bridge.bridge-nf-call-iptables", Value: 1, Reason: "kube-proxy's rules see traffic between pods on one bridge (needs br_netfilter)"},
		{File: SysctlConf, Key: "net.bridge.bridge-nf-call-ip6tables", Value: 1, Reason: "the same for IPv6"},
	}
	if a, err := netip.ParseAddr(h.IP()); err == nil && a.Is6() || inv.Network.PodNet().Addr().Is6() {
		settings = append(settings, Setting{File: SysctlConf, Key: "net.ipv6.conf.all.forwarding", Value: 1, Reason: "IPv6 pod traffic is routed too"})
	}
	return settings
}

func renderModulesConf(*renderer, inventory.Host) ([]byte, []Setting, error) {
	settings := NodeModules()
	var b strings.Builder
	b.WriteString("# Rendered by hardway: kernel modules a Kubernetes node needs.\n")
	for _, s := range settings {
		b.WriteString(s.Key + "\n")
	}
	return []byte(b.String()), settings, nil
}

func renderSysctlConf(r *renderer, h inventory.Host) ([]byte, []Setting, error) {
	settings := NodeSysctls(r.inv, h)
	var b strings.Builder
	b.WriteString("# Rendered by hardway: kernel settings a Kubernetes node needs.\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "%s = %v\n", s.Key, s.Value)
	}
	return []byte(b.String()), settings, nil
}

func renderCrictlConfig(*renderer, inventory.Host) ([]byte, []Setting, error) {
	settings := []Setting{
		{File: CrictlConfig, Key: "runtime-endpoint", Value: "unix://" + ContainerdSocket, Reason: "crictl talks to containerd's CRI without guessing sockets"},
		{File: CrictlConfig, Key: "image-endpoint", Value: "unix://" + ContainerdSocket, Reason: "the same for images"},
	}
	b, err := yamlDoc(nil, settings)
	return b, settings, err
}

func renderKubeletConfig(r *renderer, h inventory.Host) ([]byte, []Setting, error) {
	inv := r.inv
	defs := []settingDef{
		{"", "", "authentication.anonymous.enabled", false, "no anonymous access to the kubelet API (logs, exec, pods)"},
		{"", "", "authentication.webhook.enabled", true, "bearer tokens are checked with the apiserver (TokenReview)"},
		{"", "", "authentication.x509.clientCAFile", KubeletCACert, "client certificates signed by the cluster CA authenticate (the apiserver's apiserver-kubelet-client)"},
		{"", "", "authorization.mode", "Webhook", "every request is authorized by the apiserver (SubjectAccessReview, RBAC)"},
		{"", "", "cgroupDriver", "systemd", "systemd owns the cgroups, as containerd's runc SystemdCgroup = true"},
		{"", "", "clusterDNS", []string{inv.ClusterDNS()}, "pods resolve names through the cluster DNS Service: the 10th address of " + inv.Network.ServiceCIDR},
		{"", "", "clusterDomain", inv.Network.ClusterDomain, "the DNS suffix of Services (<svc>.<ns>.svc." + inv.Network.ClusterDomain + ")"},
		{"", "", "containerRuntimeEndpoint", "unix://" + ContainerdSocket, "containerd's CRI socket"},
		{"", "", "healthzBindAddress", "127.0.0.1", "/healthz on loopback only"},
		{"", "", "healthzPort", KubeletHealthzPort, "the port 'hardway up' and verify probe"},
		{"", "", "port", KubeletPort, "the kubelet API the apiserver calls for logs, exec and port-forward"},
		{"", "", "readOnlyPort", 0, "no unauthenticated read-only API (10255)"},
		{"", "", "resolvConf", KubeletResolvConf, "the host's real DNS servers for pods: a link to /etc/resolv.conf, or to systemd-resolved's upstream list where /etc/resolv.conf is its stub 127.0.0.53 (CoreDNS would forward to itself)"},
	}
	if inv.HostPrep.Swap == inventory.SwapLimited {
		defs = append(defs,
			settingDef{"", "", "failSwapOn", false, "hostPrep.swap: limited: the kubelet runs on a host with swap on"},
			settingDef{"", "", "memorySwap.swapBehavior", "LimitedSwap", "hostPrep.swap: limited: Burstable pods may swap in proportion to their memory request; Guaranteed and BestEffort pods never (cgroup v2)"})
	}
	if s, ok := r.pods[h.Name]; ok && inv.Network.CNI != inventory.CNINone {
		defs = append(defs, settingDef{"", "", "podCIDR", s.String(), "this node's pod subnet (state pod-subnets.yaml), the same as the bridge CNI's"})
	}
	defs = append(defs,
		settingDef{"", "", "tlsCertFile", KubeletCert, "serving certificate signed by the cluster CA with the node's name and addresses: the apiserver's --kubelet-certificate-authority verifies it"},
		settingDef{"", "", "tlsPrivateKeyFile", KubeletKey, "key of the serving certificate"},
		settingDef{"", "", "tlsMinVersion", "VersionTLS12", "no TLS 1.0 or 1.1 on 10250"},
		settingDef{"", "", "tlsCipherSuites", strongCiphers, "TLS 1.2 only with forward-secret AEAD ciphers, as the apiserver (CIS 4.2.12)"},
	)
	if h.ContainerHost {
		// The field exists from 1.31 (its default turned true in 1.35).
		defs = append(defs, settingDef{">= 1.31.0", "", "failCgroupV1", false,
			"containerHost only: the lab's machine has cgroup v1 only; a real host on cgroup v1 fails preflight instead"})
		// A container's root is its machine's disk, shared with all else
		// there: the kubelet's percentages measure the machine, and a
		// workstation at 85 % deletes the node's imported images (which no
		// registry gives back) and at 85-90 % evicts its pods.
		defs = append(defs,
			settingDef{"", "", "imageGCHighThresholdPercent", 100,
				"containerHost only: the node's disk is its machine's; no image garbage collection because the machine fills (imported images come back from no registry)"},
			settingDef{"", "", "imageGCLowThresholdPercent", 99, "containerHost only: below the high threshold, as the kubelet requires"},
			settingDef{"", "", "evictionHard", map[string]string{
				"imagefs.available": "1Gi", "nodefs.available": "1Gi", // not 15 % and 10 % of the machine's disk
				"imagefs.inodesFree": "5%", "nodefs.inodesFree": "5%", "memory.available": "100Mi", // the defaults: a partial evictionHard drops the others
			}, "containerHost only: the node's disk is its machine's: evict on 1Gi free, not on 10-15 % of the machine"},
		)
	}
	settings, err := selectSettings(Kubelet, KubeletConfig, defs, inv.K8s)
	if err != nil {
		return nil, nil, err
	}
	// v1beta1 is the only version of the kubelet's config API there is.
	b, err := yamlDoc([][2]string{{"apiVersion", "kubelet.config.k8s.io/v1beta1"}, {"kind", "KubeletConfiguration"}}, settings)
	return b, settings, err
}

// cniNet is the CNI network config of 10-bridge.conflist.
type cniNet struct {
	CNIVersion string      `json:"cniVersion"`
	Name       string      `json:"name"`
	Plugins    []cniPlugin `json:"plugins"`
}

type cniPlugin struct {
	Type         string          `json:"type"`
	Bridge       string          `json:"bridge,omitempty"`
	IsGateway    bool            `json:"isGateway,omitempty"`
	IPMasq       *bool           `json:"ipMasq,omitempty"` // written out as false: the tutorial's is true
	HairpinMode  bool            `json:"hairpinMode,omitempty"`
	IPAM         *cniIPAM        `json:"ipam,omitempty"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
}

type cniIPAM struct {
	Type   string                `json:"type"`
	Ranges [][]map[string]string `json:"ranges"`
	Routes []map[string]string   `json:"routes"`
}

// cniVersion is the CNI spec version the configs declare; the plugins
// hardway installs (v1.x) speak it.
const cniVersion = "1.0.0"

func renderBridgeConflist(r *renderer, h inventory.Host) ([]byte, []Setting, error) {
	if r.inv.Network.CNI == inventory.CNINone {
		return nil, nil, nil
	}
	s, ok := r.pods[h.Name]
	if !ok {
		return nil, nil, fmt.Errorf("no pod subnet for %s", h.Name)
	}
	dflt := "0.0.0.0/0"
	if s.Addr().Is6() {
		dflt = "::/0"
	}
	net := cniNet{CNIVersion: cniVersion, Name: "bridge", Plugins: []cniPlugin{
		{Type: "bridge", Bridge: CNIBridge, IsGateway: true, IPMasq: new(false), HairpinMode: true,
			IPAM: &cniIPAM{Type: "host-local", Ranges: [][]map[string]string{{{"subnet": s.String()}}}, Routes: []map[string]string{{"dst": dflt}}}},
		{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
	}}
	b, err := json.MarshalIndent(net, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	f := BridgeConflist
	settings := []Setting{
		{File: f, Key: "bridge", Value: CNIBridge, Reason: "pods on this node share the Linux bridge " + CNIBridge},
		{File: f, Key: "isGateway", Value: true, Reason: "cni0 gets the subnet's first address and is the pods' default gateway"},
		{File: f, Key: "ipMasq", Value: false, Reason: "no NAT between pods (the plugin would masquerade traffic to other nodes' pods too); " + PodRoutes + ".service masquerades only traffic leaving " + r.inv.Network.PodCIDR},
		{File: f, Key: "hairpinMode", Value: true, Reason: "a pod reaches itself through its own Service"},
		{File: f, Key: "ipam.subnet", Value: s.String(), Reason: "host-local hands out this node's own pod subnet (state pod-subnets.yaml)"},
		{File: f, Key: "portmap", Value: true, Reason: "hostPort mappings"},
	}
	return append(b, '\n'), settings, nil
}

func bridgeOnly(b Binary) Binary { b.bridgeOnly = true; return b }

// images are the names of the inventory's image tarballs, of every
// architecture: the sandbox image is known by its name, whichever tarball a
// worker imported it from.
func (r *renderer) images() []string {
	var out []string
	for _, im := range r.inv.Images {
		out = append(out, im.Name)
	}
	return out
}

// ImagePath is where the tarball of image name goes on a worker:
// registry.k8s.io/pause:3.10.2 -> /var/lib/hardway/images/registry.k8s.io_pause_3.10.2.tar.
func ImagePath(name string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
	return ImageDir + "/" + safe + ".tar"
}

// checkSubnets makes sure every worker has a pod subnet inside podCIDR and
// no two overlap (the allocation comes from the state directory).
func checkSubnets(inv *inventory.Inventory, pods map[string]netip.Prefix) error {
	if inv.Network.CNI == inventory.CNINone {
		return nil
	}
	pod := inv.Network.PodNet()
	seen := map[netip.Prefix]string{}
	for _, w := range inv.Workers {
		s, ok := pods[w.Name]
		if !ok {
			return fmt.Errorf("worker %s has no pod subnet (allocate with podnet.Allocate first)", w.Name)
		}
		if !pod.Contains(s.Addr()) || s.Bits() < pod.Bits() {
			return fmt.Errorf("worker %s: pod subnet %s is not inside network.podCIDR %s", w.Name, s, pod)
		}
		for o, name := range seen {
			if o.Overlaps(s) {
				return fmt.Errorf("workers %s and %s: pod subnets %s and %s overlap", name, w.Name, o, s)
			}
		}
		seen[s] = w.Name
	}
	return nil
}
