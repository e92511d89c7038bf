package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hardway/hardway"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/hostos"
	"github.com/hardway/hardway/pkg/hostprobe"
	"github.com/hardway/hardway/pkg/initinv"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/usererr"
)

type initOptions struct {
	force       bool
	hosts       []string
	controllers int
	workers     int
	like        string
	ssh         initinv.SSHFlags
	acceptNew   bool
	output      string
}

// hostsOnly are the flags that mean something with --hosts only.
var hostsOnly = []string{"controllers", "workers", "like", "identity-file", "known-hosts", "port", "bastion", "accept-new-host-keys", "output"}

func (a *App) newInitCmd() *cobra.Command {
	var o initOptions
	cmd := &cobra.Command{
		Use:   "init [--hosts USER@ADDR,...] [FILE]",
		Short: "Write an inventory: the commented example, or one from your hosts",
		Long: `Write an inventory to FILE, or to standard output without FILE. An existing
FILE is never overwritten unless --force is given.

Without --hosts it is the commented example: every key is explained in it,
and only controlPlane is required.

With --hosts it starts from your hosts instead. It connects to each of them
over SSH as 'hardway up' does: host keys are checked against known_hosts, and
a host not in it is refused unless --accept-new-host-keys. On each host it
runs one command, as the SSH user and without sudo, that only reads; nothing
is changed on the hosts. It reads:

  hostname, and the address the host saw the connection arrive at
  its IPv4 addresses and routes (ip -o -4 addr show, ip -o -4 route show)
  uname -m, /etc/os-release, systemd-detect-virt --container
  the CPUs (nproc), the memory (MemTotal) and systemctl --version

Then it guesses, and says each guess on standard error and beside it in the
file:

  roles          the first 3 hosts run the control plane, or the first one
                 with fewer than 3 hosts (never 2: etcd needs a majority);
                 the others are workers. --controllers N or --workers N
                 chooses instead.
  names          the host names, lower-cased into DNS-1123 labels; a
                 duplicate gets -2, -3...
  address ranges podCIDR ` + inventory.DefaultPodCIDR + ` and serviceCIDR ` + inventory.DefaultServiceCIDR + `, or the
                 next ranges of their size in 10.0.0.0/8, 172.16.0.0/12 and
                 192.168.0.0/16 that no host has an address in or a route to
                 (a bare route of exactly the range, with no gateway and no
                 source address, as the lab's workers have for the Services,
                 does not count)
  arch           the hosts' architecture; when they mix, the most common one,
                 and a comment on each other host
  containerHost  on a host systemd-detect-virt calls a container (the lab's
                 systemd-nspawn hosts); never on a real host

A distribution hardway does not know is a warning, not a refusal: 'hardway
up' checks what it needs first. It knows:
  ` + hostos.KnownDistros() + `

--like FILE takes every other setting from an existing inventory, with its
comments: versions, releases mirrors, images, registries, SSH settings, dns,
podSecurity. That is how a lab or an air-gapped site keeps its mirrors. Only
the hosts, the address ranges and arch come from the hosts; the SSH flags
override the file's.

The inventory is checked with the inventory loader before it is written.
-o json prints what the hosts said and every guess as JSON on standard
output (with the inventory, when there is no FILE).`,
		Example: `  hardway init inventory.yaml                 # the commented example
  hardway init --hosts root@10.0.0.11,root@10.0.0.12,pi@10.0.0.13 inventory.yaml
  hardway init --hosts 10.0.0.11,10.0.0.12,10.0.0.13,10.0.0.21 --workers 1 --identity-file ~/.ssh/lab
  hardway init --hosts 10.240.0.11,10.240.0.21 --like lab/inventory.yaml site.yaml
  hardway init --hosts root@10.0.0.11 -o json | jq '.hosts[].facts'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) > 0 {
				path = args[0]
			}
			if path != "" && !o.force {
				if _, err := os.Stat(path); err == nil {
					return usererr.Errorf("edit it, or pass --force to replace it", "%s already exists", path)
				}
			}
			if len(o.hosts) == 0 {
				for _, f := range hostsOnly {
					if cmd.Flags().Changed(f) {
						return usageError{fmt.Errorf("--%s needs --hosts", f)}
					}
				}
				return a.writeInventory(path, hardway.ExampleInventory, "edit the hosts, then run 'hardway up -i %s'")
			}
			if !cmd.Flags().Changed("controllers") {
				o.controllers = 0
			} else if o.controllers < 1 {
				return usageError{fmt.Errorf("--controllers %d: at least one host runs the control plane", o.controllers)}
			}
			if !cmd.Flags().Changed("workers") {
				o.workers = -1
			} else if o.workers < 0 {
				return usageError{fmt.Errorf("--workers %d", o.workers)}
			}
			return a.initFromHosts(cmd.Context(), o, path, rerun(cmd, args))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.force, "force", false, "overwrite an existing file")
	f.StringSliceVar(&o.hosts, "hosts", nil, "the hosts to probe, [user@]address[:port], comma-separated, in order: control plane first")
	f.IntVar(&o.controllers, "controllers", 0, "the first N hosts run the control plane, the others are workers (default 3, or 1 with fewer than 3 hosts)")
	f.IntVar(&o.workers, "workers", 0, "the last N hosts are workers, the others run the control plane")
	f.StringVar(&o.like, "like", "", "take every setting but the hosts, the address ranges and arch from this inventory")
	f.StringVar(&o.ssh.IdentityFile, "identity-file", "", "SSH private key (default: the ssh-agent's keys, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	f.StringVar(&o.ssh.KnownHostsFile, "known-hosts", "", "known_hosts file the host keys are checked against (default ~/.ssh/known_hosts)")
	f.IntVar(&o.ssh.Port, "port", 0, "SSH port of the hosts without a :port of their own (default 22, or --like's)")
	f.StringVar(&o.ssh.Bastion, "bastion", "", "jump host, [user@]host[:port]")
	f.BoolVar(&o.acceptNew, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: what the hosts said and the guesses as JSON on stdout")
	return cmd
}

// writeInventory writes data to path, or to standard output without one;
// next is what to do then, with the path.
func (a *App) writeInventory(path string, data []byte, next string) error {
	if path == "" {
		_, err := a.Stdout.Write(data)
		return err
	}
	if err := fsutil.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "wrote %s: "+next+"\n", path, path)
	return nil
}

// initResult is init's -o json.
type initResult struct {
	*initinv.Result
	File      string `json:"file,omitempty"`
	Inventory string `json:"inventory,omitempty"` // when there is no FILE
}

func (a *App) initFromHosts(ctx context.Context, o initOptions, path, again string) error {
	if err := checkOutputFlag(o.output); err != nil {
		return err
	}
	targets, err := initinv.ParseTargets(o.hosts)
	if err != nil {
		return err
	}
	// Roles says what is wrong with --controllers and --workers before
	// any host is asked.
	if _, _, err := initinv.Roles(len(targets), o.controllers, o.workers); err != nil {
		return err
	}
	var like *initinv.Like
	if o.like != "" {
		if like, err = initinv.LoadLike(o.like); err != nil {
			return err
		}
	}
	conn, err := initinv.Connection(targets, o.ssh, like, path)
	if err != nil {
		return err
	}
	cfgs := make([]remote.Config, len(conn.ControlPlane))
	for i, h := range conn.ControlPlane {
		cfgs[i] = cluster.RemoteConfig(conn, h, o.acceptNew)
		// The probe only reads, and nothing it reads needs root: no sudo,
		// so no password prompt to fail on.
		cfgs[i].Sudo = false
	}
	facts, err := hostprobe.ProbeAll(ctx, cfgs, hostprobe.Options{
		Done: func(i int, f hostprobe.Facts, err error) {
			if err != nil {
				msg, _, _ := strings.Cut(err.Error(), "\n")
				fmt.Fprintf(a.Stderr, "[probe] %s: failed: %s\n", targets[i].Spec, msg)
				return
			}
			fmt.Fprintf(a.Stderr, "[probe] %s: %s, %s\n", targets[i].Spec, f.Hostname, f.Summary())
		},
	})
	if err != nil {
		return trustHint(err, conn, again)
	}
	r, err := initinv.Build(initinv.Input{Targets: targets, Facts: facts, Conn: conn, Like: like, Display: path,
		Controllers: o.controllers, Workers: o.workers})
	if err != nil {
		return err
	}
	if o.output == "json" {
		res := initResult{Result: r, File: path}
		if path == "" {
			res.Inventory = string(r.YAML)
		} else if err := fsutil.WriteFile(path, r.YAML, 0o644); err != nil {
			return err
		}
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, g := range r.Guesses {
		fmt.Fprintf(a.Stderr, "guess: %s\n", g)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(a.Stderr, "warning: %s\n", w)
	}
	return a.writeInventory(path, r.YAML, "check the guesses, then run 'hardway up -i %s'")
}

// trustHint gives a refused unknown host key the exact commands that
// trust it: the fingerprint to check, then this command again with
// --accept-new-host-keys (as up's own hint says, for up).
func trustHint(err error, conn *inventory.Inventory, again string) error {
	if !errors.Is(err, remote.ErrHostKeyUnknown) {
		return err
	}
	var de *remote.DialError
	check := "check the new hosts' key fingerprints"
	if errors.As(err, &de) && de.Via == "" {
		if host, port, e := net.SplitHostPort(de.Addr); e == nil {
			check += " (e.g. ssh-keyscan -p " + port + " " + usererr.Quote(host) + " | ssh-keygen -lf -)"
		}
	}
	if conn.SSH.Bastion != "" {
		check += " from the bastion"
	}
	return usererr.New(err, check+", then trust and record them with:\n"+again+" --accept-new-host-keys")
}

// rerun is the command line that ran cmd, rebuilt from its flags: what a
// hint tells the user to run again.
func rerun(cmd *cobra.Command, args []string) string {
	parts := []string{cmd.CommandPath()}
	for _, name := range append([]string{"hosts"}, append(hostsOnly, "force")...) {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || name == "accept-new-host-keys" {
			continue
		}
		if f.Value.Type() == "bool" {
			parts = append(parts, "--"+name)
			continue
		}
		v := f.Value.String()
		if sv, ok := f.Value.(interface{ GetSlice() []string }); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		parts = append(parts, "--"+name, usererr.Quote(v))
	}
	for _, a := range args {
		parts = append(parts, usererr.Quote(a))
	}
	return strings.Join(parts, " ")
}
