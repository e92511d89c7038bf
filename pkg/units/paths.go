package units

import "io/fs"

// Where things live on a hard-way control-plane host: the one table. Every
// path rendered into a flag or pushed by the manifest is one of these
// constants, so a unit and the file it names cannot disagree.
const (
	BinDir      = "/usr/local/bin"         // release binaries
	UnitDir     = "/etc/systemd/system"    // systemd units
	KubeDir     = "/var/lib/kubernetes"    // Kubernetes certs, keys, kubeconfigs, encryption and audit config
	EtcdDir     = "/etc/etcd"              // etcd's certs
	ConfigDir   = "/etc/kubernetes/config" // component config files
	EtcdDataDir = "/var/lib/etcd"          // etcd data (0700: etcd warns about and tightens anything looser)
	AuditLogDir = "/var/log/kubernetes"    // apiserver audit log

	// Certificates and keys keep their names from the PKI table
	// (<state>/pki/<name>.crt|.key), except per-host etcd ones, which drop the
	// host suffix: each host holds only its own.
	CACert = KubeDir + "/ca.crt" // the cluster CA itself: the controller-manager signs CSRs with it
	CAKey  = KubeDir + "/ca.key"
	// CATrustCert is what trusts the cluster CA (--client-ca-file,
	// --kubelet-certificate-authority, --root-ca-file): the cluster CA's
	// trust bundle, both CAs during 'hardway rotate ca --which kubernetes'.
	CATrustCert           = KubeDir + "/ca-trust.crt"
	APIServerCert         = KubeDir + "/kube-apiserver.crt"
	APIServerKey          = KubeDir + "/kube-apiserver.key"
	KubeletClientCert     = KubeDir + "/apiserver-kubelet-client.crt"
	KubeletClientKey      = KubeDir + "/apiserver-kubelet-client.key"
	EtcdClientCert        = KubeDir + "/apiserver-etcd-client.crt"
	EtcdClientKey         = KubeDir + "/apiserver-etcd-client.key"
	EtcdTrustCert         = KubeDir + "/etcd-ca.crt" // what the apiserver trusts for etcd: the etcd trust bundle
	ServiceAccountKey     = KubeDir + "/service-account.key"
	ServiceAccountPub     = KubeDir + "/service-account.pub"
	FrontProxyCACert      = KubeDir + "/front-proxy-ca.crt"    // the CA itself: read by no component since the bundle (identity, state pull)
	FrontProxyTrustCert   = KubeDir + "/front-proxy-trust.crt" // --requestheader-client-ca-file: the front-proxy trust bundle
	FrontProxyClientCert  = KubeDir + "/front-proxy-client.crt"
	FrontProxyClientKey   = KubeDir + "/front-proxy-client.key"
	EncryptionConfig      = KubeDir + "/encryption-config.yaml"
	AuditPolicy           = KubeDir + "/audit-policy.yaml"
	AdmissionConfig       = KubeDir + "/admission-config.yaml" // the PodSecurity plugin's cluster default
	AdminKubeconfig       = KubeDir + "/admin.kubeconfig"
	ControllerManagerKube = KubeDir + "/kube-controller-manager.kubeconfig"
	SchedulerKube         = KubeDir + "/kube-scheduler.kubeconfig"
	SchedulerConfig       = ConfigDir + "/kube-scheduler.yaml"
	AuditLog              = AuditLogDir + "/audit.log"

	// EtcdJoinEnv is written by 'hardway up' only on a host that joins an
	// existing cluster as a replacement member: it sets
	// ETCD_INITIAL_CLUSTER_STATE=existing. The unit reads it if present (no
	// --initial-cluster-state flag, so the default "new" bootstraps a fresh
	// cluster); etcd ignores it once the data dir holds a member.
	EtcdJoinEnv = EtcdDir + "/join.env"

	// EtcdCACert is what etcd trusts (the etcd trust bundle: the etcd CA,
	// both CAs during a rotation, the cluster CA in a cluster made before
	// the etcd CA). EtcdOwnCACert and EtcdOwnCAKey are the etcd CA itself,
	// read by no component: kept on the control-plane hosts, as kubeadm
	// does, for 'hardway state pull'.
	EtcdCACert     = EtcdDir + "/ca.crt"
	EtcdOwnCACert  = EtcdDir + "/etcd-ca.crt"
	EtcdOwnCAKey   = EtcdDir + "/etcd-ca.key"
	EtcdServerCert = EtcdDir + "/etcd-server.crt" // from etcd-server-<host>.crt
	EtcdServerKey  = EtcdDir + "/etcd-server.key"
	EtcdPeerCert   = EtcdDir + "/etcd-peer.crt" // from etcd-peer-<host>.crt
	EtcdPeerKey    = EtcdDir + "/etcd-peer.key"
	// etcd runs as the system user etcd (the CIS benchmark's 1.1.12 asks
	// its data directory be etcd:etcd); systemd-sysusers makes the user
	// from this file. Its certificates and keys stay root's (0600, 1.1.19,
	// 1.1.21): systemd hands the process copies (LoadCredential=).
	EtcdUser         = "etcd"
	EtcdSysusersConf = "/etc/sysusers.d/hardway-etcd.conf"
	// EtcdUserGECOS is the user's description in the sysusers file: a user
	// etcd with it is the one hardway made ('hardway reset' removes only
	// that one; systemd-sysusers leaves a user that exists alone).
	EtcdUserGECOS = "etcd (hardway)"

	// Owner of every file hardway writes: the components read them as root,
	// or (etcd) get copies from systemd, which reads them as root.
	Owner = "root:root"
)

