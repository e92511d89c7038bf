package remote_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/sshdtest"
)

// The sshd runs on this machine, so the files the tests write over SSH are
// checked directly on the local file system.

func connect(t *testing.T) (*remote.SSHHost, *env) {
	t.Helper()
	e := newEnv(t, sshdtest.Options{})
	e.trust(t, e.srv.HostKeys...)
	return dial(t, e.config()), e
}

func stat(t *testing.T, p string) (os.FileMode, uint32, uint32, time.Time) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return st.Mode().Perm(), sys.Uid, sys.Gid, st.ModTime()
}

func lookupIDs(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

func TestWriteFile(t *testing.T) {
	h, e := connect(t)
	ctx := context.Background()
	owner := sshdtest.AddUser(t, e.srv.Dir, false)
	uid, gid := lookupIDs(t, owner.Name)
	base := t.TempDir()
	old := time.Now().Add(-time.Hour).Truncate(time.Second)

	tests := []struct {
		name      string
		before    func(p string) // prepares the file on the "host"
		file      remote.File
		want      remote.Result
		wantUID   uint32
		wantMTime bool // mtime kept (set to old by before)
	}{
		{
			name: "new file in new directories",
			file: remote.File{Path: "a/b/c/new.conf", Data: []byte("hello\n"), Mode: 0o600, DirMode: 0o750},
			want: remote.Result{Content: true, Why: "missing"},
		},
		{
			name: "unchanged file is not written",
			before: func(p string) {
				os.WriteFile(p, []byte("same\n"), 0o644)
				os.Chtimes(p, old, old)
			},
			file:      remote.File{Path: "same.conf", Data: []byte("same\n")},
			want:      remote.Result{},
			wantMTime: true,
		},
		{
			name: "same size, other content",
			before: func(p string) {
				os.WriteFile(p, []byte("aaaa\n"), 0o644)
				os.Chtimes(p, old, old)
			},
			file: remote.File{Path: "other.conf", Data: []byte("bbbb\n")},
			want: remote.Result{Content: true, Why: "content"},
		},
		{
			name: "only mode and owner differ: fixed in place",
			before: func(p string) {
				os.WriteFile(p, []byte("key\n"), 0o644)
				os.Chtimes(p, old, old)
			},
			file:      remote.File{Path: "key.pem", Data: []byte("key\n"), Mode: 0o600, Owner: owner.Name, Group: owner.Name},
			want:      remote.Result{Attrs: true, Why: "mode 644 -> 600, owner root -> " + owner.Name + ", group root -> " + owner.Name},
			wantUID:   uid,
			wantMTime: true,
		},
		{
			name: "owner by number",
			file: remote.File{Path: "num", Data: []byte("x"), Owner: fmt.Sprint(uid), Group: fmt.Sprint(gid), Mode: 0o640},
			want: remote.Result{Content: true, Why: "missing"}, wantUID: uid,
		},
		{
			name:   "empty file",
			before: func(p string) { os.WriteFile(p, []byte("not empty"), 0o644) },
			file:   remote.File{Path: "empty", Data: []byte{}},
			want:   remote.Result{Content: true, Why: "content"},
		},
		{
			name: "path with spaces and quotes",
			file: remote.File{Path: "it's a dir/f $x.txt", Data: []byte("q")},
			want: remote.Result{Content: true, Why: "missing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.file
			f.Path = filepath.Join(base, f.Path)
			if tt.before != nil {
				tt.before(f.Path)
			}
			got, err := remote.WriteFile(ctx, h, f)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Path = f.Path
			if got != want {
				t.Errorf("result = %+v, want %+v", got, want)
			}
			data, err := os.ReadFile(f.Path)
			if err != nil || !bytes.Equal(data, f.Data) {
				t.Errorf("content = %q, %v; want %q", data, err, f.Data)
			}
			mode, u, g, mtime := stat(t, f.Path)
			wantMode := f.Mode
			if wantMode == 0 {
				wantMode = 0o644
			}
			if mode != wantMode {
				t.Errorf("mode = %o, want %o", mode, wantMode)
			}
			if u != tt.wantUID || (tt.wantUID != 0 && g != gid) {
				t.Errorf("owner = %d:%d, want %d", u, g, tt.wantUID)
			}
			if tt.wantMTime != mtime.Equal(old) {
				t.Errorf("mtime = %v (old %v), kept = %v, want kept = %v", mtime, old, mtime.Equal(old), tt.wantMTime)
			}
			if f.DirMode != 0 {
				for d := filepath.Dir(f.Path); d != base; d = filepath.Dir(d) {
					if m, _, _, _ := stat(t, d); m != f.DirMode {
						t.Errorf("%s: mode %o, want %o", d, m, f.DirMode)
					}
				}
			}
			// Converged: a second write changes nothing.
			again, err := remote.WriteFile(ctx, h, f)
			if err != nil || again.Changed() {
				t.Errorf("second write: %+v, %v", again, err)
			}
			assertNoTemp(t, filepath.Dir(f.Path))
		})
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".hardway-") {
			t.Errorf("stray temporary file %s", filepath.Join(dir, e.Name()))
		}
	}
}

