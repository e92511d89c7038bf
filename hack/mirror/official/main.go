// Command official is build.sh's first choice for each component: the
// official release, downloaded from the site `hardway fetch` uses by default
// and verified against the checksum files that site publishes, into the
// mirror's layout (the same as the site's). Building from source is the
// fallback, for a machine that cannot reach the site.
//
//	official -mirror /var/tmp/hardway/mirror [-arch amd64] [-probe 5s] [-site NAME=URL] kubernetes=v1.36.3 traefik=v3.7.13 ...
//
// For each component it prints one line on stdout, "official NAME" or
// "source NAME", and on stderr which path was taken and why. The first
// request to a site is the reachability check: one attempt, at most -probe
// long; a site that failed it is not asked again in the same run. A site that
// answers with an error, or a transfer that breaks off, also means "source",
// and the mirror is left as it was. A downloaded file whose digest is not the
// published one stops everything (exit 1): never a reason to build instead.
//
//	official -extract TARBALL -into DIR MEMBER...
//
// copies MEMBERs of a tarball already taken and verified (kubernetes-test's
// kubernetes/test/bin/e2e.test and ginkgo) into DIR under their base names.
//
//	official -elf ARCH FILE...
//	official -uname ARCH
//
// check that each FILE is an ELF binary built for ARCH (amd64, arm64), and
// print what `uname -m` says on a host of ARCH: build.sh's cross builds read
// hardway's own architecture table (pkg/platform) instead of a copy of it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/platform"
)

func main() {
	mirror := flag.String("mirror", "", "the mirror directory (build.sh's $MIRROR)")
	arch := flag.String("arch", runtime.GOARCH, "architecture of the release files")
	probe := flag.Duration("probe", 5*time.Second, "reachability check: the longest the first request to a site may take")
	sites := map[string]string{}
	flag.Func("site", "NAME=URL: take NAME from URL instead of its official site (a copy with the same layout)", func(v string) error {
		name, u, ok := strings.Cut(v, "=")
		if !ok || name == "" || u == "" {
			return fmt.Errorf("%q is not NAME=URL", v)
		}
		sites[name] = u
		return nil
	})
	extract := flag.String("extract", "", "TARBALL: copy the MEMBERs named in the arguments out of it, into -into")
	into := flag.String("into", "", "with -extract: the directory the members go to")
	elfArch := flag.String("elf", "", "ARCH: check that each FILE in the arguments is an ELF binary for ARCH")
	unameOf := flag.String("uname", "", "ARCH: print what uname -m says on a host of ARCH")
	flag.Parse()
	if *elfArch != "" || *unameOf != "" {
		if err := archTool(os.Stdout, *elfArch, *unameOf, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "official:", err)
			os.Exit(1)
		}
		return
	}
	if *extract != "" {
		if *into == "" || flag.NArg() == 0 {
			fmt.Fprintln(os.Stderr, "usage: official -extract TARBALL -into DIR MEMBER...")
			os.Exit(2)
		}
		if err := Extract(*extract, *into, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "official:", err)
			os.Exit(1)
		}
		return
	}
	if *mirror == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: official -mirror DIR [-arch ARCH] [-probe 5s] [-site NAME=URL] NAME=VERSION...")
		os.Exit(2)
	}
	f := Fetcher{Probe: *probe, Log: func(format string, a ...any) { fmt.Fprintf(os.Stderr, "[official] "+format+"\n", a...) }}
	if err := run(context.Background(), os.Stdout, f, *mirror, *arch, flag.Args(), sites); err != nil {
		fmt.Fprintln(os.Stderr, "official:", err)
		os.Exit(1)
	}
}

// run takes each NAME=VERSION's official release, or says "source" for it.
// bases, when set, replaces the official sites by component name (-site: a
// copy laid out the same way; the tests' loopback servers).
func run(ctx context.Context, out io.Writer, f Fetcher, mirror, arch string, args []string, bases map[string]string) error {
	if f.Log == nil {
		f.Log = func(string, ...any) {}
	}
	unreachable := map[string]string{} // site host -> why
	for _, a := range args {
		name, version, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q is not NAME=VERSION", a)
		}
		c, err := Layout(name, version, arch)
		if err != nil {
			return err
		}
		if b, ok := bases[name]; ok {
			c.Base = b
		}
		host := c.Base
		if u, err := url.Parse(c.Base); err == nil {
			host = u.Host
		}
		var o Outcome
		if why, ok := unreachable[host]; ok {
			o = Outcome{Reason: why, Unreachable: true}
		} else if o, err = f.Fetch(ctx, c, mirror); err != nil {
			return err
		}
		if o.Official {
			f.Log("%s %s: the official release from %s, checksums verified", name, version, c.Base)
			fmt.Fprintf(out, "official %s\n", name)
			continue
		}
		if o.Unreachable {
			unreachable[host] = o.Reason
		}
		f.Log("%s %s: %s: building from source", name, version, o.Reason)
		fmt.Fprintf(out, "source %s\n", name)
	}
	return nil
}

// archTool is -elf and -uname.
func archTool(out io.Writer, elfArch, unameOf string, files []string) error {
	if unameOf != "" {
		a, ok := platform.Lookup(unameOf)
		if !ok {
			return fmt.Errorf("%q is not an architecture hardway installs for (%s)", unameOf, strings.Join(platform.Names(), ", "))
		}
		_, err := fmt.Fprintln(out, a.Uname)
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("-elf %s: no files", elfArch)
	}
	for _, f := range files {
		if err := platform.CheckELF(f, elfArch); err != nil {
			return err
		}
	}
	return nil
}
