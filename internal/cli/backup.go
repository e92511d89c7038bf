package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/cluster"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/restore"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// keyFlags are the encryption flags backup and restore share.
type keyFlags struct {
	passphraseFile string
	recipients     []string
	recipientFiles []string
	identityFiles  []string
}

func (k *keyFlags) keys(a *App) backup.Keys {
	return backup.Keys{PassphraseFile: k.passphraseFile, Recipients: k.recipients, RecipientFiles: k.recipientFiles,
		IdentityFiles: k.identityFiles, Prompt: a.passphrasePrompt()}
}

// passphrasePrompt asks on the terminal, never echoing; nil without one
// (a script must give the passphrase another way, never hang).
func (a *App) passphrasePrompt() func(confirm bool) (string, error) {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return nil
	}
	return func(confirm bool) (string, error) {
		fmt.Fprint(a.Stderr, "backup passphrase: ")
		p, err := term.ReadPassword(fd)
		fmt.Fprintln(a.Stderr)
		if err != nil || !confirm {
			return string(p), err
		}
		fmt.Fprint(a.Stderr, "again: ")
		q, err := term.ReadPassword(fd)
		fmt.Fprintln(a.Stderr)
		if err != nil {
			return "", err
		}
		if string(p) != string(q) {
			return "", usererr.New(errors.New("the passphrases differ"), "type the same passphrase twice")
		}
		return string(p), nil
	}
}

