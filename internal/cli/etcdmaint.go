package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/state"
)

// maintenanceCluster loads the inventory — and, for a command that changes
// the cluster, takes the state directory's lock, so that an 'up' or a
// daemon repair never restarts etcd in the middle of a defragmentation.
func (a *App) maintenanceCluster(cmd *cobra.Command, dryRun bool, out io.Writer) (*cluster.Cluster, func(), error) {
	var inv *inventory.Inventory
	var st state.Dir
	unlock := func() {}
	if dryRun {
		var err error
		if inv, err = a.loadInventory(); err != nil {
			return nil, nil, err
		}
		st = a.stateDir(inv)
	} else {
		i, s, lock, err := a.loadLocked(cmd)
		if err != nil {
			return nil, nil, err
		}
		inv, st, unlock = i, s, func() { lock.Unlock() }
	}
	c := cluster.New(inv, cluster.Options{State: st, Out: out})
	return c, func() { c.Close(); unlock() }, nil
}

type defragFlags struct {
	threshold float64
	minFree   string
	all       bool
	dryRun    bool
	wait      time.Duration
	output    string
}

// defragResult is 'hardway etcd defrag -o json'.
type defragResult struct {
	DryRun  bool                   `json:"dryRun"`
	Members []cluster.DefragMember `json:"members"`
	Actions []plan.Done            `json:"actions"`
}

