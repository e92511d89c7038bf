// Package inventory loads and validates inventory.yaml: the one file that
// describes a hardway cluster.
//
// Loading keeps the yaml.v3 node tree so that every problem is reported at
// its file:line:col, all at once, sorted — a user fixing an inventory should
// not have to run hardway once per typo.
package inventory

import (
	"net/netip"
	"time"

	"github.com/hashicorp/go-version"
)

// Defaults used when the inventory leaves a field out.
const (
	DefaultKubernetesVersion = "v1.36.3"
	DefaultArch              = "amd64"
	DefaultServiceCIDR       = "10.32.0.0/24"
	DefaultPodCIDR           = "10.200.0.0/16"
	DefaultClusterDomain     = "cluster.local"
	DefaultAPIServerPort     = 6443
	DefaultSSHUser           = "root"
	DefaultSSHPort           = 22
	DefaultAlgorithm         = "ecdsa-p256"
	DefaultProvider          = "secretbox"
	DefaultClusterName       = "hardway"
	// The official download sites; a mirror with the same layout may replace them.
	DefaultKubernetesMirror = "https://dl.k8s.io"
	DefaultEtcdMirror       = "https://github.com/etcd-io/etcd/releases/download"
	// The worker components' official GitHub release downloads.
	DefaultContainerdMirror = "https://github.com/containerd/containerd/releases/download"
	DefaultRuncMirror       = "https://github.com/opencontainers/runc/releases/download"
	DefaultCNIPluginsMirror = "https://github.com/containernetworking/plugins/releases/download"
	DefaultCrictlMirror     = "https://github.com/kubernetes-sigs/cri-tools/releases/download"
	DefaultTraefikMirror    = "https://github.com/traefik/traefik/releases/download"

	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour

	// Bounds of the lifetimes. A CA lives at most 100 years (ten times
	// kubeadm's) and a leaf at most 10 (kubeadm's: one): beyond that a
	// key outlives every plan to rotate it. A leaf lives at least an hour
	// (it is backdated 5 minutes and reissued in the last half of a short
	// life) and a CA at least a day.
	MaxCAValidity   = 100 * 365 * 24 * time.Hour
	MaxLeafValidity = 10 * 365 * 24 * time.Hour
	MinCAValidity   = 24 * time.Hour
	MinLeafValidity = time.Hour
)

// Inventory is inventory.yaml after loading: defaults filled in, validated.
type Inventory struct {
	Cluster           string      `yaml:"cluster"`
	KubernetesVersion string      `yaml:"kubernetesVersion"` // "v1.36.3", or a minor "1.36" resolved by pkg/release
	EtcdVersion       string      `yaml:"etcdVersion"`       // "v3.6.16"; default from the table per Kubernetes minor
	ContainerdVersion string      `yaml:"containerdVersion"` // "v2.4.2"; worker versions default from workerTable
	RuncVersion       string      `yaml:"runcVersion"`       // "v1.5.3"
	CNIPluginsVersion string      `yaml:"cniPluginsVersion"` // "v1.10.0"
	CrictlVersion     string      `yaml:"crictlVersion"`     // "v1.37.0"
	TraefikVersion    string      `yaml:"traefikVersion"`    // "v3.7.13": the workers' node-local apiserver load balancer
	Arch              string      `yaml:"arch"`              // amd64 or arm64: every host's and image's unless it names its own
	Network           Network     `yaml:"network"`
	SSH               SSH         `yaml:"ssh"`
	PKI               PKI         `yaml:"pki"`
	Encryption        Encryption  `yaml:"encryption"`
	Releases          Releases    `yaml:"releases"`
	ControlPlane      []Host      `yaml:"controlPlane"`
	Workers           []Host      `yaml:"workers"`
	Images            []Image     `yaml:"images"`      // image tarballs imported on every worker (air-gapped, lab)
	Registries        []Registry  `yaml:"registries"`  // mirrors the workers' containerd pulls through (registries.go)
	DNS               DNS         `yaml:"dns"`         // the CoreDNS add-on up applies when there are workers
	PodSecurity       PodSecurity `yaml:"podSecurity"` // the cluster's default Pod Security level (podsecurity.go)
	HostPrep          HostPrep    `yaml:"hostPrep"`    // how far up may change a host's packages, firewall and swap (hostprep.go)

	// Filled in by Load; not part of the file.
	Path     string           `yaml:"-"` // absolute path of the inventory file
	K8s      *version.Version `yaml:"-"` // parsed KubernetesVersion (a minor parses as X.Y.0)
	Etcd     *version.Version `yaml:"-"` // parsed EtcdVersion
	Warnings []Problem        `yaml:"-"` // problems that do not stop hardway (even quorum, untested pairing)
}

