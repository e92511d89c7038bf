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
	res, _, err := Inspect(ctx, h, files, cache, nil)
	return res, err
}

// statFormat is one line of Inspect's stat: "path\ttype\tmode user uid
// group gid size\tcache key". The cache key is size, inode, mtime and ctime:
// what RecordSums and Put record.
const statFormat = "%n\t%F\t%a %U %u %G %g %s\t%s %i %.9Y %.9Z"

// Inspect is CompareCached for files, plus the mode and owner ("755
// root:root", or "missing") of each directory in dirs, in at most two
// commands on h: one reads the stat cache and stats every path at once;
// only files whose size matches and whose stat the cache does not know are
// hashed, in a second command. A converged host is thus one round trip
// and three processes, whatever the number of files. It only reads.
func Inspect(ctx context.Context, h Host, files []File, cache string, dirs []string) ([]Result, []string, error) {
	if err := PrepareFiles(files); err != nil {
		return nil, nil, err
	}
	for _, p := range append(paths(files), dirs...) {
		if !path.IsAbs(p) {
			return nil, nil, fmt.Errorf("%s: %s: not an absolute path", h.Name(), p)
		}
		if strings.ContainsAny(p, "\t\n") {
			return nil, nil, fmt.Errorf("%s: %q: a tab or newline in a path", h.Name(), p)
		}
	}
	var script strings.Builder
	fmt.Fprintf(&script, "# compare %d files\n", len(files))
	if cache != "" {
		fmt.Fprintf(&script, "cat %s 2>/dev/null\n", Quote(cache))
	}
	script.WriteString("echo @stat\n")
	if len(files) > 0 {
		// A missing file prints nothing (stat's error is dropped): absent
		// from the output is missing.
		fmt.Fprintf(&script, "stat -L -c '%s' --", statFormat)
		for _, f := range files {
			script.WriteString(" " + Quote(f.Path))
		}
		script.WriteString(" 2>/dev/null\n")
	}
	script.WriteString("echo @dirs\n")
	if len(dirs) > 0 {
		script.WriteString("stat -c '%n\t%a %U:%G' --")
		for _, d := range dirs {
			script.WriteString(" " + Quote(d))
		}
		script.WriteString(" 2>/dev/null\n")
	}
	script.WriteString("true\n")
	out, err := h.Run(ctx, script.String(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("compare files: %w", err)
	}
	known := map[string]string{} // cache key -> sha256
	stats := map[string][]string{}
	dirState := map[string]string{}
	section := "cache"
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case l == "@stat" || l == "@dirs":
			section = l
			continue
		case l == "":
			continue
		}
		fs := strings.Split(l, "\t")
		switch {
		case section == "cache" && len(fs) == 2:
			known[fs[0]] = fs[1]
		case section == "@stat" && len(fs) == 4:
			stats[fs[0]] = fs[1:]
		case section == "@dirs" && len(fs) == 2:
			dirState[fs[0]] = fs[1]
		case section == "cache":
			// a line cut by an interrupted write: only costs a hash
		default:
			return nil, nil, fmt.Errorf("%s: compare files: unexpected output %q", h.Name(), l)
		}
	}
	res := make([]Result, len(files))
	sums := make([]string, len(files))
	var hash []int
	for i, f := range files {
		res[i].Path = f.Path
		st, ok := stats[f.Path]
		switch {
		case !ok:
			continue
		case !strings.HasPrefix(st[0], "regular"):
			return nil, nil, fmt.Errorf("%s: %s exists and is not a regular file", h.Name(), f.Path)
		}
		if strings.Fields(st[1])[5] != strconv.FormatInt(f.Size, 10) {
			sums[i] = "-"
			continue
		}
		if s, ok := known[f.Path+" "+st[2]]; ok && cache != "" {
			sums[i] = s
			continue
		}
		hash = append(hash, i)
	}
	if len(hash) > 0 {
		var hs strings.Builder
		fmt.Fprintf(&hs, "# hash %d files\n", len(hash))
		// OpenSSL's SHA-256 uses the CPU's SHA instructions, coreutils' does
		// not: three times faster on a converged cluster's 450 MB.
		hs.WriteString("if command -v openssl >/dev/null 2>&1; then sum() { openssl dgst -sha256 -r; }; else sum() { sha256sum; }; fi\n")
		for _, i := range hash {
			fmt.Fprintf(&hs, "s=$(sum < %s) || exit 1; echo \"${s%%%% *}\"\n", Quote(files[i].Path))
		}
		out, err := h.Run(ctx, hs.String(), nil)
		if err != nil {
			return nil, nil, fmt.Errorf("compare files: %w", err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != len(hash) {
			return nil, nil, fmt.Errorf("%s: compare files: got %d sums for %d files: %q", h.Name(), len(lines), len(hash), out)
		}
		for k, i := range hash {
			sums[i] = lines[k]
		}
	}
	for i, f := range files {
		st, ok := stats[f.Path]
		if !ok {
			res[i].Content, res[i].Why = true, "missing"
			continue
		}
		attrs := strings.Fields(st[1])
		if len(attrs) != 6 {
			return nil, nil, fmt.Errorf("%s: compare %s: unexpected output %q", h.Name(), f.Path, st[1])
		}
		res[i] = compareOne(f, attrs, sums[i])
	}
	var dirRes []string
	for _, d := range dirs {
		if s, ok := dirState[d]; ok {
			dirRes = append(dirRes, s)
		} else {
			dirRes = append(dirRes, "missing")
		}
	}
	return res, dirRes, nil
}

func paths(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// compareOne judges one existing file from its stat fields (mode user uid
// group gid size) and its sha256 ("-": not read, the size differs).
func compareOne(f File, fields []string, sum string) Result {
	r := Result{Path: f.Path}
	mode, user, uid, group, gid, size := fields[0], fields[1], fields[2], fields[3], fields[4], fields[5]
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
	return r
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
	return put(ctx, h, f, PutOptions{})
}

// PutOptions tune Put.
type PutOptions struct {
	// Markers are files created (empty, in existing directories) before
	// anything is written: a run that dies after the write still finds them.
	Markers []string
	// Cache is the stat cache (see CompareCached) that gets the written
	// file's entry, so that the next plan does not read it; "": none.
	Cache string
	// AttrsOnly fixes mode and owner in place: the content is right
	// (Compare said Attrs), and the mtime stays.
	AttrsOnly bool
	// Then is a shell command run once the file is in place, in the same
	// script; its failure fails the Put and removes the file, so that the
	// next Put runs it again; "": none.
	Then string
}

// Put makes f what it should be on h, in one command, without comparing
// first (the caller's plan did): the content is written as WriteFiles
// writes it (streamed to a temporary file, length checked, fsynced,
// renamed), after the markers, and its stat cache entry is appended.
func Put(ctx context.Context, h Host, f File, o PutOptions) error {
	if err := f.Prepare(); err != nil {
		return err
	}
	if !path.IsAbs(f.Path) {
		return fmt.Errorf("%s: %s: not an absolute path", h.Name(), f.Path)
	}
	return put(ctx, h, &f, o)
}

// markersScript creates the (empty) marker files, and their directories.
func markersScript(markers []string) string {
	var s strings.Builder
	for _, m := range markers {
		fmt.Fprintf(&s, "[ -d %[1]s ] || mkdir -p -m 0700 -- %[1]s\ntouch -- %[2]s\n", Quote(path.Dir(m)), Quote(m))
	}
	return s.String()
}

// parentsScript creates f's missing parent directories one by one: mkdir
// -p -m gives the mode only to the last one.
func parentsScript(f *File) string {
	var parents []string
	for d := path.Dir(f.Path); d != "/" && d != "."; d = path.Dir(d) {
		parents = append([]string{d}, parents...)
	}
	var s strings.Builder
	for _, d := range parents {
		fmt.Fprintf(&s, "[ -d %[1]s ] || mkdir -m %[2]o -- %[1]s\n", Quote(d), f.dirMode())
	}
	return s.String()
}

// cacheEntryScript appends f's entry to the stat cache at cache (best
// effort: an entry that is not written only costs a hash), keeping the
// cache under cacheLines.
func cacheEntryScript(cache string, f *File) string {
	return fmt.Sprintf("c=%s; { mkdir -p -m 0700 \"$(dirname \"$c\")\" && "+
		"printf '%%s %%s\\t%%s\\n' %s \"$(stat -L -c '%%s %%i %%.9Y %%.9Z' -- %s)\" %s >> \"$c\" && "+
		"if [ \"$(wc -l < \"$c\")\" -gt %d ]; then tail -n %d \"$c\" > \"$c.$$\" && mv -f \"$c.$$\" \"$c\"; fi; } 2>/dev/null || true\n",
		Quote(cache), Quote(f.Path), Quote(f.Path), f.SHA256, cacheLines, cacheLines/2)
}

// cacheLines bounds the stat cache: Put appends an entry per write, and past
// this many lines the oldest go (a lost entry only costs one hash).
const cacheLines = 2048

func put(ctx context.Context, h Host, f *File, o PutOptions) error {
	dir := path.Dir(f.Path)
	var s strings.Builder
	// The first line names the script in error messages.
	verb := "write"
	if o.AttrsOnly {
		verb = "fix mode and owner of"
	}
	fmt.Fprintf(&s, "# %s %s\nset -e\numask 077\n", verb, f.Path)
	s.WriteString(markersScript(o.Markers))
	if o.AttrsOnly {
		s.WriteString(attrsScript(f, Quote(f.Path)))
	} else {
		s.WriteString(parentsScript(f))
		prefix := Quote(dir + "/" + tempPrefix(f.Path))
		fmt.Fprintf(&s, "rm -f -- %s*\n", prefix)
		fmt.Fprintf(&s, "t=$(mktemp %sXXXXXX)\n", prefix)
		s.WriteString("trap 'rm -f -- \"$t\"' EXIT\ntrap 'rm -f -- \"$t\"; exit 1' HUP INT TERM PIPE\n")
		s.WriteString("cat > \"$t\"\n")
		// A dropped connection ends stdin early: cat succeeds with a short
		// file, which must never be renamed into place.
		fmt.Fprintf(&s, "n=$(stat -c %%s -- \"$t\")\n[ \"$n\" = %[1]d ] || { echo \"short write: $n of %[1]d bytes\" >&2; exit 1; }\n", f.Size)
		s.WriteString(attrsScript(f, "\"$t\""))
		s.WriteString("sync -- \"$t\"\n")
		fmt.Fprintf(&s, "mv -f -- \"$t\" %s\n", Quote(f.Path))
		s.WriteString("trap - EXIT\n")
		// fsync the directory so the rename survives a crash; best effort.
		fmt.Fprintf(&s, "sync -- %s 2>/dev/null || true\n", Quote(dir))
	}
	if o.Then != "" {
		// All or nothing: a file whose command failed is removed, so that
		// the next run finds it missing, writes it and runs the command
		// again (left in place, it would compare equal and never be). A subshell:
		// an exit in the command ends it, not the script.
		fmt.Fprintf(&s, "if ! ( %s\n); then rm -f -- %s; exit 1; fi\n", o.Then, Quote(f.Path))
	}
	if o.Cache != "" {
		s.WriteString(cacheEntryScript(o.Cache, f))
	}
	var stdin io.Reader
	if !o.AttrsOnly {
		r, err := f.open()
		if err != nil {
			return err
		}
		defer r.Close()
		stdin = r
	}
	_, err := h.Run(ctx, s.String(), stdin)
	return err
}
