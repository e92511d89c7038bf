package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/plan"
)

// kubeletClientCN is the subject the RBAC binding must name.
func (c *Cluster) kubeletClientCN() (string, error) {
	cert, err := tls.LoadX509KeyPair(c.opt.State.Cert("apiserver-kubelet-client"), c.opt.State.Key("apiserver-kubelet-client"))
	if err != nil {
		return "", fmt.Errorf("apiserver-kubelet-client certificate: %w", err)
	}
	x, err := parseLeaf(cert)
	if err != nil {
		return "", err
	}
	return x.Subject.CommonName, nil
}

func (c *Cluster) planRBAC(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	cn, err := c.kubeletClientCN()
	if err != nil {
		return nil, err
	}
	cs, err := c.kubeClient()
	if err != nil {
		return nil, err
	}
	diffs, err := kube.RBACState(ctx, cs, cn)
	if err != nil {
		return nil, err
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	return []plan.Action{{Kind: plan.Apply, Desc: "apply ClusterRole " + kube.KubeletAPIRole + " and ClusterRoleBinding " + kube.KubeletAPIBinding + " (subject User " + cn + ")",
		Diff: strings.Join(diffs, "\n"),
		Do:   func(ctx context.Context) error { return kube.ApplyRBAC(ctx, cs, cn) }}}, nil
}
