package kube

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/hardway/hardway/pkg/fsutil"
)

// MergeKubeconfig merges the kubeconfig at src into the user's kubeconfig
// ($KUBECONFIG's first file or ~/.kube/config) and makes it current. The
// result is written atomically, 0600.
func MergeKubeconfig(src string) (string, error) {
	in, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", src, err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	dst := rules.GetDefaultFilename()
	cur, err := rules.Load()
	if err != nil {
		return "", fmt.Errorf("read %s: %w", dst, err)
	}
	for k, v := range in.Clusters {
		cur.Clusters[k] = v
	}
	for k, v := range in.AuthInfos {
		cur.AuthInfos[k] = v
	}
	for k, v := range in.Contexts {
		cur.Contexts[k] = v
	}
	cur.CurrentContext = in.CurrentContext
	b, err := clientcmd.Write(*cur)
	if err != nil {
		return "", err
	}
	if err := fsutil.WriteFile(filepath.Clean(dst), b, 0o600); err != nil {
		return "", err
	}
	return dst, nil
}
