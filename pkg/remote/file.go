package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// File is a file to put on a host.
type File struct {
	Path    string      // absolute path on the host
	Mode    os.FileMode // permission bits; 0: 0644
	Owner   string      // user name or uid; "": the connecting user (root under sudo)
	Group   string      // group name or gid; "": the owner's primary group
	DirMode os.FileMode // for parent directories that do not exist yet; 0: 0755

	// The content: Data, or a local file Source streamed from disk (large
	// files are never held in memory).
	Data   []byte
	Source string

	// Size and SHA256 (hex) of the content; filled by Prepare. Set them once
	// when the same file goes to several hosts, so it is hashed once.
	Size   int64
	SHA256 string
}

// Prepare computes Size and SHA256 if they are not set.
func (f *File) Prepare() error {
	if f.SHA256 != "" {
		return nil
	}
	h := sha256.New()
	if f.Source == "" {
		h.Write(f.Data)
		f.Size = int64(len(f.Data))
	} else {
		r, err := os.Open(f.Source)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		defer r.Close()
		n, err := io.Copy(h, r)
		if err != nil {
			return fmt.Errorf("%s: read %s: %w", f.Path, f.Source, err)
		}
		f.Size = n
	}
	f.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// PrepareFiles calls Prepare on every file.
func PrepareFiles(files []File) error {
	for i := range files {
		if err := files[i].Prepare(); err != nil {
			return err
		}
	}
	return nil
}

func (f *File) mode() os.FileMode {
	if f.Mode == 0 {
		return 0o644
	}
	return f.Mode.Perm()
}

func (f *File) dirMode() os.FileMode {
	if f.DirMode == 0 {
		return 0o755
	}
	return f.DirMode.Perm()
}

func (f *File) open() (io.ReadCloser, error) {
	if f.Source == "" {
		return io.NopCloser(bytes.NewReader(f.Data)), nil
	}
	r, err := os.Open(f.Source)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return r, nil
}

// Result says what a write changes (Compare) or changed (WriteFiles).
type Result struct {
	Path    string
	Content bool   // content missing or different: the file is (re)written
	Attrs   bool   // only mode or owner differ: fixed in place, content and mtime kept
	Why     string // "missing", "content", "mode 600 -> 644", ...: for plans and logs
}

// Changed reports whether anything differs.
func (r Result) Changed() bool { return r.Content || r.Attrs }

// Compare tells, for each file, what writing it would change, with one
// command on the host: sizes first, and SHA-256 only for files whose size
// already matches. It changes nothing; dry runs show its results.
func Compare(ctx context.Context, h Host, files []File) ([]Result, error) {
	return CompareCached(ctx, h, files, "")
}

// CompareCached is Compare with a stat cache on the host at cache (a file
// hardway owns, e.g. /var/lib/hardway/sums): a file whose size, inode, mtime
// and ctime are what they were when its SHA-256 was recorded (RecordSums) is
// not read again. ctime cannot be set from user space, so a file changed in
// any way since is hashed afresh; git's index works the same way. It turns
// the "nothing changed" check of a converged host from reading every binary
// into one stat per file. It only reads the cache: plans call it, and a plan
// changes nothing. Use Compare (no cache) where tampering matters more than
// time, as verify does.
func CompareCached(ctx context.Context, h Host, files []File, cache string) ([]Result, error) {
	if err := PrepareFiles(files); err != nil {
		return nil, err
	}
	var script strings.Builder
	fmt.Fprintf(&script, "# compare %d files\n", len(files))
	// OpenSSL's SHA-256 uses the CPU's SHA instructions, coreutils' does
	// not: three times faster on a converged cluster's 450 MB.
	script.WriteString("if command -v openssl >/dev/null 2>&1; then sum() { openssl dgst -sha256 -r; }; else sum() { sha256sum; }; fi\n")
	if cache != "" {
		// lookup KEY: the cached sum of a file with exactly this stat, if any.
		fmt.Fprintf(&script, "c=%s\n", Quote(cache))
		script.WriteString("lookup() { [ -f \"$c\" ] && awk -F '\\t' -v k=\"$1\" '$1==k {print $2; exit}' \"$c\"; }\n")
	}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("%s: %s: not an absolute path", h.Name(), f.Path)
		}
		hash := `s=$(sum < "$f") || exit 1`
		if cache != "" {
			hash = `k="$f $(stat -L -c '%s %i %.9Y %.9Z' -- "$f")"; s=$(lookup "$k"); ` +
				`if [ -z "$s" ]; then s=$(sum < "$f") || exit 1; fi`
		}
		// One line per file: "mode user uid group gid size sha" or "missing".
		fmt.Fprintf(&script, "f=%s; if [ -f \"$f\" ]; then set -- $(stat -L -c '%%a %%U %%u %%G %%g %%s' -- \"$f\"); "+
			"if [ \"$6\" = %d ]; then %s; else s=-; fi; echo \"$* ${s%%%% *}\"; "+
			"elif [ -e \"$f\" ]; then echo notfile; else echo missing; fi\n", Quote(f.Path), f.Size, hash)
	}
	out, err := h.Run(ctx, script.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("compare files: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(files) {
		return nil, fmt.Errorf("%s: compare files: got %d lines for %d files: %q", h.Name(), len(lines), len(files), out)
	}
	res := make([]Result, len(files))
	for i, f := range files {
		r := Result{Path: f.Path}
		fields := strings.Fields(lines[i])
		switch {
		case len(fields) == 1 && fields[0] == "missing":
			r.Content, r.Why = true, "missing"
		case len(fields) == 1 && fields[0] == "notfile":
			return nil, fmt.Errorf("%s: %s exists and is not a regular file", h.Name(), f.Path)
		case len(fields) == 7:
			mode, user, uid, group, gid, size, sum := fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6]
			var why []string
			if size != strconv.FormatInt(f.Size, 10) || sum != f.SHA256 {
				r.Content = true
				why = append(why, "content")
			}
			if want := strconv.FormatUint(uint64(f.mode()), 8); mode != want {
				r.Attrs = true
				why = append(why, "mode "+mode+" -> "+want)
			}
			if f.Owner != "" && f.Owner != user && f.Owner != uid {
				r.Attrs = true
				why = append(why, "owner "+user+" -> "+f.Owner)
			}
			if f.Group != "" && f.Group != group && f.Group != gid {
				r.Attrs = true
				why = append(why, "group "+group+" -> "+f.Group)
			}
			if r.Content {
				r.Attrs = false // a rewrite sets them anyway
			}
			r.Why = strings.Join(why, ", ")
		default:
			return nil, fmt.Errorf("%s: compare %s: unexpected output %q", h.Name(), f.Path, lines[i])
		}
		res[i] = r
	}
	return res, nil
}

