package remote_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/remote/sshdtest"
)

// BenchmarkUpload100MB writes a 100 MB file to one sshd with WriteFile and,
// in the same iteration, with OpenSSH's scp; it reports our speed as a
// fraction of scp's (goal: >= 0.9). ns/op is WriteFile's time alone.
// The "sftp" sub-benchmark is the alternative transfer (pkg/sftp on the same
// connection), kept here as the measurement behind the choice of stdin.
func BenchmarkUpload100MB(b *testing.B) {
	const size = 100 << 20
	src := randomFile(b, size)
	e := newBenchEnv(b)
	h := e.host
	dir := b.TempDir()
	target := filepath.Join(dir, "kube-apiserver")
	f := remote.File{Path: target, Source: src, Mode: 0o755}
	if err := f.Prepare(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	b.Run("stdin-vs-scp", func(b *testing.B) {
		b.SetBytes(size)
		var ours, scp time.Duration
		for b.Loop() {
			b.StopTimer()
			os.Remove(target)
			start := time.Now()
			cmd := exec.Command("scp", "-q", "-i", e.key, "-o", "BatchMode=yes",
				"-o", "UserKnownHostsFile="+e.knownHosts, "-o", "StrictHostKeyChecking=yes",
				"-P", strconv.Itoa(e.srv.Port), src, e.user+"@"+e.srv.Host+":"+target+".scp")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("scp: %v: %s", err, out)
			}
			scp += time.Since(start)
			os.Remove(target + ".scp")
			b.StartTimer()
			start = time.Now()
			res, err := remote.WriteFile(ctx, h, f)
			ours += time.Since(start)
			if err != nil || !res.Content {
				b.Fatalf("%+v, %v", res, err)
			}
		}
		b.ReportMetric(scp.Seconds()/ours.Seconds(), "speed/scp")
	})

	b.Run("sftp", func(b *testing.B) {
		b.SetBytes(size)
		c, err := sftp.NewClient(h.Client(), sftp.UseConcurrentWrites(true))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for b.Loop() {
			// The same steps as WriteFile: temp file, fsync, chmod, rename.
			r, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			tmp := target + ".sftp-tmp"
			w, err := c.Create(tmp)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.ReadFrom(r); err != nil {
				b.Fatal(err)
			}
			r.Close()
			if err := w.Sync(); err != nil {
				b.Fatal(err)
			}
			w.Chmod(0o755)
			w.Close()
			if err := c.PosixRename(tmp, target); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkConfirmUnchanged is `up` on a converged cluster: a control-plane
// file set (~450 MB in 30 files) already on three hosts; every iteration
// must find all of it unchanged and send nothing.
func BenchmarkConfirmUnchanged(b *testing.B) {
	var files []remote.File
	srcDir := b.TempDir()
	big := []int64{120, 90, 70, 55, 45, 30, 25, 15} // MB: the binaries
	for i, mb := range big {
		files = append(files, remote.File{Path: fmt.Sprintf("bin/binary-%d", i), Source: randomFileIn(b, srcDir, mb<<20), Mode: 0o755})
	}
	for i := len(files); i < 30; i++ { // certificates, keys, configs, units
		files = append(files, remote.File{Path: fmt.Sprintf("etc/file-%d.pem", i), Data: []byte(fmt.Sprintf("%01000d", i)), Mode: 0o600})
	}
	start := time.Now()
	if err := remote.PrepareFiles(files); err != nil {
		b.Fatal(err)
	}
	hashTime := time.Since(start)
	var total int64
	for _, f := range files {
		total += f.Size
	}
	type target struct {
		h   remote.Host
		dir string
	}
	var targets []target
	for range 3 {
		targets = append(targets, target{newBenchEnv(b).host, b.TempDir()})
	}
	push := func(ctx context.Context, tg target) ([]remote.Result, error) {
		fs := append([]remote.File(nil), files...)
		for i := range fs {
			fs[i].Path = filepath.Join(tg.dir, fs[i].Path)
		}
		return remote.WriteFiles(ctx, tg.h, fs)
	}
	ctx := context.Background()
	if err := remote.ForEach(ctx, targets, 0, func(ctx context.Context, tg target) error {
		_, err := push(ctx, tg)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		err := remote.ForEach(ctx, targets, 0, func(ctx context.Context, tg target) error {
			res, err := push(ctx, tg)
			for _, r := range res {
				if r.Changed() {
					return fmt.Errorf("%s changed on the second push: %s", r.Path, r.Why)
				}
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total)/1e6, "MB/host")
	b.ReportMetric(hashTime.Seconds(), "local-hash-s")
}

type benchEnv struct {
	*env
	host *remote.SSHHost
}

func newBenchEnv(b *testing.B) benchEnv {
	b.Helper()
	e := newEnvTB(b, sshdtest.Options{})
	e.trust(b, e.srv.HostKeys...)
	h, err := remote.Dial(context.Background(), e.config())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	return benchEnv{env: e, host: h}
}

func randomFileIn(b *testing.B, dir string, size int64) string {
	f, err := os.CreateTemp(dir, "bin-")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// Not crypto-random: 450 MB from crypto/rand takes long for no gain.
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + int(size))
	}
	for n := int64(0); n < size; n += int64(len(buf)) {
		buf[0]++
		if _, err := f.Write(buf[:min(int64(len(buf)), size-n)]); err != nil {
			b.Fatal(err)
		}
	}
	return f.Name()
}
