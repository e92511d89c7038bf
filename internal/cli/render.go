package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/addons"
	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/podnet"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newRenderCmd() *cobra.Command {
	var out, host string
	var explain bool
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write the systemd units and configs each host gets",
		Long: `render writes exactly what 'hardway up' pushes to each host. Control-plane
hosts: the systemd units of etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, the scheduler config and the audit policy. Workers: the units
of containerd, kubelet and kube-proxy, containerd's config.toml, the kubelet's
KubeletConfiguration and, with network.cni bridge (the default), the bridge
CNI config with the worker's own pod subnet. Every host gets
hardway-pod-routes.service: a route to each other worker's pod subnet.
Everything is laid out as on the host (DIR/<host>/etc/systemd/system/...).
DIR/<host>.manifest lists every file the host gets with its mode, owner and
origin; certificates, keys, kubeconfigs and binaries are only named there,
never copied into DIR.

Pod subnets come from the state directory (pod-subnets.yaml); a worker not
there yet is shown with the subnet 'hardway up' would give it (render writes
nothing). Settings only a container needs (failCgroupV1, containerd's
restrict_oom_score_adj, runc's NoNewKeyring, kube-proxy's
--conntrack-max-per-core) appear only for hosts with containerHost: true.

With workers, the CoreDNS add-on 'hardway up' applies is DIR/coredns.yaml
(from templates/coredns.yaml.tmpl).

Without --out, the rendered files are printed. --explain prints every flag
and config setting with one line of why it is there.`,
		Example: `  hardway render -i inventory.yaml --out rendered
  hardway render -i inventory.yaml --explain --host controller-1
  hardway render -i inventory.yaml --explain --host worker-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			// Reads the state's pod subnets and allocates new workers in
			// memory; only 'hardway up' writes the allocation.
			pods, _, err := podnet.ForInventory(a.stateDir(inv), inv)
			if err != nil {
				return err
			}
			ms, err := units.Render(inv, pods)
			if err != nil {
				return err
			}
			if host != "" {
				ms, err = onlyHost(inv, ms, host)
				if err != nil {
					return err
				}
			}
			if explain {
				if err := units.Explain(a.Stdout, ms); err != nil {
					return err
				}
			}
			var dns []byte
			if len(inv.Workers) > 0 && host == "" {
				if dns, _, err = addons.CoreDNS(addons.CoreDNSFor(inv)); err != nil {
					return err
				}
			}
			if out != "" {
				if err := units.WriteTree(out, ms); err != nil {
					return err
				}
				if dns != nil {
					if err := fsutil.WriteFile(filepath.Join(out, "coredns.yaml"), dns, 0o644); err != nil {
						return err
					}
				}
				fmt.Fprintf(a.Stderr, "[render] wrote %d host(s) to %s (see %s/<host>.manifest)\n", len(ms), out, out)
				return nil
			}
			if !explain {
				for _, m := range ms {
					for _, f := range m.Files {
						if f.Source == nil {
							fmt.Fprintf(a.Stdout, "==> %s:%s <==\n%s\n", m.Host, f.Path, f.Content)
						}
					}
				}
				if dns != nil {
					fmt.Fprintf(a.Stdout, "==> coredns.yaml (applied by 'hardway up') <==\n%s\n", dns)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the per-host tree to this directory")
	cmd.Flags().BoolVar(&explain, "explain", false, "print each flag with the reason it is set")
	cmd.Flags().StringVar(&host, "host", "", "only this control-plane host")
	return cmd
}

func onlyHost(inv *inventory.Inventory, ms []units.Manifest, host string) ([]units.Manifest, error) {
	for _, m := range ms {
		if m.Host == host {
			return []units.Manifest{m}, nil
		}
	}
	var names []string
	for _, h := range inv.Hosts() {
		names = append(names, h.Name)
	}
	return nil, usererr.WithCode(fmt.Errorf("render: %q is not a host of the inventory", host), usererr.CodeUsage,
		fmt.Sprintf("pick one of: %v", names))
}