func (a *App) newEtcdDefragCmd() *cobra.Command {
	var f defragFlags
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment etcd members one at a time, followers first, the leader last",
		Long: `defrag gives back the free pages of each etcd member's database file (DB SIZE
minus IN USE in 'hardway etcd status'): after a compaction, deleted and
overwritten keys leave free pages that only a defragmentation returns to the
disk, and etcd's quota (--quota-backend-bytes, NOSPACE) counts the file.

A member answers nothing while it rewrites its file, so defrag never does
two at once:
  1. it refuses unless every member is healthy and every apiserver ready;
  2. it defragments the followers one at a time; before and after each, every
     member must be healthy, the member list must answer (quorum) and every
     apiserver's /readyz must pass (it waits up to --wait, then stops);
  3. it moves the leadership to a healthy follower (etcd's MoveLeader), so no
     election waits for a busy leader, and defragments the old leader last.

Members with little to give back are skipped: a member is defragmented when
at least --threshold percent of its file is free and that is at least
--min-free. --all takes every member (the NOSPACE recovery).

It talks to etcd through the SSH connection, like verify (no port opened).
--dry-run prints the plan and changes nothing. The state directory's lock is
held while it runs, so 'hardway up' and daemon repairs wait.`,
		Example: `  hardway etcd defrag -i inventory.yaml --dry-run
  hardway etcd defrag -i inventory.yaml
  hardway etcd defrag -i inventory.yaml --all -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(f.output); err != nil {
				return err
			}
			minFree, err := parseBytes(f.minFree)
			if err != nil {
				return usageError{fmt.Errorf("--min-free: %w", err)}
			}
			if f.threshold < 0 || f.threshold > 100 {
				return usageError{fmt.Errorf("--threshold %g: a percentage from 0 to 100", f.threshold)}
			}
			out := a.Stdout
			if f.output == "json" {
				out = a.Stderr
			}
			c, done, err := a.maintenanceCluster(cmd, f.dryRun, out)
			if err != nil {
				return err
			}
			defer done()
			start := time.Now()
			p, err := c.PlanDefrag(cmd.Context(), cluster.DefragOptions{Threshold: f.threshold / 100, MinFree: minFree, All: f.all, Wait: f.wait})
			if err != nil {
				return err
			}
			printDefragPlan(out, p.Members)
			res, err := (&plan.Runner{Out: out, DryRun: f.dryRun}).Run(cmd.Context(), []plan.Step{p.Step()})
			if err != nil {
				return err
			}
			if !f.dryRun && len(p.Actions) > 0 {
				// The sizes afterwards, from the same status the table shows.
				if ms, err := c.EtcdStatus(cmd.Context()); err == nil {
					for i := range p.Members {
						for _, m := range ms {
							if m.Name == p.Members[i].Name && m.Reachable {
								p.Members[i].DBSizeAfter = m.DBSize
							}
						}
					}
				}
			}
			n := 0
			for _, m := range p.Members {
				if m.Defrag {
					n++
				}
			}
			switch {
			case n == 0:
				fmt.Fprintln(out, "nothing to defragment")
			case f.dryRun:
				fmt.Fprintf(out, "%d member(s) to defragment; run without --dry-run to do it\n", n)
			default:
				var sizes []string
				for _, m := range p.Members {
					if m.Defrag && m.DBSizeAfter > 0 {
						sizes = append(sizes, fmt.Sprintf("%s %s -> %s", m.Name, cluster.Bytes(m.DBSize), cluster.Bytes(m.DBSizeAfter)))
					}
				}
				fmt.Fprintf(out, "%d member(s) defragmented in %s: %s\n", n, time.Since(start).Round(time.Millisecond), strings.Join(sizes, ", "))
			}
			if f.output == "json" {
				r := defragResult{DryRun: f.dryRun, Members: p.Members, Actions: []plan.Done{}}
				for _, s := range res.Steps {
					r.Actions = append(r.Actions, s.Actions...)
				}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&f.threshold, "threshold", 100*cluster.DefaultDefragThreshold, "defragment a member when at least this percentage of its database file is free")
	fl.StringVar(&f.minFree, "min-free", "1Mi", "... and at least this much is free (bytes, or with a suffix: 512Ki, 64Mi, 1Gi)")
	fl.BoolVar(&f.all, "all", false, "defragment every member, whatever its fragmentation (NOSPACE recovery)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and change nothing")
	fl.DurationVar(&f.wait, "wait", 2*time.Minute, "how long to wait for the cluster's health before and after each member")
	fl.StringVarP(&f.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	return cmd
}

func printDefragPlan(w io.Writer, ms []cluster.DefragMember) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tLEADER\tDB SIZE\tIN USE\tFREE\tPLAN")
	for _, m := range ms {
		what := "skip: " + m.Reason
		if m.Defrag {
			what = "defragment: " + m.Reason
			if m.Leader {
				what += ", after moving the leadership away"
			}
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\n", m.Name, m.Leader, cluster.Bytes(m.DBSize), cluster.Bytes(m.DBSizeInUse), cluster.Bytes(m.Free), what)
	}
	tw.Flush()
}

// parseBytes reads "1048576", "512Ki", "64Mi", "1Gi" (also "64M": 10^6).
func parseBytes(s string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSuffix(s, "B"))
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: write bytes or 512Ki, 64Mi, 1Gi", s)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%q: a size cannot be negative", s)
	}
	return q.Value(), nil
}

func (a *App) newEtcdCompactCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Compact etcd's history to the current revision (step 1 of the NOSPACE recovery)",
		Long: `compact discards every older version of every key, up to the current
revision, on every member. Their pages become free space in each member's
database file, which 'hardway etcd defrag' then gives back to the disk.

The apiservers compact on their own every five minutes, keeping five minutes
of history; compact drops that too. Watches that were behind restart from the
compacted revision (the apiservers and controllers relist and carry on).`,
		Example: `  hardway etcd compact -i inventory.yaml && hardway etcd defrag -i inventory.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, done, err := a.maintenanceCluster(cmd, dryRun, a.Stdout)
			if err != nil {
				return err
			}
			defer done()
			rev, err := c.CompactEtcd(cmd.Context(), dryRun)
			if err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintf(a.Stdout, "would compact etcd to revision %d\n", rev)
				return nil
			}
			fmt.Fprintf(a.Stdout, "compacted etcd to revision %d; 'hardway etcd defrag' gives the free pages back\n", rev)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the revision and change nothing")
	return cmd
}

func (a *App) newEtcdDisarmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "disarm",
		Short: "Disarm etcd's NOSPACE alarms (step 3 of the NOSPACE recovery)",
		Long: `disarm clears NOSPACE alarms, so that etcd takes writes again. Do it after
'hardway etcd compact' and 'hardway etcd defrag --all': etcd's quota counts the
database file, and a file still at the quota raises the alarm again at the
next write, so disarm refuses while a member's file is at its quota (--force
disarms anyway). CORRUPT alarms are never disarmed: a member's data differs
from the others' ('hardway verify' says what to do).`,
		Example: `  hardway etcd compact -i inventory.yaml
  hardway etcd defrag -i inventory.yaml --all
  hardway etcd disarm -i inventory.yaml
  hardway etcd status -i inventory.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, done, err := a.maintenanceCluster(cmd, false, a.Stdout)
			if err != nil {
				return err
			}
			defer done()
			names, err := c.DisarmNoSpace(cmd.Context(), force)
			if err != nil {
				return err
			}
			if len(names) == 0 {
				fmt.Fprintln(a.Stdout, "no NOSPACE alarm")
				return nil
			}
			fmt.Fprintf(a.Stdout, "disarmed NOSPACE of %s; 'hardway etcd status' shows the sizes against the quota\n", strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "disarm even while a member's database file is at its quota")
	return cmd
}
