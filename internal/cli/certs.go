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
		Short: "The certificates in the state directory: generate them, check them, renew them without downtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.newPKICmd(), a.newCertsCheckCmd(), a.newCertsRenewCmd())
	return cmd
}

func (a *App) newCertsRenewCmd() *cobra.Command {
	var o upOptions
	var all bool
	cmd := &cobra.Command{
		Use:   "renew [--all | NAME...]",
		Short: "Reissue leaf certificates from the existing CAs and roll them out without downtime",
		Long: `renew reissues the named leaf certificates (or all of them with --all) from
the existing CAs, now, and rolls them out:

  renew          new key and certificate for each, same subject and SANs;
                 the kubeconfigs that embed one are rewritten
  push           only their files (certificate, key, kubeconfigs), atomically
  etcd           members restarted one at a time, each only while every other
                 member is healthy, and waited for: etcd keeps its quorum
  control-plane  apiserver, controller-manager, scheduler, host by host, each
                 waiting for /readyz or /healthz before the next: an
                 apiserver answers at every moment
  rbac           the binding that lets the apiserver reach the kubelets by
                 its certificate's CN (read; applied only when it differs)
  workers        kubelet and kube-proxy, one worker at a time, each waiting
                 for its Node to be Ready

Only the services that read a renewed file restart; nothing else is pushed.
A NAME is an entry of 'hardway certs check' (etcd-server-controller-1) or a
row for all its hosts (etcd-server). CAs are not leaves: renew never makes
or replaces one. 'hardway up' already reissues a leaf inside its renewal
window; renew is for doing it now (a key that leaked, a maintenance window,
a certificate verify or the daemon names).

With --dry-run it prints the plan — which certificates, which files on
which hosts, which restarts in which order — and changes nothing.`,
		Example: `  hardway certs renew -i inventory.yaml --all --dry-run
  hardway certs renew -i inventory.yaml kube-apiserver
  hardway certs renew -i inventory.yaml etcd-server etcd-peer`,
		RunE: func(cmd *cobra.Command, names []string) error {
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			leaves, err := pki.ResolveLeaves(inv, names, all)
			if err != nil {
				return err
			}
			for _, e := range leaves {
				o.renew = append(o.renew, e.Name)
			}
			// A renewal never downloads: the binaries on the hosts are
			// compared with the cache only where a step needs them.
			o.offline = true
			return a.runUp(cmd.Context(), inv, st, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "renew every leaf certificate of the table")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	f.BoolVar(&o.acceptNewHostKeys, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway); never written")
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
  - signed by its CA: front-proxy-client by front-proxy-ca; etcd's server and
    peer certificates and the apiservers' etcd client certificate by etcd-ca
    (by ca in a state directory made before etcd had a CA of its own); the
    rest by ca
  - CN, O and key usages as the table says
  - SANs covering the inventory (every host name and address it should name)
  - not expired; inside the renewal window (the last third of its lifetime,
    at least the last 30 days) is a warning

and also the service-account key pair, the encryption config (a key that is
not base64 of the right length is an error with its file:line) and the
kubeconfigs (embedding the current certificates).

Exit status 1 when anything is missing, expired, broken or not covering;
warnings alone exit 0. 'hardway certs generate' fixes everything but a CA problem;
'hardway certs renew NAME' reissues a leaf now and rolls it out to the hosts.`,
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
				hint := fmt.Sprintf("to create or reissue them, run: hardway certs generate -i %s (a CA problem needs your backup or --replace-ca)", usererr.Quote(a.InventoryPath))
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
