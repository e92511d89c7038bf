package units

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/apilb"
)

// With workers and three control-plane hosts every worker runs the load
// balancer, over all three apiservers, started before the kubelet; with
// network.apiServerLoadBalancer none (or one control-plane host) no host
// gets it.
func TestAPIServerLBRendered(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		has := slices.Contains(m.Components, APIServerLB)
		if has != (m.Role == Worker) {
			t.Errorf("%s (%s): load balancer %v", m.Host, m.Role, has)
		}
		if !has {
			continue
		}
		if i, k := slices.Index(m.Components, APIServerLB), slices.Index(m.Components, Kubelet); i > k {
			t.Errorf("%s: components %v: the load balancer starts after the kubelet", m.Host, m.Components)
		}
		f, ok := m.File(APIServerLBConfig)
		if !ok || !slices.Equal(f.Components, []string{APIServerLB}) {
			t.Fatalf("%s: %s %+v", m.Host, APIServerLBConfig, f)
		}
		for _, want := range []string{"- address: 10.240.0.11:6443\n", "- address: 10.240.0.12:6443\n", "- address: 10.240.0.13:6443\n",
			"rule: HostSNI(`*`)", "interval: 2s", "timeout: 1s", "dialTimeout: 3s"} {
			if !strings.Contains(string(f.Content), want) {
				t.Errorf("%s: %s lacks %q:\n%s", m.Host, APIServerLBConfig, want, f.Content)
			}
		}
		if strings.Contains(string(f.Content), "tls:") {
			t.Errorf("%s: the router terminates TLS; it must pass it through:\n%s", m.Host, f.Content)
		}
		if b, ok := m.File(BinPath("traefik")); !ok || b.Source == nil || b.Source.Name != "traefik" {
			t.Errorf("%s: no traefik binary: %+v", m.Host, b)
		}
		if m.Versions[APIServerLB] != "v3.7.13" {
			t.Errorf("%s: version %q", m.Host, m.Versions[APIServerLB])
		}
	}
	fl := flagMap(t, inv, inv.Workers[0], APIServerLB)
	for name, want := range map[string]string{
		"entryPoints.apiserver.address": "127.0.0.1:6443", "entryPoints.traefik.address": "127.0.0.1:6444",
		"providers.file.filename": APIServerLBConfig, "api.dashboard": "false", "global.sendAnonymousUsage": "false",
	} {
		if fl[name] != want {
			t.Errorf("--%s=%q, want %q", name, fl[name], want)
		}
	}
	for _, v := range fl {
		if strings.Contains(v, ":") && !strings.HasPrefix(v, "127.0.0.1:") && !strings.HasPrefix(v, "/") {
			t.Errorf("a listener not on loopback: %s", v)
		}
	}

	for _, network := range []string{"apiServerLoadBalancer: none", ""} {
		inv := workerInventory(t, "1.36", network, false) // one control-plane host
		ms, err := render(t, inv)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if slices.Contains(m.Components, APIServerLB) {
				t.Errorf("network {%s}: %s runs the load balancer", network, m.Host)
			}
			if _, ok := m.File(BinPath("traefik")); ok {
				t.Errorf("network {%s}: %s gets traefik", network, m.Host)
			}
		}
	}
}

// TestAPIServerLBRealTraefik runs the mirror's real Traefik with the
// rendered flags and config (on free loopback ports, two live backends and
// one that refuses): it must load the config, report the dead backend DOWN
// and the others UP on the API verify reads, and pass connections through
// untouched to live backends only.
func TestAPIServerLBRealTraefik(t *testing.T) {
	bin := mirrortest.TraefikBinary(t)
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[3]
	flags, err := Flags(inv, inv.Workers[0], APIServerLB)
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := m.File(APIServerLBConfig)

	// Backends: controller-1 and -3 answer (an echo that names itself),
	// controller-2's address refuses connections.
	live := map[string]string{}
	var wg sync.WaitGroup
	var listeners []net.Listener
	t.Cleanup(func() {
		for _, l := range listeners {
			l.Close()
		}
		wg.Wait()
	})
	for _, name := range []string{"controller-1", "controller-3"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		live[name] = l.Addr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					line, _ := bufio.NewReader(c).ReadString('\n')
					fmt.Fprintf(c, "%s got %s", name, line)
				}()
			}
		}()
	}
	dead := freePort(t)
	lbAddr, apiAddr := freePort(t), freePort(t)
	body := string(conf.Content)
	for old, repl := range map[string]string{"10.240.0.11:6443": live["controller-1"], "10.240.0.12:6443": dead, "10.240.0.13:6443": live["controller-3"]} {
		body = strings.Replace(body, old, repl, 1)
	}
	dir := t.TempDir()
	confPath := filepath.Join(dir, "apiserver-lb.yaml")
	if err := os.WriteFile(confPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, f := range flags {
		switch f.Value {
		case "127.0.0.1:6443":
			f.Value = lbAddr
		case "127.0.0.1:6444":
			f.Value = apiAddr
		case APIServerLBConfig:
			f.Value = confPath
		}
		args = append(args, f.Arg())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	get := func(path string) (int, string, error) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + apiAddr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	var backends []apilb.Backend
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get(apilb.ServicesPath)
		if err == nil && code == http.StatusOK {
			backends, err = apilb.Backends([]byte(body), APIServerLBService)
		}
		want := []apilb.Backend{{Address: live["controller-1"], Status: apilb.Up}, {Address: dead, Status: apilb.Down}, {Address: live["controller-3"], Status: apilb.Up}}
		if err == nil && slices.Equal(backends, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends %v (%v), want %v; traefik says:\n%s", backends, err, want, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body, err := get("/ping"); err != nil || code != http.StatusOK || body != "OK" {
		t.Errorf("/ping: %d %q %v", code, body, err)
	}
	// The web UI is off; only the API answers.
	if code, _, _ := get("/dashboard/"); code == http.StatusOK {
		t.Error("the dashboard answers")
	}

	// Connections pass through untouched and reach only live backends,
	// both of them (round robin).
	seen := map[string]bool{}
	for i := range 6 {
		c, err := net.DialTimeout("tcp", lbAddr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := fmt.Sprintf("hello %d\n", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		reply, err := io.ReadAll(c)
		c.Close()
		name, rest, ok := strings.Cut(string(reply), " got ")
		if err != nil || !ok || rest != msg || live[name] == "" {
			t.Fatalf("connection %d through the load balancer: %q %v\n%s", i, reply, err, out.String())
		}
		seen[name] = true
	}
	if len(seen) != 2 {
		t.Errorf("answered by %v, want both live backends", seen)
	}
	if !strings.Contains(out.String(), "Health check failed") || !strings.Contains(out.String(), dead) {
		t.Errorf("the log does not name the dead backend:\n%s", out.String())
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
