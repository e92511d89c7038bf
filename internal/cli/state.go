package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newStateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "The state directory: rebuild it from the hosts",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(a.newStatePullCmd())
	return cmd
}

func (a *App) newStatePullCmd() *cobra.Command {
	var o cluster.PullOptions
	var output string
	var acceptNew bool
	cmd := &cobra.Command{
		Use:   "pull HOST",
		Short: "Rebuild a lost state directory from the hosts",
		Long: `state pull rebuilds the state directory (.hardway, or --state) from the hosts,
which hold a copy of everything hardway pushed from it:

  the cluster's identity, from the control-plane host HOST:
    pki/ca.crt|key, pki/front-proxy-ca.crt|key    the two CAs with their keys
    pki/service-account.key|pub                    the token signing key pair
    encryption-config.yaml                         with every key it holds
  every other pushed file, from every host that holds it (copies must agree):
    leaf certificates and keys, kubeconfigs; the client certificates of admin,
    kube-controller-manager and kube-scheduler out of their kubeconfigs

What no host holds (kube-proxy's certificate without workers, the files of a
host that cannot be reached) is then issued from the pulled CA, as 'hardway
pki' would. Afterwards 'hardway up' on the converged cluster says "no changes".

Nothing is written before every host was read. Writes are atomic, keys and
kubeconfigs 0600, directories 0700, and no secret is ever printed. A local file
that differs from the hosts' copy is left alone and named: --force replaces
it. The state directory is locked while it runs.`,
		Example: `  mv .hardway .hardway.broken   # or: a fresh clone of the repository with the inventory
  hardway state pull -i inventory.yaml controller-1
  hardway up -i inventory.yaml  # no changes`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			// HOST as the operand; --from, its earlier spelling, still works.
			switch {
			case len(args) == 1 && o.From != "" && o.From != args[0]:
				return usageError{usererr.Errorf("name the host once: hardway state pull "+args[0], "two hosts to take the identity from: %s and --from %s", args[0], o.From)}
			case len(args) == 1:
				o.From = args[0]
			case o.From == "":
				return usageError{usererr.Errorf("name the control-plane host to take the cluster's identity from: hardway state pull controller-1", "state pull needs a HOST")}
			}
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			c := cluster.New(inv, cluster.Options{State: st, AcceptNewHostKeys: acceptNew})
			defer c.Close()
			res, err := c.PullState(cmd.Context(), o)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tSTATUS\tFROM\tNOTE")
			for _, f := range res.Files {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Path, f.Status, dash(strings.Join(f.From, ",")), dash(f.Note))
			}
			tw.Flush()
			for _, u := range res.Unreachable {
				fmt.Fprintf(a.Stdout, "note: not reached: %s\n", u)
			}
			for _, n := range res.Notes {
				fmt.Fprintf(a.Stdout, "note: %s\n", n)
			}
			fmt.Fprintf(a.Stdout, "\n[state pull] %s: %d pulled, %d extracted, %d unchanged, %d issued, %d skipped; identity from %s.\n",
				st, res.Count(cluster.PullPulled), res.Count(cluster.PullExtracted), res.Count(cluster.PullUnchanged),
				res.Count(cluster.PullIssued), res.Count(cluster.PullSkipped), o.From)
			fmt.Fprintf(a.Stdout, "next: hardway up -i %s   (on a converged cluster: no changes). Back the directory up.\n", a.InventoryPath)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.From, "from", "", "the same as HOST (its earlier spelling)")
	_ = f.MarkHidden("from")
	f.BoolVar(&o.Force, "force", false, "replace local files that differ from the hosts' copies")
	f.BoolVar(&acceptNew, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.StringVarP(&output, "output", "o", "text", "text, or json: the summary as JSON (never a file's content)")
	return cmd
}
