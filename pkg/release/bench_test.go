package release

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchFile writes HARDWAY_BENCH_MB (default 500, the size of a control-plane
// set) of incompressible bytes.
func benchFile(b *testing.B) (string, int64) {
	b.Helper()
	mb := 500
	if s := os.Getenv("HARDWAY_BENCH_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	p := filepath.Join(b.TempDir(), "blob")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	for range mb {
		r.Read(buf)
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return p, int64(mb) << 20
}

// timeCmd runs a command n times and returns the mean wall time.
func timeCmd(b *testing.B, n int, name string, args ...string) time.Duration {
	b.Helper()
	if _, err := exec.LookPath(name); err != nil {
		b.Skipf("%s not installed", name)
	}
	start := time.Now()
	for range n {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v: %s", name, err, out)
		}
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkVerifySHA512 reports hardway's sha512 of a file as a ratio to
// sha512sum on the same file (1.0 = as fast; lower is better).
func BenchmarkVerifySHA512(b *testing.B) {
	p, size := benchFile(b)
	want := strings.Fields(string(must(exec.Command("sha512sum", p).Output())))[0]
	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		got, err := SHA512File(p)
		if err != nil || got != want {
			b.Fatalf("sha512 %s, %v; want %s", got, err, want)
		}
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	ref := timeCmd(b, 3, "sha512sum", p)
	b.ReportMetric(float64(ours)/float64(ref), "x-sha512sum")
	b.ReportMetric(float64(ref.Milliseconds()), "sha512sum-ms")
}

// BenchmarkDownload reports a download from a loopback HTTP server, written
// to disk and hashed (sha256 + sha512) as hardway does, as a ratio to curl
// writing the same file.
func BenchmarkDownload(b *testing.B) {
	p, size := benchFile(b)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, p) }))
	b.Cleanup(srv.Close)
	dir := b.TempDir()
	c := Cache{Dir: dir}
	f := &Fetcher{}
	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		pt, err := c.openPartial(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Download(ctx, srv.URL, pt, nil); err != nil {
			b.Fatal(err)
		}
		if pt.Len() != size {
			b.Fatalf("got %d bytes", pt.Len())
		}
		pt.h.sum()
		pt.discard()
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	ref := timeCmd(b, 3, "curl", "-sSf", "-o", filepath.Join(dir, "curl.out"), srv.URL)
	b.ReportMetric(float64(ours)/float64(ref), "x-curl")
	b.ReportMetric(float64(ref.Milliseconds()), "curl-ms")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
