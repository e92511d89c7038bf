package lab

import (
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/hardway/hardway/pkg/fsutil"
)

// Files the lab writes into its directory. The key stays across runs; the
// others describe one running lab and go away with `lab down`.
const (
	IdentityFile   = "id_ed25519"
	KnownHostsFile = "known_hosts"
	SSHConfigFile  = "ssh_config"
	InventoryFile  = "inventory.yaml"
)

// writeKeyPair writes an OpenSSH private key (0600) and its .pub (0644).
func writeKeyPair(path string, priv ed25519.PrivateKey, comment string) error {
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return err
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		return err
	}
	if err := fsutil.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " " + comment + "\n"
	return fsutil.WriteFile(path+".pub", []byte(line), 0o644)
}

// writeClientFiles writes known_hosts (the hosts' real keys), an ssh_config
// for plain `ssh -F lab/ssh_config controller-1`, and the inventory.
func (l *Lab) writeClientFiles(st *state, key ed25519.PrivateKey, hostKeys map[string]ssh.PublicKey) (*Result, error) {
	dir := st.LabDir
	res := &Result{
		Inventory:  filepath.Join(dir, InventoryFile),
		SSHConfig:  filepath.Join(dir, SSHConfigFile),
		KnownHosts: filepath.Join(dir, KnownHostsFile),
		Identity:   filepath.Join(dir, IdentityFile),
	}
	if l.cfg.ServeMirror {
		res.MirrorURL, res.Bridge = l.MirrorURL(), bridgeAddr(l.net).String()
		res.MirrorLog = filepath.Join(l.stateDir(), MirrorLogFile)
	}
	var kh, cfg strings.Builder
	for _, h := range st.Hosts {
		if h.worker() {
			res.Workers = append(res.Workers, Host{Name: h.Name, Address: h.Address})
		} else {
			res.Hosts = append(res.Hosts, Host{Name: h.Name, Address: h.Address})
		}
		fmt.Fprintf(&kh, "%s,%s %s", h.Address, h.Name, ssh.MarshalAuthorizedKey(hostKeys[h.Name]))
		fmt.Fprintf(&cfg, "Host %s %s\n  HostName %s\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n"+
			"  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n\n",
			h.Name, h.Address, h.Address, res.Identity, res.KnownHosts)
	}
	for _, f := range []struct{ path, data string }{
		{res.KnownHosts, kh.String()},
		{res.SSHConfig, cfg.String()},
		{res.Inventory, renderInventory(l.cfg, res.MirrorURL, res.Hosts, res.Workers)},
	} {
		if err := fsutil.WriteFile(f.path, []byte(f.data), 0o644); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// mirrorReleases are the inventory's releases.* keys and the directory of the
// release mirror (hack/mirror/build.sh) laid out like each official download
// site: every release comes from the mirror, nothing from the internet.
var mirrorReleases = []struct{ key, dir string }{
	{"kubernetes", "kubernetes"},
	{"etcd", "etcd"},
	{"containerd", "containerd"},
	{"runc", "runc"},
	{"cniPlugins", "cni-plugins"},
	{"crictl", "crictl"},
	{"traefik", "traefik"}, // the workers' node-local apiserver load balancer
}

// mirrorImages are the images the mirror builds (hack/mirror/build.sh, with
// their SHA256SUMS beside them) that every worker imports, for a lab has no
// registry: the pause image containerd's sandboxes run, CoreDNS, and the
// small test server.
var mirrorImages = []struct{ name, file string }{
	{"registry.k8s.io/pause:3.10.2", "pause-3.10.2.tar"},
	{"registry.k8s.io/coredns/coredns:v1.14.7", "coredns-v1.14.7.tar"},
	{"hardway.local/hello:v1", "hello-v1.tar"},
}

// renderInventory writes the inventory for `hardway up -i lab/inventory.yaml`.
// Paths in it are relative to the inventory file, so the lab dir can move.
// With cfg.FetchOnHosts the releases and images are on the lab's mirror
// server at mirrorURL and the hosts download them (releases.fetchOn: hosts).
func renderInventory(cfg Config, mirrorURL string, hosts, workers []Host) string {
	base := "file://" + cfg.Mirror
	if cfg.FetchOnHosts {
		base = mirrorURL
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by 'hardway lab up' for the lab hosts (prefix %s); 'hardway lab down' removes it.
cluster: lab
kubernetesVersion: %s
etcdVersion: %s
arch: %s
ssh:
  user: root
  port: 22
  identityFile: %s
  knownHostsFile: %s
network:
  serviceCIDR: %s
releases:
`, cfg.Prefix, cfg.KubernetesVersion, cfg.EtcdVersion, runtime.GOARCH, IdentityFile, KnownHostsFile, ServiceCIDR)
	for _, r := range mirrorReleases {
		fmt.Fprintf(&b, "  %s: %s/%s\n", r.key, base, r.dir)
	}
	if cfg.FetchOnHosts {
		// The mirror server is plain http inside the lab's own network;
		// the hosts check every file against hardway.lock all the same.
		b.WriteString("  allowHTTP: true\n  fetchOn: hosts\n")
	}
	b.WriteString("controlPlane:\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  - name: %s\n    address: %s\n", h.Name, h.Address)
	}
	if len(workers) == 0 {
		return b.String()
	}
	// containerHost: a worker is a container on a cgroup v1 machine; it turns
	// on the settings only such a host needs (failCgroupV1: false, containerd's
	// restrict_oom_score_adj, runc's NoNewKeyring, kube-proxy's conntrack.maxPerCore: 0, the kubelet's
	// disk thresholds in absolute sizes).
	b.WriteString("workers:\n")
	for _, h := range workers {
		fmt.Fprintf(&b, "  - name: %s\n    address: %s\n    containerHost: true\n", h.Name, h.Address)
	}
	// checksums: the mirror's SHA256SUMS beside each tarball
	b.WriteString("images:\n")
	for _, im := range mirrorImages {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s/images/%s\n", im.name, base, im.file)
	}
	return b.String()
}
