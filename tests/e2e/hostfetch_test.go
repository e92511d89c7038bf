package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hardway/hardway/pkg/lab"
	"github.com/hardway/hardway/pkg/release"
)

// Issue 16 §4: with releases.fetchOn: hosts the hosts download the release
// files themselves from the lab's mirror server (the lab serves its mirror
// over HTTP on its bridge address), each checked on the host against
// hardway.lock before it is installed, so the operator's link carries
// commands, not binaries; a server that hands out other bytes is refused on
// the host and nothing is installed. Both subtests put the inventory back
// and leave every file as the cold up made it.

// fetchedFiles are removed on purpose and fetched again: tools no service
// runs (replacing them restarts nothing), from plain files, tarballs
// (etcd's, containerd's, crictl's) and an image.
var fetchedFiles = map[string][]struct{ path, artifact string }{
	"controller": {{"/usr/local/bin/kubectl", "kubectl"}, {"/usr/local/bin/etcdctl", "etcdctl"}, {"/usr/local/bin/etcdutl", "etcdutl"}},
	"worker": {{"/usr/local/bin/crictl", "crictl"}, {"/usr/local/bin/ctr", "ctr"},
		{"/var/lib/hardway/images/registry.k8s.io_coredns_coredns_v1.14.7.tar", "image:registry.k8s.io/coredns/coredns:v1.14.7"}},
}

// hostFetchInventory is the lab's inventory with every release and image
// URL on base (the lab's mirror server, or a test's) and fetchOn: hosts.
func (e *workersEnv) hostFetchInventory(t *testing.T, orig, k8sBase string) string {
	t.Helper()
	if e.res.MirrorURL == "" {
		t.Fatal("the lab does not serve its mirror (lab.Config.ServeMirror)")
	}
	inv := strings.ReplaceAll(orig, "file://"+e.mirror, e.res.MirrorURL)
	if k8sBase != "" {
		inv = strings.Replace(inv, "kubernetes: "+e.res.MirrorURL+"/kubernetes", "kubernetes: "+k8sBase+"/kubernetes", 1)
	}
	if strings.Contains(inv, "file://") || !strings.Contains(inv, "\nreleases:\n") {
		t.Fatalf("cannot point the inventory at the mirror server:\n%s", inv)
	}
	return strings.Replace(inv, "\nreleases:\n", "\nreleases:\n  allowHTTP: true\n  fetchOn: hosts\n", 1)
}

