package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newEtcdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "etcd maintenance: status, defrag, compact, disarm",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(a.newEtcdStatusCmd(), a.newEtcdDefragCmd(), a.newEtcdCompactCmd(), a.newEtcdDisarmCmd())
	return cmd
}

func (a *App) newEtcdStatusCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One line per etcd member: version, DB size, in use, leader, raft index, alarms",
		Long: `status asks every control-plane host's etcd member for its status through the
SSH connection (no port needs to be open to this machine), with the apiserver's
etcd client certificate from the state directory.

  DB SIZE   the database file; IN USE  the part holding data. The difference is
            free pages that only a defragmentation gives back.
  LEADER    the member most members name as leader
  RAFT      raft index and term: members far behind the others are lagging
  QUOTA     --quota-backend-bytes: NOSPACE is raised when DB SIZE reaches it
  ALARMS    NOSPACE (the quota is full: etcd takes no more writes) or CORRUPT

It exits 1 when a member does not answer or raises an alarm.`,
		Example: `  hardway etcd status -i inventory.yaml
  hardway etcd status -i inventory.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			c := cluster.New(inv, cluster.Options{State: a.stateDir(inv)})
			defer c.Close()
			ms, err := c.EtcdStatus(cmd.Context())
			if err != nil {
				return usererr.New(err, "etcd status needs the state directory's CA and apiserver-etcd-client certificate: 'hardway state pull' if it was lost")
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(ms); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "MEMBER\tENDPOINT\tID\tVERSION\tDB SIZE\tIN USE\tQUOTA\tLEADER\tRAFT INDEX\tRAFT TERM\tALARMS")
				for _, m := range ms {
					if !m.Reachable {
						fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\tunreachable: %s\n", m.Name, m.Endpoint, firstLineOf(m.Error))
						continue
					}
					quota := "-" // etcd before 3.6 does not say
					if m.DBSizeQuota > 0 {
						quota = cluster.Bytes(m.DBSizeQuota)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d\t%s\n", m.Name, m.Endpoint, m.MemberID, m.Version,
						cluster.Bytes(m.DBSize), cluster.Bytes(m.DBSizeInUse), quota, m.Leader, m.RaftIndex, m.RaftTerm, dash(strings.Join(m.Alarms, ",")))
				}
				tw.Flush()
			}
			var bad []string
			for _, m := range ms {
				switch {
				case !m.Reachable:
					bad = append(bad, m.Name+" does not answer")
				case len(m.Alarms) > 0:
					bad = append(bad, m.Name+" raises "+strings.Join(m.Alarms, ","))
				}
			}
			if len(bad) > 0 {
				return usererr.New(errors.New("etcd: "+strings.Join(bad, "; ")),
					"'hardway verify' names the fix for each; 'journalctl -u etcd' on the host shows why")
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
