package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/lab"
	"github.com/hardway/hardway/pkg/usererr"
)

func (a *App) newLabCmd() *cobra.Command {
	var cfg lab.Config
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run practice hosts on this machine (root, Linux)",
		Long: `hardway lab runs practice hosts on this Linux machine: systemd-nspawn
containers booting real systemd and OpenSSH, each in its own network namespace
on a bridge (10.240.0.0/24 by default, the tutorial's addresses): controllers
at .11, .12, ... and, with --workers, worker hosts at .21, .22, ... that can
run containerd, kubelet and kube-proxy. 'lab up' writes lab/inventory.yaml
for them:

  sudo hardway lab up --workers 2
  sudo hardway up -i lab/inventory.yaml
  ssh -F lab/ssh_config worker-1
  sudo hardway lab down`,
	}
	cmd.PersistentFlags().StringVar(&cfg.Prefix, "prefix", lab.DefaultPrefix,
		"name prefix of the lab's namespaces, links and containers (one lab per prefix)")
	cmd.PersistentFlags().StringVar(&cfg.Root, "root", lab.DefaultRoot, "where the lab keeps its state, overlays and base rootfs")

	// Progress goes to stderr; the flags above are read when a command runs.
	newLab := func() (*lab.Lab, error) {
		cfg.Log = a.Stderr
		return lab.New(cfg)
	}

	var fetchOn string
	up := &cobra.Command{
		Use:   "up",
		Short: "Create and boot the lab hosts, write the inventory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch fetchOn {
			case "operator":
			case "hosts":
				cfg.FetchOnHosts = true
			default:
				return usererr.WithCode(fmt.Errorf("--fetch-on %q: want operator or hosts", fetchOn), usererr.CodeUsage, "see 'hardway lab up --help'")
			}
			l, err := newLab()
			if err != nil {
				return err
			}
			res, err := l.Up(cmd.Context())
			if err != nil {
				return err
			}
			for _, h := range append(res.Hosts, res.Workers...) {
				fmt.Fprintf(a.Stdout, "%-14s %s\n", h.Name, h.Address)
			}
			fmt.Fprintf(a.Stdout, "\ninventory: %s\nssh:       ssh -F %s %s\n", res.Inventory, res.SSHConfig, res.Hosts[0].Name)
			if res.MirrorURL != "" {
				fmt.Fprintf(a.Stdout, "mirror:    %s (the hosts fetch from it; until lab down)\n", res.MirrorURL)
			}
			fmt.Fprintf(a.Stdout, "next:      hardway up -i %s\n", res.Inventory)
			return nil
		},
	}
	up.Flags().IntVar(&cfg.Hosts, "hosts", lab.DefaultHosts, "number of control-plane hosts (controller-1..N at .11, .12, ...)")
	up.Flags().IntVar(&cfg.Workers, "workers", lab.DefaultWorkers,
		"number of worker hosts (worker-1..N at .21, .22, ...), with what containerd and kubelet need: own cgroups in every\n"+
			"hierarchy, writable cgroups, a plain /var/lib/containerd, kubelet's sysctls shown read-only, /dev/kmsg")
	up.Flags().StringVar(&cfg.Dir, "dir", lab.DefaultDir, "directory for the inventory, SSH key, known_hosts and ssh_config")
	up.Flags().StringVar(&cfg.Net, "net", lab.DefaultNet, "the lab's /24: bridge .1, hosts .11, .12, ...")
	up.Flags().StringToStringVar(&cfg.HostSuites, "host-suite", nil,
		"HOST=SUITE: boot that host from another Debian release than this machine's (worker-2=trixie), for a cluster that\n"+
			"mixes releases; each suite's base is built once (debootstrap) and cached")
	up.Flags().StringVar(&fetchOn, "fetch-on", "operator",
		"operator: the inventory names the mirror on this machine's disk and 'hardway up' pushes every file over SSH;\n"+
			"hosts: the lab serves the mirror over HTTP on its bridge address until 'lab down', and the inventory has\n"+
			"releases.fetchOn: hosts, so each host downloads its files itself (checked against hardway.lock on the host)")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the lab and remove everything it created",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := newLab()
			if err != nil {
				return err
			}
			return l.Down(cmd.Context())
		},
	}

	base := &cobra.Command{
		Use:   "base",
		Short: "Build the lab hosts' shared Debian rootfs now (lab up builds it on first use)",
		Long: `hardway lab base builds the read-only Debian rootfs that every lab host boots
from (debootstrap from this machine's apt sources, a few minutes, once; kept
under --root/lab-base), and prints its directory. 'lab up' builds it on first
use; building it ahead lets it download while other work runs, as 'make test'
does during lint and the mirror build. Nothing is built when it is there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := newLab()
			if err != nil {
				return err
			}
			dir, err := l.Base(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(a.Stdout, dir)
			return nil
		},
	}

	var output string
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the lab's hosts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := lab.New(cfg)
			if err != nil {
				return err
			}
			st, err := l.Status(cmd.Context())
			if err != nil {
				return err
			}
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			if !st.Up {
				fmt.Fprintf(a.Stdout, "lab %q is not up (start it with: hardway lab up)\n", st.Prefix)
				return nil
			}
			fmt.Fprintf(a.Stdout, "lab %q on %s, inventory %s\n", st.Prefix, st.Net, st.Inventory)
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HOST\tROLE\tADDRESS\tCONTAINER\tSSH\tMEMORY")
			for _, h := range st.Hosts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f MiB\n", h.Name, h.Role, h.Address,
					yesNo(h.Running, "running", "stopped"), yesNo(h.SSH, "open", "closed"), float64(h.Memory)/(1<<20))
			}
			return tw.Flush()
		},
	}
	status.Flags().StringVarP(&output, "output", "o", "text", "text or json")

	cmd.AddCommand(up, down, status, base)
	return cmd
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
