package remote

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// Download is a file a host downloads itself instead of receiving it over
// SSH: the bytes at URL, whose SHA-256 and size are pinned by the caller
// (hardway.lock). The host checks both with sha256sum before it uses the
// bytes in any way; on a mismatch it deletes what it downloaded, installs
// nothing and the command fails with a *DigestError.
type Download struct {
	Name   string // for messages: "kube-apiserver", "containerd-2.4.2-linux-amd64.tar.gz"
	URL    string // http or https
	SHA256 string // hex, pinned
	Size   int64
	// Archive: the download is a gzip'd tar; each Install names the member
	// it takes out of it (tar -xzf -O), whose own pinned digest is checked
	// again before it is installed.
	Archive  bool
	Installs []Install
	// WorkDir holds an archive (or a file installed at several paths)
	// while it is checked and unpacked; "": /var/lib/hardway.
	WorkDir string
}

// Install is one file made from a Download: File's Path, Mode, Owner and
// Group as for Put, and its Size and SHA256 pinned (the content is not
// read locally: leave Data and Source empty).
type Install struct {
	File   File
	Member string // Archive: the path inside the archive ("bin/containerd")
}

// DigestError says a host downloaded bytes that are not the pinned ones. The
// host deleted them and installed nothing.
type DigestError struct {
	Host, Name, URL string
	Want, Got       string // sha256, hex
	WantSize        int64
	GotSize         int64
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s: %s from %s is not the pinned file: sha256 %s (%d bytes), pinned %s (%d bytes); deleted, nothing installed",
		e.Host, e.Name, e.URL, e.Got, e.GotSize, e.Want, e.WantSize)
}

// ErrNoFetchTool is a host that has neither curl nor wget.
var ErrNoFetchTool = errors.New("neither curl nor wget on the host")

// hostFetched counts the bytes hosts downloaded themselves (FetchOnHost),
// in this process: what did not cross the operator's link.
var hostFetched atomic.Int64

// HostFetched returns the bytes hosts downloaded themselves so far.
func HostFetched() int64 { return hostFetched.Load() }

// Exit codes of the fetch script that mean something to FetchOnHost.
const (
	exitDigest = 65 // the bytes are not the pinned ones
	exitNoTool = 69 // no curl, no wget
)

// FetchTools is the shell test a fetching host must pass (preflight): a
// downloader, sha256sum, and tar and gzip for archives.
const FetchTools = "curl|wget sha256sum tar gzip"

// fetchWork is where a host keeps a download that is not installed as it
// is (an archive, or a file installed at several paths) while it is checked
// and unpacked; removed when the command ends, however it ends.
const fetchWork = "/var/lib/hardway"

var hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FetchOnHost has h download d and install its files, atomically each
// (temporary file next to the target, checked, fsynced, renamed), after
// creating o.Markers; o.Cache gets each installed file's stat-cache entry.
// Everything runs in one command; only the script crosses the connection.
func FetchOnHost(ctx context.Context, h Host, d Download, o PutOptions) error {
	script, err := fetchScript(d, o)
	if err != nil {
		return fmt.Errorf("%s: %w", h.Name(), err)
	}
	_, err = h.Run(ctx, script, nil)
	if err == nil {
		hostFetched.Add(d.Size)
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		switch ee.Code {
		case exitDigest:
			if de := parseDigestError(ee.Stderr); de != nil {
				de.Host, de.URL, de.Want, de.WantSize = h.Name(), d.URL, d.SHA256, d.Size
				for _, in := range d.Installs {
					if de.Name == d.Name+":"+in.Member {
						de.Want, de.WantSize = in.File.SHA256, in.File.Size
					}
				}
				return de
			}
		case exitNoTool:
			return fmt.Errorf("%s: fetch %s: %w", h.Name(), d.Name, ErrNoFetchTool)
		}
	}
	return err
}