// Network holds the cluster's address plans.
type Network struct {
	ServiceCIDR       string `yaml:"serviceCIDR"`
	PodCIDR           string `yaml:"podCIDR"`
	ClusterDomain     string `yaml:"clusterDomain"`
	APIServerEndpoint string `yaml:"apiServerEndpoint"` // host[:port] of a VIP or load balancer; default the first control-plane host
	CNI               string `yaml:"cni"`               // "bridge" (default): hardway's bridge CNI and pod routes; "none": bring your own
	KubeProxyMode     string `yaml:"kubeProxyMode"`     // "iptables" (default) or "nftables"
	// APIServerLoadBalancer is how workers reach the apiservers: "node-local"
	// (a load balancer on each worker's 127.0.0.1:6443 in front of every
	// control-plane host) or "none" (apiServerEndpoint). See apilb.go.
	APIServerLoadBalancer string `yaml:"apiServerLoadBalancer"`

	serviceNet netip.Prefix
	podNet     netip.Prefix
}

// SSH says how hardway reaches hosts. Per-host overrides use the same shape;
// their zero fields inherit the inventory-wide ones.
type SSH struct {
	User           string `yaml:"user"`
	Port           int    `yaml:"port"`
	IdentityFile   string `yaml:"identityFile"`   // relative to the inventory file
	KnownHostsFile string `yaml:"knownHostsFile"` // relative to the inventory file; default ~/.ssh/known_hosts
	Bastion        string `yaml:"bastion"`        // jump host: [user@]host[:port]
	Sudo           *bool  `yaml:"sudo"`           // default: true when user is not root
}

// PKI chooses the key algorithm and certificate lifetimes.
type PKI struct {
	Algorithm    string   `yaml:"algorithm"` // ecdsa-p256, rsa-2048, rsa-3072, rsa-4096
	CAValidity   Duration `yaml:"caValidity"`
	LeafValidity Duration `yaml:"leafValidity"`
	// AdminKubeconfigOnHosts puts the admin kubeconfig (system:masters:
	// the whole cluster) on every control-plane host. Off by default: no
	// hardway step needs it there, and a copy on each host is a copy more
	// to steal.
	AdminKubeconfigOnHosts bool `yaml:"adminKubeconfigOnHosts"`
}

// Encryption chooses the provider for secrets at rest.
type Encryption struct {
	Provider string `yaml:"provider"` // secretbox, aescbc, aesgcm
}

// Releases are the base URLs binaries are fetched from (http, https or file).
type Releases struct {
	Kubernetes string `yaml:"kubernetes"` // <base>/release/vX.Y.Z/bin/linux/<arch>/<bin>
	Etcd       string `yaml:"etcd"`       // <base>/vX.Y.Z/etcd-vX.Y.Z-linux-<arch>.tar.gz
	Containerd string `yaml:"containerd"` // <base>/vX.Y.Z/containerd-X.Y.Z-linux-<arch>.tar.gz (+ .sha256sum)
	Runc       string `yaml:"runc"`       // <base>/vX.Y.Z/runc.<arch> (+ runc.sha256sum)
	CNIPlugins string `yaml:"cniPlugins"` // <base>/vX.Y.Z/cni-plugins-linux-<arch>-vX.Y.Z.tgz (+ .sha512)
	Crictl     string `yaml:"crictl"`     // <base>/vX.Y.Z/crictl-vX.Y.Z-linux-<arch>.tar.gz (+ .sha256)
	Traefik    string `yaml:"traefik"`    // <base>/vX.Y.Z/traefik_vX.Y.Z_linux_<arch>.tar.gz (+ traefik_vX.Y.Z_checksums.txt)
	// AllowHTTP accepts plain http:// mirrors and image URLs (a warning
	// each); without it they are refused (see validateTransport).
	AllowHTTP bool `yaml:"allowHTTP"`
	// FetchOn says who downloads the release files the hosts install:
	// FetchOnOperator (default) pushes the operator's verified copies over
	// SSH; FetchOnHosts lets each host download its own from the release
	// URLs, checked on the host against hardway.lock's sha256 before
	// anything is installed (see fetchon.go).
	FetchOn string `yaml:"fetchOn"`
}