// RecordSums records, in the stat cache at cache (see CompareCached), that
// the files as they are now on h have the SHA-256 they should have. Call it
// right after writing them: their entries then spare the next plan reading
// them. Entries for other paths are kept. A failure only costs hashing next
// time, so callers may ignore it.
func RecordSums(ctx context.Context, h Host, cache string, files []File) error {
	if err := PrepareFiles(files); err != nil {
		return err
	}
	var script strings.Builder
	fmt.Fprintf(&script, "# record %d sums\nc=%s; n=\"$c.new.$$\"\n", len(files), Quote(cache))
	script.WriteString("mkdir -p -m 0700 \"$(dirname \"$c\")\" && { [ -f \"$c\" ] && cat \"$c\"; true; } > \"$n\" || exit 1\n")
	for _, f := range files {
		// Drop the path's old entry, then add its current stat.
		fmt.Fprintf(&script, "f=%s; awk -F '\\t' -v p=\"$f \" 'index($1, p) != 1' \"$n\" > \"$n.1\" && mv -f \"$n.1\" \"$n\" && "+
			"printf '%%s %%s\\t%%s\\n' \"$f\" \"$(stat -L -c '%%s %%i %%.9Y %%.9Z' -- \"$f\")\" %s >> \"$n\" || exit 1\n", Quote(f.Path), f.SHA256)
	}
	script.WriteString("mv -f \"$n\" \"$c\"\n")
	if _, err := h.Run(ctx, script.String(), nil); err != nil {
		return fmt.Errorf("record sums: %w", err)
	}
	return nil
}

