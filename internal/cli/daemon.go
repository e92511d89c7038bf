package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/spf13/cobra"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/daemon"
	"github.com/hardway/hardway/pkg/release"
	"github.com/hardway/hardway/pkg/usererr"
)

type daemonOptions struct {
	interval    time.Duration
	listen      string
	repair      bool
	timeout     time.Duration
	stopTimeout time.Duration
	cacheDir    string
	allowRemote bool

	// Scheduled backups (off unless backupInterval > 0); the keys as
	// 'hardway backup' takes them.
	backupInterval       time.Duration
	backupDir            string
	backupKeep           int
	backupPassphraseFile string
	backupRecipients     []string
	backupRecipientFiles []string
}

func (o *daemonOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&o.interval, "interval", 60*time.Second, "time between the starts of two runs")
	f.StringVar(&o.listen, "listen", daemon.DefaultListen, "address of /metrics and /healthz (loopback unless --allow-remote-listen)")
	f.BoolVar(&o.allowRemote, "allow-remote-listen", false, "allow a --listen address that is not loopback: /metrics names every host and certificate, without authentication")
	f.BoolVar(&o.repair, "repair", false, "re-push drifted files and start failed units, one host at a time")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "time limit per check")
	f.DurationVar(&o.stopTimeout, "stop-timeout", 20*time.Second, "on SIGTERM, how long a run in progress may finish before it is cancelled")
	f.StringVar(&o.cacheDir, "cache-dir", "", "download cache to compare binaries against (default $XDG_CACHE_HOME/hardway); never written")
	f.DurationVar(&o.backupInterval, "backup-interval", 0, "take a backup (as 'hardway backup') when the newest is this old, e.g. 24h; 0: none")
	f.StringVar(&o.backupDir, "backup-dir", "", "directory of the scheduled backups (default: backups/ next to the inventory)")
	f.IntVar(&o.backupKeep, "backup-keep", 7, "keep the newest N scheduled backups; 0 keeps all")
	f.StringVar(&o.backupPassphraseFile, "backup-passphrase-file", "", "encrypt backups with the passphrase on the first line of FILE (or set "+backup.PassphraseEnv+")")
	f.StringSliceVar(&o.backupRecipients, "backup-recipient", nil, "encrypt backups to this age public key (age1…); repeatable")
	f.StringSliceVar(&o.backupRecipientFiles, "backup-recipients-file", nil, "encrypt backups to the age public keys in FILE, one a line")
}

// backups checks the backup flags and returns the daemon's schedule (nil:
// no scheduled backups). The keys are read once, at start: a daemon has no
// terminal to ask, and a missing passphrase must stop it now, not fail
// every backup later.
func (o *daemonOptions) backups() (*daemon.Backups, error) {
	if o.backupInterval <= 0 {
		if o.backupDir != "" || o.backupPassphraseFile != "" || len(o.backupRecipients) > 0 || len(o.backupRecipientFiles) > 0 {
			return nil, usageError{errors.New("--backup-dir, --backup-passphrase-file and --backup-recipient need --backup-interval")}
		}
		return nil, nil
	}
	if o.backupInterval < time.Minute {
		return nil, usageError{fmt.Errorf("--backup-interval %s: at least a minute", o.backupInterval)}
	}
	if o.backupKeep < 0 {
		return nil, usageError{fmt.Errorf("--backup-keep %d: keeps the newest N; 0 keeps all", o.backupKeep)}
	}
	rs, err := backup.Keys{PassphraseFile: o.backupPassphraseFile, Recipients: o.backupRecipients, RecipientFiles: o.backupRecipientFiles}.EncryptTo()
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, usererr.WithCode(errors.New("--backup-interval: no passphrase or recipient: a backup holds every key of the cluster"), usererr.CodeUsage,
			"--backup-passphrase-file FILE (mode 0600), or set "+backup.PassphraseEnv+", or --backup-recipient age1…")
	}
	dir := o.backupDir
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
	}
	return daemon.ClusterBackups(o.backupInterval, daemon.BackupOptions{Dir: dir, Keep: o.backupKeep, Recipients: rs, HardwayVersion: version()}), nil
}

func (o *daemonOptions) cache() (string, error) {
	if o.cacheDir != "" {
		return filepath.Abs(o.cacheDir)
	}
	return release.DefaultCacheDir()
}