// Image is a container image as a docker-archive tarball, for hosts that
// cannot pull from a registry. Its bytes are verified against SHA256, or
// when that is empty against the SHA256SUMS file beside URL.
type Image struct {
	Name   string `yaml:"name"`   // as containerd knows it: registry.k8s.io/pause:3.10.2
	URL    string `yaml:"url"`    // http(s) or file URL of the tarball
	SHA256 string `yaml:"sha256"` // hex; optional when SHA256SUMS is published beside the URL
	// Arch is the architecture the tarball holds the image for ("": the
	// inventory's arch). A tarball holds one platform, so a cluster with
	// workers of two architectures lists an image once per architecture;
	// each worker imports those of its own (see ImagesFor).
	Arch string `yaml:"arch"`
}

// Registry is a container registry the workers pull through mirrors: a
// local mirror or a pull-through cache, for a homelab or an air-gapped
// cluster, and for pods that must pull (imagePullPolicy: Always), which
// the image tarballs cannot serve.
type Registry struct {
	// Name is the registry as image names carry it: registry.k8s.io,
	// docker.io (Docker Hub), 10.240.16.1:5000. host[:port], no scheme.
	Name    string   `yaml:"name"`
	Mirrors []Mirror `yaml:"mirrors"` // tried in order before the registry itself
	// MirrorOnly: never fall back to the registry itself (air-gapped: a
	// pull the mirrors cannot serve fails at once, instead of after the
	// registry's connect timeout).
	MirrorOnly bool `yaml:"mirrorOnly"`
}

// Mirror is one mirror of a Registry.
type Mirror struct {
	URL string `yaml:"url"` // http(s)://host[:port]; plain http only on a network you trust
	// CA is a PEM file (relative to the inventory file) of the CA that
	// signed an https mirror's certificate, when the hosts' system roots
	// do not; it is pushed to the workers.
	CA string `yaml:"ca"`
	// InsecureSkipVerify accepts any certificate from an https mirror: off
	// unless set, and refused together with ca.
	InsecureSkipVerify bool `yaml:"insecureSkipVerify"`

	// Filled in by Load; not part of the file.
	CAData []byte `yaml:"-"` // the CA file's content (checked to hold a certificate)
}

// Host is one machine, control plane or worker.
type Host struct {
	Name            string `yaml:"name"`            // DNS-1123 label; hostname, etcd member name, cert names
	Address         string `yaml:"address"`         // IP hardway connects to over SSH
	InternalAddress string `yaml:"internalAddress"` // IP the cluster uses; default Address
	SSH             *SSH   `yaml:"ssh"`             // per-host overrides
	// ContainerHost: the host is a container (the lab's nspawn hosts). It
	// turns on the settings only such a host needs; never on a real host.
	ContainerHost bool `yaml:"containerHost"`
	// Arch is the host's architecture, amd64 or arm64 ("": the inventory's
	// arch): the release binaries it gets are those built for it. Read it
	// through Inventory.HostArch.
	Arch string `yaml:"arch"`
}

// IP is the host's cluster-facing address (InternalAddress, else Address).
func (h Host) IP() string {
	if h.InternalAddress != "" {
		return h.InternalAddress
	}
	return h.Address
}

// Addresses are the host's distinct addresses, internal first.
func (h Host) Addresses() []string {
	if h.InternalAddress != "" && h.InternalAddress != h.Address {
		return []string{h.InternalAddress, h.Address}
	}
	return []string{h.Address}
}
