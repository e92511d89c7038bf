package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fetcher gets bytes from http(s) and file:// URLs with the behaviour a
// flaky mirror needs: a stalled transfer is cut, 5xx and broken connections
// are retried with backoff (resuming with Range), and a 404 fails at once.
// The zero value is ready to use.
type Fetcher struct {
	Client       *http.Client  // nil: a client built from http.DefaultTransport
	StallTimeout time.Duration // no byte for this long fails the attempt; default 30s
	Attempts     int           // tries per request; default 4
	Backoff      time.Duration // delay before the first retry, doubling; default 1s
}

const (
	defaultStall    = 30 * time.Second
	defaultAttempts = 4
	defaultBackoff  = time.Second
	copyBufSize     = 1 << 20
)

var errStalled = errors.New("transfer stalled")

// StatusError is an HTTP response that is not the content asked for.
type StatusError struct {
	URL  string
	Code int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: %d %s", e.URL, e.Code, http.StatusText(e.Code))
}

// IsNotFound reports whether err says the URL does not exist on the mirror.
func IsNotFound(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusNotFound || se.Code == http.StatusGone
	}
	return errors.Is(err, fs.ErrNotExist)
}

// retryable says whether another attempt can help: server trouble and
// broken transfers yes; a missing file, a refusal or a bad digest never.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == http.StatusTooManyRequests || se.Code == http.StatusRequestTimeout
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, errNotRetryable) {
		return false
	}
	if errors.Is(err, errStalled) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) // other transport failures: DNS, dial, TLS
}

var errNotRetryable = errors.New("not retryable")

func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		if f.Client.CheckRedirect != nil {
			return f.Client
		}
		// A client without its own redirect policy gets hardway's (a
		// copy: the caller's client stays as it was).
		c := *f.Client
		c.CheckRedirect = checkRedirect
		return &c
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Offsets for Range must count the bytes of the file itself.
	t.DisableCompression = true
	return &http.Client{Transport: t, CheckRedirect: checkRedirect}
}

// maxRedirects is net/http's own limit.
const maxRedirects = 10

// checkRedirect refuses a redirect to a weaker scheme: once a request went
// over https, a hop to http would let anyone on the path serve the file and
// its checksum together (both come from the mirror). Not retryable: the
// mirror answers the same way every time.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects: %w", maxRedirects, errNotRetryable)
	}
	for _, v := range via {
		if v.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("redirect from %s to %s refused: it leaves https: %w", v.URL.Redacted(), req.URL.Redacted(), errNotRetryable)
		}
	}
	return nil
}

func (f *Fetcher) stall() time.Duration {
	if f.StallTimeout > 0 {
		return f.StallTimeout
	}
	return defaultStall
}

// retry runs op until it succeeds, fails for good, or attempts run out.
func (f *Fetcher) retry(ctx context.Context, op func(ctx context.Context) error) error {
	attempts, delay := f.Attempts, f.Backoff
	if attempts <= 0 {
		attempts = defaultAttempts
	}
	if delay <= 0 {
		delay = defaultBackoff
	}
	for i := 1; ; i++ {
		err := op(ctx)
		if err == nil || i >= attempts || !retryable(err) || ctx.Err() != nil {
			if err != nil && i > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, i)
			}
			return err
		}
		// Jitter keeps parallel downloads from hammering a recovering mirror in step.
		d := delay + rand.N(delay/2+1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		delay *= 2
	}
}

// stallReader fails reads once no byte has arrived for the stall timeout,
// by cancelling the attempt's context (which also unblocks a pending Read).
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
	ctx   context.Context
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	if err != nil && !errors.Is(err, io.EOF) && errors.Is(context.Cause(s.ctx), errStalled) {
		return n, errStalled
	}
	return n, err
}

