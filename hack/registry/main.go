// Command registry serves the images of docker-archive tarballs over plain
// HTTP as an OCI registry: the lab's registry mirror, for the workers'
// registries: (a pod with imagePullPolicy: Always pulls, which imported
// tarballs cannot satisfy).
//
//	registry -listen 10.240.16.1:5000 -pidfile /run/hardway-registry.pid \
//	  $HARDWAY_MIRROR/images/*.tar $HARDWAY_MIRROR/conformance-images/*.tar
//
// Each image is served under its repository and tag without the registry
// (registry.k8s.io/e2e-test-images/agnhost:2.55 as
// /v2/e2e-test-images/agnhost/manifests/2.55, and by its digest), which is
// how containerd asks a mirror for it. It is a dev tool, like mkimage:
// go-containerregistry's pkg/registry answers the protocol, and the blobs are
// read from the tarballs at each request, never copied (a gigabyte of
// conformance images costs neither memory nor disk). The manifests are
// pushed into it in-process with pkg/v1/remote before it listens: once the
// pidfile is written, every image is there.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5000", "address to serve on (host:port; port 0 picks one, logged)")
	pidfile := flag.String("pidfile", "", "write the process ID here once every image is served; removed on exit")
	verbose := flag.Bool("v", false, "log every request")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: registry [-listen ADDR] [-pidfile FILE] [-v] TARBALL...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := log.New(os.Stderr, "registry: ", 0)
	cfg := config{listen: *listen, pidfile: *pidfile, tarballs: flag.Args(), log: logger}
	if *verbose {
		cfg.requests = logger
	}
	if err := run(ctx, cfg); err != nil {
		logger.Print(err)
		os.Exit(1)
	}
}

type config struct {
	listen   string
	pidfile  string
	tarballs []string
	log      *log.Logger
	requests *log.Logger       // nil: requests are not logged
	ready    func(addr string) // called once serving (tests: the port of :0)
}

// run serves until ctx ends (SIGTERM), then shuts the server down.
func run(ctx context.Context, cfg config) error {
	if len(cfg.tarballs) == 0 {
		return errors.New("no tarballs: pass the docker-archive tarballs to serve, e.g. $HARDWAY_MIRROR/images/*.tar")
	}
	images, blobs, err := load(cfg.tarballs)
	if err != nil {
		return err
	}
	reqLog := cfg.requests
	if reqLog == nil {
		reqLog = log.New(io.Discard, "", 0)
	}
	h := registry.New(registry.WithBlobHandler(blobs), registry.Logger(reqLog))
	// In-process: the blobs are already there (remote.Write finds each by a
	// HEAD and sends none), so only the manifests go in.
	for _, im := range images {
		if err := remote.Write(im.local, im.img, remote.WithContext(ctx), remote.WithTransport(handlerTransport{h})); err != nil {
			return fmt.Errorf("serve %s: %w", im.tag, err)
		}
		cfg.log.Printf("serving %s as /%s:%s (%s)", im.tag, im.tag.RepositoryStr(), im.tag.TagStr(), im.digest)
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w (is another registry running on %s?)", err, cfg.listen)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	cfg.log.Printf("listening on %s (plain http) with %d images from %d tarballs", ln.Addr(), len(images), len(cfg.tarballs))
	if cfg.pidfile != "" {
		if err := os.WriteFile(cfg.pidfile, fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
			_ = srv.Close()
			return fmt.Errorf("pidfile: %w", err)
		}
		defer os.Remove(cfg.pidfile)
	}
	if cfg.ready != nil {
		cfg.ready(ln.Addr().String())
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Let pulls in flight finish, but not forever: a stuck client must not
	// keep a lab from tearing down.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	cfg.log.Print("stopped")
	return nil
}

// image is one tag of a tarball, and where it is pushed in-process.
type image struct {
	tag    name.Tag // as the tarball names it
	local  name.Tag // the same repository and tag in the served registry
	img    v1.Image
	digest v1.Hash
}

// load reads every tag of every tarball and indexes their blobs.
func load(paths []string) ([]image, *tarballBlobs, error) {
	blobs := &tarballBlobs{m: map[v1.Hash]blob{}}
	var out []image
	seen := map[string]v1.Hash{} // repository:tag -> digest
	for _, p := range paths {
		opener := func() (io.ReadCloser, error) { return os.Open(p) }
		mf, err := tarball.LoadManifest(opener)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w (is it a docker-archive tarball, as 'docker save' and mkimage write?)", p, err)
		}
		tags := 0
		for _, d := range mf {
			for _, rt := range d.RepoTags {
				tags++
				tag, err := name.NewTag(rt, name.StrictValidation)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: tag %q: %w", p, rt, err)
				}
				img, err := tarball.Image(opener, &tag)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %w", p, rt, err)
				}
				digest, err := img.Digest()
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %w", p, rt, err)
				}
				// One namespace for every registry: a mirror is asked for the
				// repository and tag only.
				key := tag.RepositoryStr() + ":" + tag.TagStr()
				if prev, dup := seen[key]; dup {
					if prev != digest {
						return nil, nil, fmt.Errorf("%s: %s: /%s is already served with another image (%s); serve one of them from another registry", p, rt, key, prev)
					}
					continue
				}
				seen[key] = digest
				if err := blobs.add(img); err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %w", p, rt, err)
				}
				local, err := name.NewTag("hardway-registry.invalid/"+key, name.Insecure)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %w", p, rt, err)
				}
				out = append(out, image{tag: tag, local: local, img: img, digest: digest})
			}
		}
		if tags == 0 {
			return nil, nil, fmt.Errorf("%s: no image in it has a tag (RepoTags): nothing to serve it as", p)
		}
	}
	return out, blobs, nil
}

// blob is a config or a layer, opened anew for each request.
type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

// tarballBlobs serves the tarballs' blobs: a registry.BlobHandler (and
// BlobStatHandler) that cannot be written to; the repository does not
// matter, a blob is its digest.
type tarballBlobs struct{ m map[v1.Hash]blob }

func (b *tarballBlobs) add(img v1.Image) error {
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	h, err := img.ConfigName()
	if err != nil {
		return err
	}
	b.m[h] = blob{size: int64(len(cfg)), open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cfg)), nil }}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		b.m[d] = blob{size: size, open: l.Compressed}
	}
	return nil
}

func (b *tarballBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	bl, ok := b.m[h]
	if !ok {
		return nil, registry.ErrNotFound
	}
	return bl.open()
}

func (b *tarballBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	bl, ok := b.m[h]
	if !ok {
		return 0, registry.ErrNotFound
	}
	return bl.size, nil
}

// handlerTransport answers requests with the handler itself, in-process:
// the push needs no listener.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}