// WriteFile is WriteFiles for one file.
func WriteFile(ctx context.Context, h Host, f File) (Result, error) {
	res, err := WriteFiles(ctx, h, []File{f})
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// WriteFiles makes the files on h what they should be, and reports what
// changed. Files already right are not touched (their mtime stays, which
// is how callers prove nothing was re-sent); a file with the right content
// but the wrong mode or owner is fixed in place. Content is streamed over
// the command's stdin to a temporary file next to the target, checked for
// length, fsynced, given its mode and owner, and renamed over the target, so
// a reader — or a dropped connection — sees the old file or the new one,
// never a part. A temporary file left by an interrupted write is removed by
// the next write of the same file.
func WriteFiles(ctx context.Context, h Host, files []File) ([]Result, error) {
	res, err := Compare(ctx, h, files)
	if err != nil {
		return nil, err
	}
	for i := range files {
		switch {
		case res[i].Content:
			err = writeContent(ctx, h, &files[i])
		case res[i].Attrs:
			_, err = h.Run(ctx, "# fix mode and owner\n"+attrsScript(&files[i], Quote(files[i].Path)), nil)
		}
		if err != nil {
			return res[:i], err // names the host and, in its first line, the file
		}
	}
	return res, nil
}

func attrsScript(f *File, target string) string {
	var s strings.Builder
	// chown before chmod: chown clears setuid/setgid bits.
	if f.Owner != "" || f.Group != "" {
		owner := f.Owner
		if f.Group != "" {
			owner += ":" + f.Group
		}
		fmt.Fprintf(&s, "chown -- %s %s\n", Quote(owner), target)
	}
	fmt.Fprintf(&s, "chmod -- %o %s\n", f.mode(), target)
	return s.String()
}

// tempPrefix names the temporary files of a write to dir/base; the next
// write removes leftovers by this prefix.
func tempPrefix(p string) string { return "." + path.Base(p) + ".hardway-" }

func writeContent(ctx context.Context, h Host, f *File) error {
	dir := path.Dir(f.Path)
	var s strings.Builder
	// The first line names the script in error messages.
	fmt.Fprintf(&s, "# write %s\nset -e\numask 077\n", f.Path)
	// Create missing parents one by one: mkdir -p -m gives the mode only to
	// the last one.
	var parents []string
	for d := dir; d != "/" && d != "."; d = path.Dir(d) {
		parents = append([]string{d}, parents...)
	}
	for _, d := range parents {
		fmt.Fprintf(&s, "[ -d %[1]s ] || mkdir -m %[2]o -- %[1]s\n", Quote(d), f.dirMode())
	}
	prefix := Quote(dir + "/" + tempPrefix(f.Path))
	fmt.Fprintf(&s, "rm -f -- %s*\n", prefix)
	fmt.Fprintf(&s, "t=$(mktemp %sXXXXXX)\n", prefix)
	s.WriteString("trap 'rm -f -- \"$t\"' EXIT\ntrap 'rm -f -- \"$t\"; exit 1' HUP INT TERM PIPE\n")
	s.WriteString("cat > \"$t\"\n")
	// A dropped connection ends stdin early: cat succeeds with a short file,
	// which must never be renamed into place.
	fmt.Fprintf(&s, "n=$(stat -c %%s -- \"$t\")\n[ \"$n\" = %[1]d ] || { echo \"short write: $n of %[1]d bytes\" >&2; exit 1; }\n", f.Size)
	s.WriteString(attrsScript(f, "\"$t\""))
	s.WriteString("sync -- \"$t\"\n")
	fmt.Fprintf(&s, "mv -f -- \"$t\" %s\n", Quote(f.Path))
	s.WriteString("trap - EXIT\n")
	// fsync the directory so the rename survives a crash; best effort.
	fmt.Fprintf(&s, "sync -- %s 2>/dev/null || true\n", Quote(dir))
	r, err := f.open()
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = h.Run(ctx, s.String(), r)
	return err
}