func (a *App) newDaemonCmd() *cobra.Command {
	var o daemonOptions
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Keep verifying the cluster; tell systemd and Prometheus",
		Long: `daemon runs the checks of 'hardway verify' every --interval (never two runs
at once) and logs only what changes: a check that starts failing, with its
hint, and one that passes again. It serves Prometheus metrics on /metrics:

  hardway_check_status{check,host}            0 pass, 1 warn, 2 fail
  hardway_certificate_expiry_seconds{name,kind}
  hardway_etcd_member_healthy{member}, hardway_etcd_member_leader{member}
  hardway_run_duration_seconds, hardway_runs_total, hardway_repairs_total

and /healthz (200 once a run finished). The address must be loopback: the
metrics name every host and certificate and have no authentication.
--allow-remote-listen accepts another address on purpose.

Under systemd (see 'hardway daemon unit') it reports READY=1 after the first
run, a one-line STATUS=, WATCHDOG=1 while its loop is alive (a run stuck for
10 minutes stops the pings, so systemd restarts it), and STOPPING=1 on
SIGTERM. SIGHUP reloads the inventory; an invalid one is refused and the
previous one kept.

With --repair, a host whose files drifted or whose units are not running is
converged by the push, etcd, control-plane and workers steps of 'hardway up',
one host at a time. Certificates, RBAC, Node objects and etcd membership are
never touched (nor are workers removed from the inventory: that is 'up').
The first repair that fails stops the round and pauses repairs for one
--interval, doubling with each failure in a row (at most an hour), so a
change that breaks one host is not carried to the next. An etcd member is
restarted only while every other member is healthy.
The daemon never downloads: binaries are compared against the cache.

With --backup-interval (e.g. 24h) it takes a backup, the same file as
'hardway backup' writes, after a run when the newest backup in --backup-dir
is that old (a restarted daemon counts from the newest file there), keeps the
newest --backup-keep, and encrypts to --backup-passphrase-file (or
HARDWAY_BACKUP_PASSPHRASE) or --backup-recipient. The check backup/last fails,
with a hint, when the last backup failed (it is retried after 5 minutes) or
the newest is overdue (older than the interval and a quarter); /metrics adds
hardway_backup_last_success_timestamp_seconds, hardway_backup_last_size_bytes,
hardway_backup_last_duration_seconds, hardway_backup_last_result (1 ok, 0
failed) and hardway_backups_total{result}.`,
		Example: `  hardway daemon -i inventory.yaml
  hardway daemon -i inventory.yaml --interval 30s --repair
  hardway daemon -i inventory.yaml --backup-interval 24h --backup-passphrase-file /etc/hardway/backup.pass
  curl -s 127.0.0.1:9479/metrics | grep hardway_check_status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := daemon.CheckListen(o.listen, o.allowRemote); err != nil {
				return err
			}
			cacheDir, err := o.cache()
			if err != nil {
				return err
			}
			bk, err := o.backups()
			if err != nil {
				return err
			}
			load := func() (daemon.Target, error) {
				inv, err := a.loadInventory()
				if err != nil {
					return nil, err
				}
				st := a.stateDir(inv)
				if fi, err := os.Stat(string(st)); err != nil || !fi.IsDir() {
					return nil, usererr.New(fmt.Errorf("daemon: no state directory %s", st), "run 'hardway up' first, or pass --state")
				}
				ro := release.OptionsFor(inv)
				ro.CacheDir = cacheDir
				t, err := daemon.NewClusterTarget(cmd.Context(), inv, cluster.Options{State: st, Release: ro})
				if err != nil {
					return nil, err
				}
				return t, nil
			}
			journaled := false
			if f, ok := a.Stderr.(*os.File); ok && f == os.Stderr {
				journaled, _ = journal.StderrIsJournalStream()
			}
			d := daemon.New(daemon.Config{
				Load: load, Interval: o.interval, CheckTimeout: o.timeout, Repair: o.repair,
				StopTimeout: o.stopTimeout, Listen: o.listen, Log: a.Stderr, Journal: journaled, Backups: bk,
			})
			return d.Run(cmd.Context())
		},
	}
	o.flags(cmd)
	cmd.AddCommand(a.newDaemonUnitCmd())
	return cmd
}

func (a *App) newDaemonUnitCmd() *cobra.Command {
	var o daemonOptions
	var binary, userName string
	var watchdog time.Duration
	cmd := &cobra.Command{
		Use:   "unit",
		Short: "Print the systemd unit that runs the daemon",
		Long: `Print a Type=notify unit for 'hardway daemon' with the inventory, state
directory and cache as absolute paths. It is sandboxed: read-only system and
home, a private /tmp, no capabilities, and the state directory as the only
writable path. It passes 'systemd-analyze verify'.

It runs as the owner of the state directory (--user to change): the daemon
needs to read the PKI, the SSH key and known_hosts named in the inventory.
The SSH key must not need a passphrase: there is no agent under systemd.`,
		Example: `  hardway daemon unit -i inventory.yaml > /etc/systemd/system/hardway-daemon.service
  systemctl daemon-reload && systemctl enable --now hardway-daemon
  systemctl status hardway-daemon     # STATUS: 41 pass, 0 warn, 0 fail in 2.1s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := daemon.CheckListen(o.listen, o.allowRemote); err != nil {
				return err
			}
			inv, err := a.loadInventory()
			if err != nil {
				return err
			}
			invPath, err := filepath.Abs(a.InventoryPath)
			if err != nil {
				return err
			}
			st, err := filepath.Abs(string(a.stateDir(inv)))
			if err != nil {
				return err
			}
			cacheDir, err := o.cache()
			if err != nil {
				return err
			}
			if binary == "" {
				if binary, err = os.Executable(); err != nil {
					return err
				}
				if r, err := filepath.EvalSymlinks(binary); err == nil {
					binary = r
				}
			}
			if !filepath.IsAbs(binary) {
				return usageError{errors.New("--binary must be an absolute path")}
			}
			if !cmd.Flags().Changed("user") {
				userName = ownerOf(st)
			}
			args := []string{"-i", invPath, "--state", st, "--cache-dir", cacheDir,
				"--interval", o.interval.String(), "--listen", o.listen, "--timeout", o.timeout.String(),
				"--stop-timeout", o.stopTimeout.String()}
			if o.repair {
				args = append(args, "--repair")
			}
			backupDir := ""
			if o.backupInterval > 0 {
				// A unit carries no secret: the passphrase comes from a
				// file the service reads, never from this shell's
				// environment.
				if o.backupPassphraseFile == "" && len(o.backupRecipients) == 0 && len(o.backupRecipientFiles) == 0 {
					return usererr.WithCode(errors.New("--backup-interval in a unit needs --backup-passphrase-file or --backup-recipient"), usererr.CodeUsage,
						"write the passphrase to a file only the service's user reads (mode 0600) and pass --backup-passphrase-file FILE; a unit never carries "+backup.PassphraseEnv)
				}
				if _, err := o.backups(); err != nil {
					return err
				}
				if backupDir = o.backupDir; backupDir == "" {
					backupDir = filepath.Join(inv.Dir(), "backups")
				}
				if backupDir, err = filepath.Abs(backupDir); err != nil {
					return err
				}
				if fi, err := os.Stat(backupDir); err != nil || !fi.IsDir() {
					fmt.Fprintf(a.Stderr, "warning: create %s before starting the unit (mkdir -m 0700 %s): the sandbox makes only existing paths writable\n", backupDir, backupDir)
				}
				args = append(args, "--backup-interval", o.backupInterval.String(), "--backup-dir", backupDir, "--backup-keep", strconv.Itoa(o.backupKeep))
				if o.backupPassphraseFile != "" {
					p, err := filepath.Abs(o.backupPassphraseFile)
					if err != nil {
						return err
					}
					args = append(args, "--backup-passphrase-file", p)
				}
				for _, r := range o.backupRecipients {
					args = append(args, "--backup-recipient", r)
				}
				for _, f := range o.backupRecipientFiles {
					p, err := filepath.Abs(f)
					if err != nil {
						return err
					}
					args = append(args, "--backup-recipients-file", p)
				}
			}
			if o.allowRemote {
				args = append(args, "--allow-remote-listen")
			}
			u, err := daemon.Unit(daemon.UnitConfig{
				Binary: binary, Args: args, StateDir: st, BackupDir: backupDir, User: userName, Cluster: inv.Cluster,
				Watchdog: watchdog, StopAfter: 2*o.stopTimeout + 10*time.Second,
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(a.Stdout, u)
			return err
		},
	}
	o.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&binary, "binary", "", "absolute path of hardway on the machine that runs the unit (default: this binary)")
	f.StringVar(&userName, "user", "", "User= of the service (default: the owner of the state directory; root: none)")
	f.DurationVar(&watchdog, "watchdog", 60*time.Second, "WatchdogSec=: the loop pings every half of it")
	return cmd
}

// ownerOf is the user name owning path, or "" for root or when unknown.
func ownerOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	s, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || s.Uid == 0 {
		return ""
	}
	if u, err := user.LookupId(strconv.Itoa(int(s.Uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(s.Uid))
}
