package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newCertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Inspect the certificates in the state directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.newCertsCheckCmd())
	return cmd
}

func (a *App) newCertsCheckCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check expiry and SAN coverage of every certificate against the inventory",
		Long: `check reads the state directory, changes nothing, and checks every entry of the
certificate table like kubeadm's 'certs check-expiration', for the whole table:

  - present, readable, its key next to it and matching
  - signed by its CA (front-proxy-client by front-proxy-ca, the rest by ca)
  - CN, O and key usages as the table says
  - SANs covering the inventory (every host name and address it should name)
  - not expired; inside the renewal window (the last third of its lifetime,
    at least the last 30 days) is a warning

and also the service-account key pair, the encryption config (a key that is
not base64 of the right length is an error with its file:line) and the
kubeconfigs (embedding the current certificates).

Exit status 1 when anything is missing, expired, broken or not covering;
warnings alone exit 0. 'hardway pki' fixes everything but a CA problem.`,
		Example: `  hardway certs check -i inventory.yaml
  hardway certs check -i inventory.yaml -o json | jq '.[] | select(.status != "ok")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			dir := a.stateDir(inv)
			rs := pki.Check(inv, dir, time.Now())
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rs); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tKIND\tCN\tCA\tEXPIRES\tRESIDUAL\tSTATUS")
				for _, r := range rs {
					status := string(r.State)
					if len(r.Problems) > 0 {
						status += ": " + strings.Join(r.Problems, "; ")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, dash(r.CN), dash(r.CA),
						dash(date(r.NotAfter)), dash(r.Residual), status)
				}
				tw.Flush()
			}
			failed, warned := 0, 0
			for _, r := range rs {
				switch r.State {
				case pki.CheckFailed:
					failed++
				case pki.CheckWarning:
					warned++
				}
			}
			if failed > 0 {
				hint := fmt.Sprintf("run 'hardway pki -i %s' to create or reissue them; a CA problem needs your backup or --replace-ca", a.InventoryPath)
				if h := pki.CheckHint(inv, dir, pki.CheckResult{}); strings.Contains(h, "state pull") {
					hint = h
				}
				return usererr.Errorf(hint,
					"%s: %d of %d entries failed the check", dir, failed, len(rs))
			}
			if output == "text" {
				fmt.Fprintf(a.Stdout, "\n[certs] %s: %d entries ok, %d warnings\n", dir, len(rs)-warned, warned)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