// FrontProxyCAKey is read by no component: it is on every control-plane
// host, as kubeadm keeps it, so that 'hardway state pull' can rebuild a lost
// state directory from one.
const FrontProxyCAKey = KubeDir + "/front-proxy-ca.key"

// Where things live on a worker.
const (
	SbinDir       = "/usr/local/sbin" // runc, where containerd's docs put it
	CNIBinDir     = "/opt/cni/bin"    // CNI plugins: containerd's default bin dir
	CNIConfDir    = "/etc/cni/net.d"  // CNI configs: containerd's default conf dir
	ContainerdDir = "/etc/containerd"
	KubeletDir    = "/var/lib/kubelet"    // kubelet's root dir; its certs and kubeconfig, as in the tutorial
	KubeProxyDir  = "/var/lib/kube-proxy" // kube-proxy's kubeconfig
	// ImageDir holds image tarballs (docker-archive) for hosts that cannot
	// pull: 'hardway up' imports them into containerd.
	ImageDir = HardwayDataDir + "/images"
	// CertsDir is containerd's registry hosts directory (config_path), with
	// registries: only: one <registry>/hosts.toml each (registries.go).
	CertsDir = ContainerdDir + "/certs.d"

	ContainerdConfig  = ContainerdDir + "/config.toml"
	ContainerdSocket  = ContainerdStateDir + "/containerd.sock"
	CrictlConfig      = "/etc/crictl.yaml"
	KubeletConfig     = ConfigDir + "/kubelet.yaml"
	KubeletKubeconfig = KubeletDir + "/kubeconfig"
	KubeletCert       = KubeletDir + "/kubelet.crt" // from kubelet-<host>.crt
	KubeletKey        = KubeletDir + "/kubelet.key"
	KubeletCACert     = KubeletDir + "/ca.crt"
	// KubeletResolvConf is the kubelet's resolvConf: a link the host step
	// points at /etc/resolv.conf, or at systemd-resolved's real list when
	// /etc/resolv.conf is its stub (127.0.0.53, which answers on the host
	// only: CoreDNS would forward to itself).
	KubeletResolvConf   = KubeletDir + "/resolv.conf"
	KubeProxyKubeconfig = KubeProxyDir + "/kubeconfig"
	ModulesLoadConf     = "/etc/modules-load.d/hardway-kubernetes.conf" // loaded at every boot by systemd-modules-load
	SysctlConf          = "/etc/sysctl.d/99-hardway-kubernetes.conf"    // applied at every boot by systemd-sysctl
	BridgeConflist      = CNIConfDir + "/10-bridge.conflist"
	// CNIBridge is the Linux bridge of hardway's CNI config: the pods' gateway.
	CNIBridge = "cni0"
)

// What the services write while they run (a component's State: 'hardway
// reset' removes each with everything in it). Not pushed: the components
// and systemd make them.
const (
	// HardwayDataDir is hardway's own directory on every host: restart
	// markers, the stat cache of pushed files, image tarballs, a restore's
	// snapshot.
	HardwayDataDir = "/var/lib/hardway"
	// ContainerdRootDir and ContainerdStateDir are containerd's root
	// (images, snapshots, containers) and state (sockets, the shims' and
	// sandboxes' runtime files, their shm mounts) in its config.
	ContainerdRootDir  = "/var/lib/containerd"
	ContainerdStateDir = "/run/containerd"
	// ContainerdOptDir is what containerd's opt plugin makes at start
	// (its default path).
	ContainerdOptDir = "/opt/containerd"
	// CNINetworkDir is the host-local IPAM state of the bridge CNI's
	// network (named "bridge" in its conflist): the pods' addresses.
	CNINetworkDir = "/var/lib/cni/networks/bridge"
	// CNIResultsDir is libcni's cache of each pod's CNI results, which
	// containerd's CRI keeps to tear a pod's network down.
	CNIResultsDir = "/var/lib/cni/results"
	// PodLogsDir and ContainerLogsDir are the kubelet's containers' logs
	// (its podLogsDir default) and their links by container name.
	PodLogsDir       = "/var/log/pods"
	ContainerLogsDir = "/var/log/containers"
)

// File modes. Keys, kubeconfigs (they embed a client key) and the
// encryption config (it holds the data key) are secrets. Units and
// rendered configs hold none, but only root (systemd, the components)
// reads them, and the CIS benchmark asks 0600 of each (the components'
// "pod specifications" 1.1.1-1.1.7, the kubelet's unit and config 4.1.1,
// 4.1.9, the CNI config 1.1.9): only certificates and binaries are 0644
// and 0755.
const (
	ModeSecret fs.FileMode = 0o600
	ModeUnit   fs.FileMode = 0o600
	ModeConfig fs.FileMode = 0o600
	ModePublic fs.FileMode = 0o644
	ModeExec   fs.FileMode = 0o755
	ModeDir    fs.FileMode = 0o755
	ModePriv   fs.FileMode = 0o700
)

// CredentialDir is where systemd puts a unit's LoadCredential= copies
// ($CREDENTIALS_DIRECTORY, systemd.exec(5)).
func CredentialDir(unit string) string { return "/run/credentials/" + unit }

// Unit file and binary of a component.
func UnitPath(component string) string { return UnitDir + "/" + component + ".service" }
func BinPath(name string) string       { return BinDir + "/" + name }
