package pki

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
)

// Kubeconfig describes one kubeconfig file hardway writes.
type Kubeconfig struct {
	Name   string // <state>/kubeconfigs/<Name>.kubeconfig
	Cert   string // the table entry whose certificate and key it embeds
	User   string // the user entry's name: the certificate's CN
	Server string
}

// LocalAPIServerURL is the apiserver on the same host: the controller-manager
// and the scheduler talk to it directly, so they keep working while a load
// balancer in front of the apiservers does not.
const LocalAPIServerURL = "https://127.0.0.1:6443"

// Kubeconfigs lists the kubeconfigs for inv.
func Kubeconfigs(inv *inventory.Inventory) []Kubeconfig {
	ks := []Kubeconfig{
		{Name: "admin", Cert: "admin", User: "admin", Server: inv.APIServerURL()},
		{Name: "kube-controller-manager", Cert: "kube-controller-manager", User: "system:kube-controller-manager", Server: LocalAPIServerURL},
		{Name: "kube-scheduler", Cert: "kube-scheduler", User: "system:kube-scheduler", Server: LocalAPIServerURL},
		// Workers' components: through the node-local load balancer when
		// the inventory has one (network.apiServerLoadBalancer).
		{Name: "kube-proxy", Cert: "kube-proxy", User: "system:kube-proxy", Server: inv.WorkerAPIServerURL()},
	}
	for _, w := range inv.Workers {
		ks = append(ks, Kubeconfig{Name: w.Name, Cert: "kubelet-" + w.Name, User: "system:node:" + w.Name, Server: inv.WorkerAPIServerURL()})
	}
	return ks
}

// RenderKubeconfig builds k's file from the cluster CA's trust bundle and
// the certificate and key in dir, all embedded so the file works wherever
// it is copied. The bundle, not the CA: during a rotation of the cluster CA
// it holds the old and the new CA, so that every client trusts the
// apiservers' serving certificates before and after they are reissued.
func RenderKubeconfig(inv *inventory.Inventory, dir state.Dir, k Kubeconfig) ([]byte, error) {
	ca, err := os.ReadFile(dir.Cert(CATrustBundle))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.Name, err)
	}
	cert, err := os.ReadFile(dir.Cert(k.Cert))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.Name, err)
	}
	key, err := os.ReadFile(dir.Key(k.Cert))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.Name, err)
	}
	const context = "default"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[inv.Cluster] = &clientcmdapi.Cluster{Server: k.Server, CertificateAuthorityData: ca}
	cfg.AuthInfos[k.User] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[context] = &clientcmdapi.Context{Cluster: inv.Cluster, AuthInfo: k.User}
	cfg.CurrentContext = context
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", k.Name, err)
	}
	return data, nil
}

// ensureKubeconfigs writes each kubeconfig only when its content would
// change, so a rerun leaves every byte (and every mtime) alone.
func ensureKubeconfigs(inv *inventory.Inventory, dir state.Dir) ([]Result, error) {
	var out []Result
	for _, k := range Kubeconfigs(inv) {
		path := dir.Kubeconfig(k.Name)
		res := Result{Name: k.Name, Kind: KindKubeconfig, CN: k.User, Path: path, Status: Reused}
		data, err := RenderKubeconfig(inv, dir, k)
		if err != nil {
			return nil, err
		}
		if !fsutil.SameContent(path, data) {
			res.Status = Created
			if _, err := os.Stat(path); err == nil {
				res.Status, res.Reason = Updated, "certificate or server changed"
			}
			if err := fsutil.WriteFile(path, data, 0o600); err != nil {
				return nil, err
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// StaleKubeconfigs names the kubeconfigs in dir that differ from what
// RenderKubeconfig makes now (a CA rotation rewrote the trust bundle, or
// reissued the certificates they embed); missing ones count. It only reads.
func StaleKubeconfigs(inv *inventory.Inventory, dir state.Dir) ([]string, error) {
	var out []string
	for _, k := range Kubeconfigs(inv) {
		data, err := RenderKubeconfig(inv, dir, k)
		if err != nil {
			return nil, err
		}
		if !fsutil.SameContent(dir.Kubeconfig(k.Name), data) {
			out = append(out, k.Name)
		}
	}
	return out, nil
}

// WriteKubeconfigs rewrites the kubeconfigs that StaleKubeconfigs names.
func WriteKubeconfigs(inv *inventory.Inventory, dir state.Dir) error {
	_, err := ensureKubeconfigs(inv, dir)
	return err
}
