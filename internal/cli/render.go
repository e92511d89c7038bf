package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newRenderCmd() *cobra.Command {
	var out, host string
	var explain bool
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Write the systemd units and configs each control-plane host gets",
		Long: `render writes exactly what 'hardway up' pushes to each control-plane host:
the systemd units of etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, the scheduler config and the audit policy, laid out as on the
host (DIR/<host>/etc/systemd/system/...). DIR/<host>.manifest lists every file
the host gets with its mode, owner and origin; certificates, keys, kubeconfigs
and binaries are only named there, never copied into DIR.

Without --out, the rendered files are printed. --explain prints every flag
with one line of why it is there.`,
		Example: `  hardway render -i inventory.yaml --out rendered
  hardway render -i inventory.yaml --explain --host controller-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			ms, err := units.Render(inv)
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
			if out != "" {
				if err := units.WriteTree(out, ms); err != nil {
					return err
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
	for _, h := range inv.ControlPlane {
		names = append(names, h.Name)
	}
	return nil, usererr.WithCode(fmt.Errorf("render: %q is not a control-plane host", host), usererr.CodeUsage,
		fmt.Sprintf("pick one of: %v", names))
}