// open starts one attempt at rawURL from byte offset. It returns the body
// positioned at the returned start (offset when the server honoured Range,
// 0 when it sent the whole file), the total size if known (-1 otherwise) and
// a cleanup. The body fails with errStalled when the transfer stalls.
func (f *Fetcher) open(ctx context.Context, rawURL string, offset int64) (body io.Reader, start, size int64, done func(), err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, 0, 0, nil, fmt.Errorf("%q: %w: %w", rawURL, err, errNotRetryable)
	}
	switch u.Scheme {
	case "file":
		fl, err := os.Open(u.Path)
		if err != nil {
			return nil, 0, 0, nil, err
		}
		st, err := fl.Stat()
		if err != nil || !st.Mode().IsRegular() {
			fl.Close()
			return nil, 0, 0, nil, fmt.Errorf("%s: not a regular file: %w", u.Path, fs.ErrNotExist)
		}
		if offset > 0 && offset <= st.Size() {
			if _, err := fl.Seek(offset, io.SeekStart); err == nil {
				start = offset
			}
		}
		return fl, start, st.Size(), func() { fl.Close() }, nil
	case "http", "https":
	default:
		return nil, 0, 0, nil, fmt.Errorf("%s: unsupported scheme %q (use http, https or file): %w", rawURL, u.Scheme, errNotRetryable)
	}

	actx, cancel := context.WithCancelCause(ctx)
	d := f.stall()
	timer := time.AfterFunc(d, func() { cancel(errStalled) })
	cleanup := func() { timer.Stop(); cancel(nil) }
	req, err := http.NewRequestWithContext(actx, http.MethodGet, rawURL, nil)
	if err != nil {
		cleanup()
		return nil, 0, 0, nil, fmt.Errorf("%s: %w: %w", rawURL, err, errNotRetryable)
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	resp, err := f.client().Do(req)
	if err != nil {
		cleanup()
		if errors.Is(context.Cause(actx), errStalled) {
			return nil, 0, 0, nil, fmt.Errorf("GET %s: no response in %s: %w", rawURL, d, errStalled)
		}
		return nil, 0, 0, nil, err
	}
	done = func() { resp.Body.Close(); cleanup() }
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		s, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || s != offset {
			done()
			// A range we did not ask for: start over without one.
			return nil, 0, 0, nil, fmt.Errorf("GET %s: unexpected Content-Range %q: %w", rawURL, resp.Header.Get("Content-Range"), io.ErrUnexpectedEOF)
		}
		start, size = offset, total
	case resp.StatusCode == http.StatusOK:
		start, size = 0, resp.ContentLength
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
		done()
		// The partial is as long as (or longer than) the file: it is stale.
		return nil, 0, 0, nil, errRangeStale
	default:
		done()
		return nil, 0, 0, nil, &StatusError{URL: rawURL, Code: resp.StatusCode}
	}
	return &stallReader{r: resp.Body, timer: timer, d: d, ctx: actx}, start, size, done, nil
}

var errRangeStale = fmt.Errorf("partial download does not fit the file: %w", io.ErrUnexpectedEOF)

// parseContentRange reads "bytes 100-199/200" (total -1 when "*").
func parseContentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	a, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// GetSmall reads a small file (a checksum, stable-1.36.txt) whole.
func (f *Fetcher) GetSmall(ctx context.Context, rawURL string, max int64) ([]byte, error) {
	var out []byte
	err := f.retry(ctx, func(ctx context.Context) error {
		body, _, _, done, err := f.open(ctx, rawURL, 0)
		if err != nil {
			return err
		}
		defer done()
		out, err = io.ReadAll(io.LimitReader(body, max+1))
		if err != nil {
			return fmt.Errorf("GET %s: %w", rawURL, err)
		}
		if int64(len(out)) > max {
			return fmt.Errorf("GET %s: larger than %d bytes: %w", rawURL, max, errNotRetryable)
		}
		return nil
	})
	return out, err
}

// Download appends rawURL's content to w, which already holds w.Len()
// bytes of it from an earlier, interrupted attempt; it resumes from there
// with Range where the server allows and starts over where it does not.
// progress, if set, is told how many bytes w holds and the total (-1 unknown).
func (f *Fetcher) Download(ctx context.Context, rawURL string, w ResumableWriter, progress func(have, total int64)) error {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	buf := make([]byte, copyBufSize)
	return f.retry(ctx, func(ctx context.Context) error {
		body, start, size, done, err := f.open(ctx, rawURL, w.Len())
		if errors.Is(err, errRangeStale) {
			if terr := w.Truncate(); terr != nil {
				return terr
			}
			progress(0, -1)
		}
		if err != nil {
			return err
		}
		defer done()
		if start != w.Len() {
			if err := w.Truncate(); err != nil {
				return err
			}
		}
		progress(start, size)
		n, err := io.CopyBuffer(progressWriter{w, func() { progress(w.Len(), size) }}, body, buf)
		if err != nil {
			return fmt.Errorf("GET %s: %w", rawURL, err)
		}
		if size >= 0 && start+n != size {
			return fmt.Errorf("GET %s: got %d of %d bytes: %w", rawURL, start+n, size, io.ErrUnexpectedEOF)
		}
		return nil
	})
}

// ResumableWriter is where Download writes: it knows how much it holds and
// can start over.
type ResumableWriter interface {
	io.Writer
	Len() int64
	Truncate() error
}

type progressWriter struct {
	w  io.Writer
	on func()
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.on()
	return n, err
}

// Probe returns a cheap fingerprint of the file at rawURL (size and mtime
// for file://, ETag/Last-Modified/length from a HEAD for http) so a cached
// copy can be trusted without downloading again while the mirror's file is
// unchanged. "" means the mirror gave nothing to go on.
func (f *Fetcher) Probe(ctx context.Context, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	if u.Scheme == "file" {
		st, err := os.Stat(u.Path)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("file size=%d mtime=%d", st.Size(), st.ModTime().UnixNano())
	}
	ctx, cancel := context.WithTimeout(ctx, f.stall())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, rawURL, nil)
	if err != nil {
		return ""
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	et, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if et == "" && lm == "" {
		return ""
	}
	return fmt.Sprintf("http etag=%s last-modified=%s length=%d", et, lm, resp.ContentLength)
}
