package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hardway/hardway/pkg/release"
)

type fetchFlags struct {
	cacheDir   string
	offline    bool
	updateLock bool
	bundle     string
	fromBundle string
	output     string
	jobs       int
}

func (a *App) newFetchCmd() *cobra.Command {
	var fl fetchFlags
	cmd := &cobra.Command{
		Use:   "fetch",
		Short: "Download and verify the release binaries and images; pin them in hardway.lock",
		Long: `fetch resolves the Kubernetes and etcd versions of the inventory, downloads the
binaries from the mirrors in releases:, verifies each against its published
checksum (<bin>.sha512, etcd's SHA256SUMS) and keeps them in the cache.

With workers: it also fetches kubelet, kube-proxy, containerd, runc, the CNI
plugins and crictl from their official GitHub release layouts (containerd's
.sha256sum, runc.sha256sum, the CNI tarball's .sha512, crictl's .sha256),
at the versions tested with the Kubernetes minor unless containerdVersion,
runcVersion, cniPluginsVersion or crictlVersion say otherwise, Traefik
(traefikVersion; the checksums file of its release) when the workers run the
node-local apiserver load balancer (network.apiServerLoadBalancer), and every
image tarball in images: (verified against its sha256 there or the
SHA256SUMS beside its URL, and checked to be a docker-archive holding that
image). A missing checksum is an error.

Each architecture the hosts use (arch:, and a host's own arch:) gets its own
files: the control-plane binaries and etcd for the control-plane hosts'
architectures, the worker binaries and the images listed for it for the
workers'.

The first run writes hardway.lock next to the inventory with the version,
arch, URL, sha256 and sha512 of every artifact: commit it. Later runs refuse bytes
that differ from it; --update-lock moves versions on purpose.

Air-gapped sites:
  hardway fetch --bundle release.tar         # where there is network
  hardway fetch --from-bundle release.tar    # where there is none
  hardway fetch --offline                    # the cache only; lists what is missing`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runFetch(cmd, fl) },
	}
	f := cmd.Flags()
	f.StringVar(&fl.cacheDir, "cache-dir", "", "download cache (default $XDG_CACHE_HOME/hardway or ~/.cache/hardway)")
	f.BoolVar(&fl.offline, "offline", false, "use the cache only, never the network")
	f.BoolVar(&fl.updateLock, "update-lock", false, "resolve the inventory's versions again and rewrite hardway.lock")
	f.StringVar(&fl.bundle, "bundle", "", "also write every artifact and the lock into this tar file")
	f.StringVar(&fl.fromBundle, "from-bundle", "", "install the artifacts of a bundle into the cache, verified, instead of downloading")
	f.StringVarP(&fl.output, "output", "o", "text", "output format: text or json")
	f.IntVar(&fl.jobs, "jobs", 4, "parallel downloads")
	return cmd
}

func (a *App) runFetch(cmd *cobra.Command, fl fetchFlags) error {
	if err := checkOutputFlag(fl.output); err != nil {
		return err
	}
	if fl.fromBundle != "" && (fl.bundle != "" || fl.offline) {
		return usageError{fmt.Errorf("--from-bundle cannot be combined with --bundle or --offline")}
	}
	inv, err := a.loadInventory()
	if err != nil {
		return err
	}
	opts := release.OptionsFor(inv)
	opts.CacheDir = fl.cacheDir
	opts.Offline = fl.offline
	opts.UpdateLock = fl.updateLock
	opts.Jobs = fl.jobs
	opts.Progress = release.NewProgress(a.Stderr, isTerminal(a.Stderr))

	var set *release.Set
	if fl.fromBundle != "" {
		set, err = release.ImportBundle(cmd.Context(), fl.fromBundle, opts)
	} else {
		set, err = release.Resolve(cmd.Context(), opts)
	}
	if err != nil {
		return err
	}
	if fl.bundle != "" {
		if err := release.WriteBundle(set, fl.bundle); err != nil {
			return err
		}
	}
	if fl.output == "json" {
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*release.Set
			Bundle string `json:"bundle,omitempty"`
		}{set, fl.bundle})
	}
	lockState := "unchanged"
	if set.LockWritten {
		lockState = "written: commit it"
	}
	platforms := make([]string, len(set.Arches))
	for i, arch := range set.Arches {
		platforms[i] = "linux/" + arch
	}
	fmt.Fprintf(a.Stdout, "Kubernetes %s, etcd %s, %s: %d artifacts verified\n", set.Kubernetes, set.Etcd, strings.Join(platforms, " + "), len(set.Artifacts))
	if w := set.Workers; w != nil {
		lb := ""
		if w.Traefik != "" {
			lb = ", traefik " + w.Traefik
		}
		fmt.Fprintf(a.Stdout, "workers: containerd %s, runc %s, CNI plugins %s, crictl %s%s, %d image(s)\n",
			w.Containerd, w.Runc, w.CNIPlugins, w.Crictl, lb, len(set.Images()))
	}
	fmt.Fprintf(a.Stdout, "lock:  %s (%s)\ncache: %s\n", set.LockPath, lockState, set.CacheDir)
	if fl.bundle != "" {
		fmt.Fprintf(a.Stdout, "bundle: %s\n", fl.bundle)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tARCH\tSHA256\tSOURCE")
	for _, x := range set.Artifacts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Name, x.Version, x.Arch, x.SHA256, x.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if imgs := set.Images(); len(imgs) > 0 {
		fmt.Fprintln(a.Stdout)
		tw = tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "IMAGE\tPLATFORM\tIMAGE ID")
		for _, x := range imgs {
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\n", x.Image.Name, x.Image.OS, x.Image.Arch, x.Image.ID)
		}
	}
	return tw.Flush()
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
