package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/pki"
)

// newPKICmd is `certs generate`; `pki` is its earlier spelling, kept as a
// hidden alias (one noun per subject: certs).
func (a *App) newPKICmd() *cobra.Command {
	var replaceCA []string
	var newSA, newEnc bool
	var output string
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Create or reuse the certificates, keys, encryption config and kubeconfigs",
		Long: `certs generate fills the state directory (default .hardway next to the inventory):

  pki/<name>.crt, pki/<name>.key   the CAs (ca, front-proxy-ca, etcd-ca) and every certificate they sign
  pki/service-account.key|.pub      the key pair service-account tokens are signed with
  encryption-config.yaml            the apiserver's key for secrets at rest
  kubeconfigs/<name>.kubeconfig     admin, kube-controller-manager, kube-scheduler, kube-proxy, one per worker

Files already there are checked (chain, key, subject, usages, SANs, validity)
and reused byte for byte. A certificate is reissued from the same CA when its
SANs no longer match the inventory, when it is broken, or when it is inside its
renewal window: the last third of its lifetime, at least the last 30 days (but
never more than half of it). Each line says created, reused or reissued, and why.

The cluster's identity is never made anew by itself: when the state directory
already holds anything, a missing CA, service-account key or encryption config
is an error, not a new one. It was lost, and the hosts still have it:
'hardway state pull HOST' brings it back. To start anew on purpose:
--replace-ca makes a new CA (every certificate it signed is reissued and must
reach every host), --new-service-account-key a new key pair (every token the
cluster issued becomes invalid), --new-encryption-key a new encryption config
(every Secret stored in etcd becomes unreadable).

The state directory holds the CA keys and the encryption key: back it up, keep
it private (hardway writes it 0700, keys 0600), never commit it. certs generate, up,
state pull and the daemon's repairs lock it (<state>/lock): a second one waits
up to 10s, then names the PID and command holding it.`,
		Example: `  hardway certs generate -i inventory.yaml
  hardway certs generate -i inventory.yaml --state /secure/cluster-state -o json
  hardway certs generate -i inventory.yaml --replace-ca=front-proxy-ca`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			inv, dir, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			rs, err := pki.Generate(cmd.Context(), inv, dir, pki.Options{ReplaceCA: replaceCA,
				NewServiceAccountKey: newSA, NewEncryptionKey: newEnc})
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					State   string       `json:"state"`
					Results []pki.Result `json:"results"`
				}{string(dir), rs})
			}
			printPKIResults(a.Stdout, rs)
			counts := map[pki.Status]int{}
			for _, r := range rs {
				counts[r.Status]++
			}
			var parts []string
			for _, s := range []pki.Status{pki.Created, pki.Reused, pki.Reissued, pki.Replaced, pki.Updated} {
				if counts[s] > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
				}
			}
			fmt.Fprintf(a.Stdout, "\n[pki] %s: %s. Back it up: it holds the CA and encryption keys.\n",
				dir, strings.Join(parts, ", "))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&replaceCA, "replace-ca", nil,
		"make a new CA on purpose: ca, front-proxy-ca, or all (the default without a value)")
	cmd.Flags().Lookup("replace-ca").NoOptDefVal = "all"
	cmd.Flags().BoolVar(&newSA, "new-service-account-key", false,
		"make a missing service-account key pair although other state exists (invalidates every token)")
	cmd.Flags().BoolVar(&newEnc, "new-encryption-key", false,
		"make a missing encryption config although other state exists (stored Secrets become unreadable)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func checkOutputFlag(output string) error {
	if output != "text" && output != "json" {
		return usageError{fmt.Errorf("--output %q: use text or json", output)}
	}
	return nil
}

func printPKIResults(w io.Writer, rs []pki.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCN\tSANS\tEXPIRES\tSTATUS")
	var notes []string
	for _, r := range rs {
		status := string(r.Status)
		if r.Reason != "" {
			status += ": " + r.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, dash(r.CN), dash(shortSANs(r.SANs)),
			dash(date(r.NotAfter)), status)
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("note: %s: %s", r.Name, r.Note))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
}

// shortSANs keeps a table line readable: the apiserver alone has a dozen.
func shortSANs(s []string) string {
	const keep = 3
	if len(s) <= keep {
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("%s,… (+%d)", strings.Join(s[:keep], ","), len(s)-keep)
}

func date(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.DateOnly)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
