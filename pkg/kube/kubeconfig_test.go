package kube

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Merging keeps the user's other contexts, makes the cluster's current and
// writes the file 0600.
func TestMergeKubeconfig(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "config")
	mine := clientcmdapi.NewConfig()
	mine.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://other:6443"}
	mine.Contexts["other"] = &clientcmdapi.Context{Cluster: "other"}
	mine.CurrentContext = "other"
	if err := clientcmd.WriteToFile(*mine, dst); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "admin.kubeconfig")
	admin := clientcmdapi.NewConfig()
	admin.Clusters["hardway"] = &clientcmdapi.Cluster{Server: "https://10.240.0.11:6443"}
	admin.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	admin.Contexts["hardway"] = &clientcmdapi.Context{Cluster: "hardway", AuthInfo: "admin"}
	admin.CurrentContext = "hardway"
	if err := clientcmd.WriteToFile(*admin, src); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", dst)
	got, err := MergeKubeconfig(src)
	if err != nil || got != dst {
		t.Fatalf("%q %v", got, err)
	}
	merged, err := clientcmd.LoadFromFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if merged.CurrentContext != "hardway" || merged.Contexts["other"] == nil || merged.Clusters["hardway"] == nil {
		t.Fatalf("merged: current %q, contexts %v", merged.CurrentContext, merged.Contexts)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
}