func (a *App) newBackupCmd() *cobra.Command {
	var k keyFlags
	var dir, output string
	var keep int
	var unencrypted bool
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Write one encrypted file that can rebuild the cluster: etcd snapshot, state directory, inventory, lock",
		Long: `backup writes one file holding everything a rebuild needs:

  an etcd snapshot, streamed from the current leader through the SSH
  connection (no port is opened) and checked against etcd's own sha256
  trailer as it arrives;
  the whole state directory: the CAs and their keys, the service-account
  key pair, the encryption config with every key it ever held (old
  snapshots still decrypt), kubeconfigs; not the run logs;
  the inventory and hardway.lock.

The file holds every secret of the cluster, so it is encrypted with age
(https://age-encryption.org), to a passphrase or to age public keys:

  HARDWAY_BACKUP_PASSPHRASE=…      the passphrase from the environment
  --passphrase-file FILE           or the first line of a file
  (a terminal)                     or typed twice at the prompt
  --recipient age1… / --recipients-file FILE   or age public keys (restore
                                   then needs --identity with a private key)

A passphrase is never taken as an argument (it would show in ps and the
shell's history). --unencrypted writes a plain .tar.gz, only on purpose.

The file is hardway-backup-<cluster>-<UTC time>.tar.gz.age in --dir, mode
0600, written to a temporary file, fsynced and renamed: a failed backup
never leaves a partial file. --keep N then removes all but the newest N of
this cluster's backups in --dir (other files are never touched). The
printed sha256 lets you check a copy later; 'hardway restore --from FILE'
reads it back.`,
		Example: `  HARDWAY_BACKUP_PASSPHRASE=… hardway backup -i inventory.yaml --dir /srv/backups --keep 7
  hardway backup -i inventory.yaml --recipients-file ops-keys.txt -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			if keep < 0 {
				return usererr.WithCode(fmt.Errorf("--keep %d", keep), usererr.CodeUsage, "--keep N keeps the newest N backups; 0 keeps all")
			}
			keys := k.keys(a)
			var rs []age.Recipient
			if !unencrypted {
				r, err := keys.EncryptTo()
				if err != nil {
					return err
				}
				if len(r) == 0 { // before the lock or any connection
					return usererr.WithCode(errors.New("backup: no passphrase or recipient: the file holds every key of the cluster"), usererr.CodeUsage,
						"set "+backup.PassphraseEnv+", or --passphrase-file FILE, or --recipient age1…; --unencrypted only if the file is kept somewhere safe")
				}
				rs = r
			} else if k.passphraseFile != "" || len(k.recipients) > 0 || len(k.recipientFiles) > 0 {
				return usererr.WithCode(errors.New("--unencrypted with a passphrase or recipients"), usererr.CodeUsage, "choose one")
			}
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			if dir == "" {
				dir = filepath.Join(inv.Dir(), "backups")
			}
			progress := a.Stdout
			if output == "json" {
				progress = a.Stderr
			}
			c := cluster.New(inv, cluster.Options{State: st, Out: progress})
			defer c.Close()
			res, err := backup.Create(cmd.Context(), backup.Options{Source: c, Inventory: inv, State: st, Dir: dir, Keep: keep,
				Recipients: rs, Plaintext: unencrypted, HardwayVersion: version(), Log: progress})
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(a.Stdout, "backup %s\n  size %d bytes, sha256 %s\n  etcd snapshot from %s: %d bytes, sha256 %s\n  %d files in %s\n",
				res.Path, res.Size, res.SHA256, res.Snapshot.Member, res.Snapshot.Size, res.Snapshot.SHA256, res.Files, res.Duration.Round(time.Millisecond))
			if !res.Encrypted {
				fmt.Fprintln(a.Stdout, "  NOT encrypted (--unencrypted): it holds every key of the cluster")
			}
			return nil
		},
	}
	cmd.AddCommand(a.newBackupVerifyCmd())
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory for the backup files (default: backups/ next to the inventory)")
	f.IntVar(&keep, "keep", 0, "keep only the newest N backups of this cluster in --dir (0: keep all)")
	f.StringVar(&k.passphraseFile, "passphrase-file", "", "read the passphrase from the first line of FILE (or set "+backup.PassphraseEnv+")")
	f.StringSliceVar(&k.recipients, "recipient", nil, "encrypt to this age public key (age1…) instead of a passphrase; repeatable")
	f.StringSliceVar(&k.recipientFiles, "recipients-file", nil, "encrypt to the age public keys in FILE, one a line")
	f.BoolVar(&unencrypted, "unencrypted", false, "write a plain .tar.gz (it holds every key of the cluster)")
	f.StringVarP(&output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	return cmd
}

func (a *App) newBackupVerifyCmd() *cobra.Command {
	var k keyFlags
	var output string
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a backup file completely without restoring it",
		Long: `verify decrypts FILE and checks all of it, as restore does before it touches
a host: age's authentication of every chunk, gzip's CRC, every entry against
the manifest's size and sha256, and the etcd snapshot against its own sha256
trailer. It needs no inventory and connects to nothing; what it extracts to
check goes to a private temporary directory and is removed.`,
		Example: `  HARDWAY_BACKUP_PASSPHRASE=… hardway backup verify backups/hardway-backup-lab-20261130T221500Z.tar.gz.age`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFlag(output); err != nil {
				return err
			}
			ids, err := a.decryptKeys(k, args[0])
			if err != nil {
				return err
			}
			m, err := backup.Verify(args[0], ids, "")
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(m)
			}
			fmt.Fprintf(a.Stdout, "%s: whole\n  cluster %q, taken %s by hardway %s\n  etcd snapshot from %s (etcd %s): %d bytes, sha256 %s\n  %d files\n",
				args[0], m.Cluster, m.Created.Format(time.RFC3339), m.HardwayVersion, m.Snapshot.Member, m.Snapshot.EtcdVersion, m.Snapshot.Size, m.Snapshot.SHA256, len(m.Files))
			return nil
		},
	}
	cmd.Flags().StringVar(&k.passphraseFile, "passphrase-file", "", "read the passphrase from the first line of FILE (or set "+backup.PassphraseEnv+")")
	cmd.Flags().StringSliceVar(&k.identityFiles, "identity", nil, "age identity file for a backup made with --recipient")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, or json: the manifest")
	return cmd
}

type restoreOptions struct {
	keyFlags
	from              string
	dryRun            bool
	acceptNewHostKeys bool
	replaceData       bool
	replaceIdentity   bool
	force             bool
	cacheDir          string
	offline           bool
	output            string
	verifyTimeout     time.Duration
}

func (a *App) newRestoreCmd() *cobra.Command {
	var o restoreOptions
	cmd := &cobra.Command{
		Use:   "restore --from FILE",
		Short: "Rebuild the cluster from a backup, onto the same hosts or new ones",
		Long: `restore rebuilds the cluster from a file 'hardway backup' wrote, onto the
inventory's hosts: the same ones, or new ones with empty disks, new host keys
(trusted only with --accept-new-host-keys) and other addresses.

First the whole file is checked, before any host is touched: decrypted (a
wrong passphrase is refused), every entry against the manifest's sha256,
and the etcd snapshot against its own sha256 trailer. A flipped byte or a
truncated file is refused with the reason.

If -i names no file, the backup's inventory (and hardway.lock) is written
there first; otherwise the inventory given is used (new addresses are fine:
certificates are reissued from the backup's CAs).

Then, in this order:
` + stepList(cluster.New(&inventory.Inventory{}, cluster.Options{}).RestoreSteps(cluster.RestoreOptions{})) + `
The restore refuses members whose etcd holds data (a running cluster)
unless --replace-etcd-data; their data dir is then moved aside
(/var/lib/etcd.before-restore-<time>), never deleted. Every member starts
from the same snapshot with a new cluster token, its revision bumped by
1,000,000,000 and old revisions marked compacted, so that controllers and
watch caches start over instead of trusting what they saw before. Last,
verify runs until every check passes (or --verify-timeout).

The passphrase comes from HARDWAY_BACKUP_PASSPHRASE, --passphrase-file or the
prompt; a backup made for age keys needs --identity FILE.`,
		Example: `  HARDWAY_BACKUP_PASSPHRASE=… hardway restore -i inventory.yaml --from backups/hardway-backup-lab-20261130T221500Z.tar.gz.age --accept-new-host-keys
  hardway restore -i inventory.yaml --from FILE --identity ~/.config/age/key.txt --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runRestore(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "the backup file (required)")
	f.StringVar(&o.passphraseFile, "passphrase-file", "", "read the passphrase from the first line of FILE (or set "+backup.PassphraseEnv+")")
	f.StringSliceVar(&o.identityFiles, "identity", nil, "age identity file for a backup made with --recipient; repeatable")
	f.BoolVar(&o.dryRun, "dry-run", false, "check the backup and print the plan; change nothing")
	f.BoolVar(&o.acceptNewHostKeys, "accept-new-host-keys", false, "trust and record the key of a host not yet in known_hosts (a changed key is always refused)")
	f.BoolVar(&o.replaceData, "replace-etcd-data", false, "restore over members whose etcd holds data (it is moved aside, not deleted)")
	f.BoolVar(&o.replaceIdentity, "replace-identity", false, "push the backup's CAs and keys over hosts that hold another identity")
	f.BoolVar(&o.force, "force", false, "replace local state files that differ from the backup's; restore a backup of another cluster name")
	f.StringVar(&o.cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway)")
	f.BoolVar(&o.offline, "offline", false, "use the download cache only")
	f.StringVarP(&o.output, "output", "o", "text", "text, or json: the result as JSON on stdout (progress goes to stderr)")
	f.DurationVar(&o.verifyTimeout, "verify-timeout", 3*time.Minute, "how long verify may take to pass after the restore")
	return cmd
}

// decryptKeys are the identities for file: none for a plain .tar.gz (no
// prompt then), else the identity files and the passphrase.
func (a *App) decryptKeys(k keyFlags, file string) ([]age.Identity, error) {
	enc, err := backup.Encrypted(file)
	if err != nil || !enc {
		return nil, err
	}
	return k.keys(a).DecryptWith()
}

func (a *App) runRestore(cmd *cobra.Command, o restoreOptions) error {
	if err := checkOutputFlag(o.output); err != nil {
		return err
	}
	if o.from == "" {
		return usererr.WithCode(errors.New("restore needs --from FILE"), usererr.CodeUsage, "the file 'hardway backup' wrote")
	}
	out := a.Stdout
	if o.output == "json" {
		out = a.Stderr
	}
	ids, err := a.decryptKeys(o.keyFlags, o.from)
	if err != nil {
		return err
	}
	res, err := restore.Run(cmd.Context(), restore.Options{
		From: o.from, Identities: ids, InventoryPath: a.InventoryPath,
		Load: func() (*inventory.Inventory, state.Dir, func(), error) {
			inv, st, lock, err := a.loadLocked(cmd)
			if err != nil {
				return nil, "", nil, err
			}
			return inv, st, func() { lock.Unlock() }, nil
		},
		CacheDir: o.cacheDir, Offline: o.offline, DryRun: o.dryRun, ReplaceData: o.replaceData,
		ReplaceIdentity: o.replaceIdentity, Force: o.force, AcceptNewHostKeys: o.acceptNewHostKeys,
		VerifyTimeout: o.verifyTimeout, Out: out,
	})
	if err != nil || o.output != "json" {
		return err
	}
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// version is hardway's version for the backup's manifest.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