// cuttingHost kills its SSH connection after limit bytes of stdin went out.
type cuttingHost struct {
	*remote.SSHHost
	limit int64
}

func (c *cuttingHost) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if stdin != nil {
		stdin = &cutReader{r: stdin, left: c.limit, cut: func() { c.Client().Close() }}
	}
	return c.SSHHost.Run(ctx, cmd, stdin)
}

type cutReader struct {
	r    io.Reader
	left int64
	cut  func()
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.cut()
		return 0, errors.New("connection cut by the test")
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func TestWriteFileConnectionKilled(t *testing.T) {
	h, e := connect(t)
	ctx := context.Background()
	dir := t.TempDir()
	target := filepath.Join(dir, "etcd")
	if err := os.WriteFile(target, []byte("old binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := randomFile(t, 32<<20)
	f := remote.File{Path: target, Source: src, Mode: 0o755}

	_, err := remote.WriteFile(ctx, &cuttingHost{SSHHost: h, limit: 8 << 20}, f)
	if err == nil {
		t.Fatal("write over a killed connection succeeded")
	}
	t.Logf("killed write: %v", err)
	// Give the host's shell time to notice the short input and finish.
	time.Sleep(500 * time.Millisecond)
	if b, _ := os.ReadFile(target); string(b) != "old binary" {
		t.Fatalf("target changed by an interrupted write: %d bytes", len(b))
	}

	h2 := dial(t, e.config())
	res, err := remote.WriteFile(ctx, h2, f)
	if err != nil || !res.Content {
		t.Fatalf("write after reconnect: %+v, %v", res, err)
	}
	if sumFile(t, target) != sumFile(t, src) {
		t.Fatal("content differs after the retried write")
	}
	assertNoTemp(t, dir)
}

func TestWriteFileSudo(t *testing.T) {
	e := newEnv(t, sshdtest.Options{})
	e.trust(t, e.srv.HostKeys...)
	u := sshdtest.AddUser(t, e.srv.Dir, true)
	priv, pub := sshdtest.ClientKey(t, e.dir)
	e.srv.Authorize(t, u.Name, pub)
	cfg := e.config()
	cfg.User, cfg.IdentityFiles, cfg.Sudo = u.Name, []string{priv}, true
	h := dial(t, cfg)

	dir := t.TempDir() // 0700 root: the user alone could not even look inside
	f := remote.File{Path: filepath.Join(dir, "pki", "ca-key.pem"), Data: []byte("secret"), Mode: 0o600, DirMode: 0o700}
	res, err := remote.WriteFile(context.Background(), h, f)
	if err != nil || !res.Content {
		t.Fatalf("%+v, %v", res, err)
	}
	mode, uid, _, _ := stat(t, f.Path)
	if mode != 0o600 || uid != 0 {
		t.Errorf("mode %o uid %d, want 600 root", mode, uid)
	}
}

// TestWriteFileParallel uploads 100 MB to three sshd at once, as `up` does
// for the control-plane binaries.
func TestWriteFileParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the 100 MB upload")
	}
	src := randomFile(t, 100<<20)
	want := sumFile(t, src)
	type target struct {
		h   remote.Host
		dir string
	}
	var targets []target
	for range 3 {
		h, _ := connect(t)
		targets = append(targets, target{h, t.TempDir()})
	}
	f := remote.File{Path: "kube-apiserver", Source: src, Mode: 0o755}
	if err := f.Prepare(); err != nil {
		t.Fatal(err)
	}
	err := remote.ForEach(context.Background(), targets, 3, func(ctx context.Context, tg target) error {
		f := f
		f.Path = filepath.Join(tg.dir, "bin", f.Path)
		_, err := remote.WriteFile(ctx, tg.h, f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if got := sumFile(t, filepath.Join(tg.dir, "bin", "kube-apiserver")); got != want {
			t.Errorf("%s: sha256 %s, want %s", tg.h.Name(), got, want)
		}
	}
}

func randomFile(t testing.TB, size int64) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "src-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func sumFile(t testing.TB, p string) string {
	t.Helper()
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// The stat cache skips reading files whose stat is unchanged, and still
// catches a same-size edit whose mtime was put back (ctime moved). Comparing
// never writes the cache (plans compare); RecordSums does, after a write.
func TestCompareCached(t *testing.T) {
	h, _ := connect(t)
	ctx := context.Background()
	dir := t.TempDir()
	cache := filepath.Join(dir, "sums")
	p := filepath.Join(dir, "bin")
	want := bytes.Repeat([]byte("a"), 4096)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	files := []remote.File{{Path: p, Mode: 0o644, Data: want}}
	res, err := remote.CompareCached(ctx, h, files, cache)
	if err != nil || res[0].Changed() {
		t.Fatalf("compare: %+v %v", res, err)
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Fatalf("CompareCached wrote its cache: %v", err)
	}
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("x"), 0o644)
	if err := remote.RecordSums(ctx, h, cache, []remote.File{{Path: other, Mode: 0o644, Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // twice: the path's old entry is replaced, not repeated
		if err := remote.RecordSums(ctx, h, cache, files); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(cache)
	if n := strings.Count(string(b), p+" "); n != 1 || !strings.Contains(string(b), other+" 1 ") {
		t.Fatalf("cache has %d entries for %s, want 1, and keeps %s:\n%s", n, p, other, b)
	}
	if err != nil || !strings.Contains(string(b), p+" 4096 ") || !strings.Contains(string(b), fmt.Sprintf("%x", sha256.Sum256(want))) {
		t.Fatalf("cache %q %v", b, err)
	}
	// Poison the cache: an entry for the file's current stat with a wrong
	// sum must be believed (that is the point of the cache)...
	poisoned := strings.Replace(string(b), fmt.Sprintf("%x", sha256.Sum256(want)), strings.Repeat("0", 64), 1)
	os.WriteFile(cache, []byte(poisoned), 0o600)
	if res, _ := remote.CompareCached(ctx, h, files, cache); !res[0].Content {
		t.Fatal("the cached sum was not used")
	}
	// ...and Compare without a cache always reads.
	if res, _ := remote.Compare(ctx, h, files); res[0].Changed() {
		t.Fatal("Compare without cache disagrees")
	}
	// A same-size edit with the old mtime put back is still seen: ctime moved.
	st, _ := os.Stat(p)
	os.WriteFile(cache, b, 0o600)
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(p, bytes.Repeat([]byte("b"), 4096), 0o644)
	os.Chtimes(p, st.ModTime(), st.ModTime())
	if res, err := remote.CompareCached(ctx, h, files, cache); err != nil || !res[0].Content {
		t.Fatalf("edit with restored mtime not detected: %+v %v", res, err)
	}
}

// counting counts the commands run on a host.
type counting struct {
	remote.Host
	n int
}

func (c *counting) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	c.n++
	return c.Host.Run(ctx, cmd, stdin)
}

// Put writes without comparing, touches its markers first and records the
// file in the stat cache: the next Inspect of the converged files is one
// command (no hashing), and sees a same-size edit again. Inspect reports
// directories' modes and owners in the same command.
// Then runs once the file is in place, in the same command; its failure
// fails the Put and removes the file, so that the next run writes it and
// runs Then again.
func TestPutThen(t *testing.T) {
	h, _ := connect(t)
	ctx := context.Background()
	dir := t.TempDir()
	f := remote.File{Path: filepath.Join(dir, "sysusers.conf"), Mode: 0o600, Data: []byte("u etcd -\n")}
	if err := f.Prepare(); err != nil {
		t.Fatal(err)
	}
	ch := &counting{Host: h}
	copyTo := filepath.Join(dir, "applied")
	if err := remote.Put(ctx, ch, f, remote.PutOptions{Then: "cp " + remote.Quote(f.Path) + " " + remote.Quote(copyTo)}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(copyTo); err != nil || string(b) != "u etcd -\n" || ch.n != 1 {
		t.Fatalf("then saw %q (%v) in %d commands", b, err, ch.n)
	}
	err := remote.Put(ctx, h, f, remote.PutOptions{Then: "echo sysusers failed >&2; exit 3"})
	if err == nil || !strings.Contains(err.Error(), "sysusers failed") {
		t.Fatalf("a failing then: %v", err)
	}
	if _, err := os.Stat(f.Path); !os.IsNotExist(err) {
		t.Fatalf("the file is still there after a failing then: %v", err)
	}
}

func TestPutAndInspect(t *testing.T) {
	h, _ := connect(t)
	ctx := context.Background()
	dir := t.TempDir()
	cache := filepath.Join(dir, "state", "sums")
	marker := filepath.Join(dir, "marker")
	var files []remote.File
	for i := range 5 {
		files = append(files, remote.File{Path: filepath.Join(dir, fmt.Sprintf("d/f%d", i)), Mode: 0o640, Data: bytes.Repeat([]byte{byte('a' + i)}, 1000+i)})
	}
	if err := remote.PrepareFiles(files); err != nil {
		t.Fatal(err)
	}
	ch := &counting{Host: h}
	res, dirs, err := remote.Inspect(ctx, ch, files, cache, []string{dir, filepath.Join(dir, "nodir")})
	dm, duid, _, _ := stat(t, dir)
	du, _ := user.LookupId(fmt.Sprint(duid))
	if err != nil || ch.n != 1 || len(dirs) != 2 || !strings.HasPrefix(dirs[0], fmt.Sprintf("%o %s:", dm, du.Username)) || dirs[1] != "missing" {
		t.Fatalf("inspect: %d commands, dirs %q, %v", ch.n, dirs, err)
	}
	for _, r := range res {
		if r.Why != "missing" {
			t.Fatalf("before any write: %+v", r)
		}
	}
	for _, f := range files {
		if err := remote.Put(ctx, h, f, remote.PutOptions{Markers: []string{marker}, Cache: cache}); err != nil {
			t.Fatal(err)
		}
		if m, _, _, _ := stat(t, f.Path); m != 0o640 {
			t.Fatalf("%s: mode %o", f.Path, m)
		}
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("marker not touched:", err)
	}
	ch.n = 0
	res, _, err = remote.Inspect(ctx, ch, files, cache, nil)
	if err != nil || ch.n != 1 {
		t.Fatalf("converged inspect ran %d commands (want 1: nothing hashed): %v", ch.n, err)
	}
	for _, r := range res {
		if r.Changed() {
			t.Fatalf("after Put: %+v", r)
		}
	}
	// Without the cache the files are hashed: a second command.
	ch.n = 0
	if res, _, err := remote.Inspect(ctx, ch, files, "", nil); err != nil || ch.n != 2 || res[0].Changed() {
		t.Fatalf("uncached inspect: %d commands, %+v, %v", ch.n, res, err)
	}
	// A same-size edit, its mtime put back: ctime moved, so it is hashed
	// and seen; a mode change is fixed in place by an attrs-only Put.
	st, _ := os.Stat(files[1].Path)
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(files[1].Path, bytes.Repeat([]byte("z"), int(files[1].Size)), 0o640)
	os.Chtimes(files[1].Path, st.ModTime(), st.ModTime())
	os.Chmod(files[2].Path, 0o600)
	res, _, err = remote.Inspect(ctx, h, files, cache, nil)
	if err != nil || !res[1].Content || !res[2].Attrs || res[2].Content || res[0].Changed() {
		t.Fatalf("after edits: %+v %v", res, err)
	}
	_, _, _, mtime := stat(t, files[2].Path)
	if err := remote.Put(ctx, h, files[2], remote.PutOptions{AttrsOnly: true, Cache: cache}); err != nil {
		t.Fatal(err)
	}
	if m, _, _, mt := stat(t, files[2].Path); m != 0o640 || !mt.Equal(mtime) {
		t.Fatalf("attrs-only put: mode %o, mtime moved %v", m, !mt.Equal(mtime))
	}
	// The cache stays bounded however often files are written.
	os.WriteFile(cache, bytes.Repeat([]byte("/x 1 2 3 4\tabc\n"), 3000), 0o600)
	if err := remote.Put(ctx, h, files[0], remote.PutOptions{Cache: cache}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cache); bytes.Count(b, []byte("\n")) > 2048 || !bytes.Contains(b, []byte(files[0].Path+" ")) {
		t.Fatalf("cache has %d lines", bytes.Count(b, []byte("\n")))
	}
	// Anything but a regular file is an error, not "content".
	if _, _, err := remote.Inspect(ctx, h, []remote.File{{Path: dir, Data: []byte("x")}}, cache, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory as a file: %v", err)
	}
}

// Traffic counts what went over the connection: at least the stream sent.
func TestTraffic(t *testing.T) {
	h, _ := connect(t)
	s0, r0 := remote.Traffic()
	if _, err := h.Run(context.Background(), "cat > /dev/null", bytes.NewReader(make([]byte, 1<<20))); err != nil {
		t.Fatal(err)
	}
	s1, r1 := remote.Traffic()
	if s1-s0 < 1<<20 || s1-s0 > 2<<20 || r1 <= r0 {
		t.Fatalf("sent %d, received %d for a 1 MiB stream", s1-s0, r1-r0)
	}
}