// sentBytes is what up's summary says it sent over SSH.
func sentBytes(t *testing.T, out string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+ssh\s+([0-9.]+) (B|kB|MB|GB) sent`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("up printed no bytes sent:\n%s", out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return int64(v * map[string]float64{"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]])
}

func (e *workersEnv) hostFetchScenarios(t *testing.T) {
	orig, err := os.ReadFile(e.inv)
	if err != nil {
		t.Fatal(err)
	}
	restore := func(t *testing.T) {
		if err := os.WriteFile(e.inv, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := release.ReadLock(filepath.Join(filepath.Dir(e.inv), release.LockFileName))
	if err != nil || lock == nil {
		t.Fatalf("hardway.lock after the cold up: %v", err)
	}
	hosts := map[string][]string{"controller": {}, "worker": {}}
	for _, h := range e.res.Hosts {
		hosts["controller"] = append(hosts["controller"], h.Name)
	}
	for _, h := range e.res.Workers {
		hosts["worker"] = append(hosts["worker"], h.Name)
	}
	address := map[string]string{}
	for _, h := range append(append([]lab.Host{}, e.res.Hosts...), e.res.Workers...) {
		address[h.Name] = h.Address
	}

	t.Run("fetchOn hosts: each host downloads and checks its files; the operator's link carries at most 1.2x them", func(t *testing.T) {
		e.t = t
		defer restore(t)
		// The distinct files (the artifact set of this run), by size; pushed,
		// each would cross the operator's link once per host.
		var set, pushed int64
		for role, files := range fetchedFiles {
			for _, f := range files {
				out, err := e.ssh(hosts[role][0], "stat -c %s "+f.path)
				n, perr := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
				if err != nil || perr != nil {
					t.Fatalf("%s: stat %s: %v %s", hosts[role][0], f.path, err, out)
				}
				set += n
				pushed += n * int64(len(hosts[role]))
			}
		}
		for role, names := range hosts {
			var paths []string
			for _, f := range fetchedFiles[role] {
				paths = append(paths, f.path)
			}
			for _, h := range names {
				if out, err := e.ssh(h, "rm -f "+strings.Join(paths, " ")); err != nil {
					t.Fatalf("%s: %v %s", h, err, out)
				}
			}
		}
		if err := os.WriteFile(e.inv, []byte(e.hostFetchInventory(t, string(orig), "")), 0o644); err != nil {
			t.Fatal(err)
		}
		logBefore, _ := os.ReadFile(e.res.MirrorLog)
		out := e.mustUp()
		sent := sentBytes(t, out)
		t.Logf("FIGURE fetchOn hosts, %d files on %d hosts: up sent %d kB over SSH = %.4f× the %.1f MB they hold (pushed: %.1f MB)",
			len(fetchedFiles["controller"])+len(fetchedFiles["worker"]), len(address), sent/1000, float64(sent)/float64(set), float64(set)/1e6, float64(pushed)/1e6)
		if float64(sent) > 1.2*float64(set) {
			t.Errorf("up sent %d bytes, more than 1.2x the %d bytes the hosts fetched", sent, set)
		}
		if !strings.Contains(out, "fetch on the host") || !strings.Contains(out, "hosts fetched ") {
			t.Errorf("up planned no host fetch, or does not say what the hosts fetched:\n%s", out)
		}
		// Every host asked the lab's mirror server for its own files.
		logAll, _ := os.ReadFile(e.res.MirrorLog)
		served := string(logAll[len(logBefore):])
		for role, names := range hosts {
			want := map[string]string{"controller": "/kubernetes/release/v1.36.3/bin/linux/amd64/kubectl 200 ", "worker": "/crictl/v1.37.0/crictl-v1.37.0-linux-amd64.tar.gz 200 "}[role]
			for _, h := range names {
				if !strings.Contains(served, " "+address[h]+":") || !regexp.MustCompile(regexp.QuoteMeta(" "+address[h]+":")+`\d+ `+regexp.QuoteMeta(want)).MatchString(served) {
					t.Errorf("%s (%s) did not fetch %s from the mirror server:\n%s", h, address[h], want, served)
				}
			}
		}
		// Byte for byte what hardway.lock pins, with the mode push gives.
		for role, names := range hosts {
			for _, h := range names {
				for _, f := range fetchedFiles[role] {
					entry, ok := lock.Entry(runtime.GOARCH, f.artifact) // the lab's hosts are this machine's arch
					out, err := e.ssh(h, "sha256sum "+f.path+" && stat -c %a "+f.path)
					mode := map[bool]string{true: "\n755\n", false: "\n644\n"}[strings.HasPrefix(f.path, "/usr/local/bin/")]
					if !ok || err != nil || !strings.HasPrefix(out, entry.SHA256+" ") || !strings.HasSuffix(out, mode) {
						t.Errorf("%s: %s: %v %s (locked %s)", h, f.path, err, out, entry.SHA256)
					}
				}
			}
		}
		// Back to the pushing inventory: the operator finds nothing to send.
		restore(t)
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("up with fetchOn operator after the hosts fetched:\n%s", out)
		}
	})

	t.Run("a tampered file on the server is refused on the host and nothing is installed", func(t *testing.T) {
		e.t = t
		defer restore(t)
		const kubectlPath = "/kubernetes/release/v1.36.3/bin/linux/amd64/kubectl"
		good, err := os.ReadFile(filepath.Join(e.mirror, kubectlPath))
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte{}, good...)
		bad[len(bad)/2] ^= 0x01
		// A server of the test's own on the lab's bridge: the mirror, with
		// one byte of kubectl changed (and its checksum file as published).
		var mu sync.Mutex
		var gets []string
		ln, err := net.Listen("tcp", net.JoinHostPort(e.res.Bridge, "0"))
		if err != nil {
			t.Fatal(err)
		}
		files := http.FileServer(http.Dir(e.mirror))
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			gets = append(gets, r.Method+" "+r.RemoteAddr+" "+r.URL.Path)
			mu.Unlock()
			if r.URL.Path == kubectlPath {
				w.Header().Set("Content-Length", strconv.Itoa(len(bad)))
				w.Write(bad)
				return
			}
			files.ServeHTTP(w, r)
		})}
		go srv.Serve(ln)
		defer srv.Close()
		victim := hosts["controller"][1]
		if out, err := e.ssh(victim, "rm -f /usr/local/bin/kubectl"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if err := os.WriteFile(e.inv, []byte(e.hostFetchInventory(t, string(orig), "http://"+ln.Addr().String())), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := e.hardway("up")
		if code == 0 {
			t.Fatalf("up installed a tampered kubectl:\n%s\n%s", out, errs)
		}
		for _, want := range []string{victim + ": kubectl from http://" + ln.Addr().String() + kubectlPath + " is not the pinned file",
			"deleted, nothing installed", "serves other bytes than hardway.lock pins", "releases.fetchOn: operator"} {
			if !strings.Contains(errs, want) {
				t.Errorf("up's error lacks %q:\n%s", want, errs)
			}
		}
		mu.Lock()
		fetched := strings.Join(gets, "\n")
		mu.Unlock()
		if !strings.Contains(fetched, "GET "+address[victim]+":") {
			t.Errorf("%s never asked the server for kubectl:\n%s", victim, fetched)
		}
		if out, err := e.ssh(victim, "ls -a /usr/local/bin /var/lib/hardway"); err != nil || strings.Contains(out, "kubectl") || strings.Contains(out, ".fetch-") {
			t.Errorf("%s: the tampered kubectl (or a temporary file) is there: %v\n%s", victim, err, out)
		}
		// Back to the pushing inventory: kubectl is pushed again.
		restore(t)
		e.mustUp()
		if out, err := e.ssh(victim, "sha256sum /usr/local/bin/kubectl"); err != nil || !strings.HasPrefix(out, sha256hex(good)+" ") {
			t.Errorf("kubectl after the next up: %v %s", err, out)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify:\n  %s", strings.Join(f, "\n  "))
		}
	})
}

func sha256hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