// fetchScript is the host's command for d. Phase one downloads and checks
// every byte, into temporary files; only when all of them are right does
// phase two give them their mode and owner and rename them into place.
func fetchScript(d Download, o PutOptions) (string, error) {
	u, err := url.Parse(d.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("fetch %s: %q is not an http(s) URL a host can download", d.Name, d.URL)
	}
	if !hexRE.MatchString(d.SHA256) || d.Size <= 0 {
		return "", fmt.Errorf("fetch %s: no pinned sha256 and size", d.Name)
	}
	if len(d.Installs) == 0 {
		return "", fmt.Errorf("fetch %s: nothing to install", d.Name)
	}
	for _, in := range d.Installs {
		f := in.File
		if !path.IsAbs(f.Path) || !hexRE.MatchString(f.SHA256) || f.Size < 0 {
			return "", fmt.Errorf("fetch %s: install %q: want an absolute path with a pinned sha256 and size", d.Name, f.Path)
		}
		if d.Archive != (in.Member != "") {
			return "", fmt.Errorf("fetch %s: install %s: a member is named for archives only", d.Name, f.Path)
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# fetch %s on the host\nset -e\numask 077\n", d.Name)
	// A transfer slower than 1 byte/s for 60 s is cut and retried, as the
	// operator's own downloads are after a stall.
	fmt.Fprintf(&s, `if command -v curl >/dev/null 2>&1; then get() { curl -fsSL --retry 3 --connect-timeout 10 --speed-limit 1 --speed-time 60 -o "$2" -- "$1"; }
elif command -v wget >/dev/null 2>&1; then get() { wget -q -T 30 -t 3 -O "$2" -- "$1"; }
else echo "neither curl nor wget on this host" >&2; exit %d; fi
# check FILE SIZE SHA256 NAME: the pinned bytes, or the file is deleted and nothing is installed
check() {
  n=$(stat -c %%s -- "$1"); s=$(sha256sum < "$1"); s=${s%%%% *}
  if [ "$n" != "$2" ] || [ "$s" != "$3" ]; then rm -f -- "$1"; echo "hardway-digest-mismatch	$4	$n	$s" >&2; exit %d; fi
}
`, exitNoTool, exitDigest)
	// The markers once the host can fetch at all, before any byte moves.
	s.WriteString(markersScript(o.Markers))
	// Temporary files: w (the work directory) and t0..tN (next to each
	// target); all removed on any exit before they are renamed.
	temps := []string{`${w:+"$w"}`}
	for i := range d.Installs {
		temps = append(temps, fmt.Sprintf(`${t%d:+"$t%d"}`, i, i))
	}
	rm := "rm -rf -- " + strings.Join(temps, " ")
	fmt.Fprintf(&s, "trap '%s' EXIT\ntrap '%s; exit 1' HUP INT TERM PIPE\n", rm, rm)

	direct := !d.Archive && len(d.Installs) == 1
	if !direct {
		work := d.WorkDir
		if work == "" {
			work = fetchWork
		}
		// A work directory an earlier run lost (its connection killed
		// before the trap ran) goes after an hour; a running one is younger.
		fmt.Fprintf(&s, "mkdir -p -m 0700 %[1]s\nfind %[1]s -maxdepth 1 -name '.fetch-*' -mmin +60 -exec rm -rf -- {} + 2>/dev/null || true\n"+
			"w=$(mktemp -d %[1]s/.fetch-XXXXXX)\n", Quote(work))
		fmt.Fprintf(&s, "get %s \"$w/dl\"\ncheck \"$w/dl\" %d %s %s\n", Quote(d.URL), d.Size, d.SHA256, Quote(d.Name))
	}
	for i, in := range d.Installs {
		f := in.File
		s.WriteString(parentsScript(&f))
		prefix := Quote(path.Dir(f.Path) + "/" + tempPrefix(f.Path))
		fmt.Fprintf(&s, "rm -f -- %s*\nt%d=$(mktemp %sXXXXXX)\n", prefix, i, prefix)
		t := fmt.Sprintf(`"$t%d"`, i)
		switch {
		case direct:
			fmt.Fprintf(&s, "get %s %s\ncheck %s %d %s %s\n", Quote(d.URL), t, t, d.Size, d.SHA256, Quote(d.Name))
			continue // the download is the file: checked once
		case d.Archive:
			// GNU tar names members as stored: "bridge" may be "./bridge".
			m := Quote(in.Member)
			fmt.Fprintf(&s, "tar -xzf \"$w/dl\" -O -- %s > %s 2>/dev/null || tar -xzf \"$w/dl\" -O -- %s > %s\n", m, t, Quote("./"+in.Member), t)
		default:
			fmt.Fprintf(&s, "cp -- \"$w/dl\" %s\n", t)
		}
		fmt.Fprintf(&s, "check %s %d %s %s\n", t, f.Size, f.SHA256, Quote(d.Name+":"+in.Member))
	}
	for i, in := range d.Installs {
		f := in.File
		t := fmt.Sprintf(`"$t%d"`, i)
		s.WriteString(attrsScript(&f, t))
		fmt.Fprintf(&s, "sync -- %s\nmv -f -- %s %s\nt%d=\n", t, t, Quote(f.Path), i)
		fmt.Fprintf(&s, "sync -- %s 2>/dev/null || true\n", Quote(path.Dir(f.Path)))
		if o.Cache != "" {
			s.WriteString(cacheEntryScript(o.Cache, &f))
		}
	}
	return s.String(), nil
}

// parseDigestError reads the check's line on stderr:
// "hardway-digest-mismatch\tNAME\tSIZE\tSHA256".
func parseDigestError(stderr string) *DigestError {
	for _, l := range strings.Split(stderr, "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 || f[0] != "hardway-digest-mismatch" {
			continue
		}
		n, _ := strconv.ParseInt(f[2], 10, 64)
		return &DigestError{Name: f[1], Got: f[3], GotSize: n}
	}
	return nil
}
