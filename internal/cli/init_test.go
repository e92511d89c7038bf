package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/initinv"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/remote/sshdtest"
)

func TestInitHostsFlagsNeedHosts(t *testing.T) {
	for _, args := range [][]string{{"init", "--like", "x.yaml"}, {"init", "--workers", "1"}, {"init", "-o", "json"}} {
		if code, _, stderr := run(t, args...); code != 2 || !strings.Contains(stderr, "needs --hosts") {
			t.Errorf("%v: code %d %s", args, code, stderr)
		}
	}
	for _, args := range [][]string{
		{"init", "--hosts", "10.0.0.1", "--controllers", "1", "--workers", "1"},
		{"init", "--hosts", "10.0.0.1", "--controllers", "0"},
		{"init", "--hosts", "bad user@10.0.0.1"},
		{"init", "--hosts", "10.0.0.1", "-o", "yaml"},
	} {
		if code, _, stderr := run(t, args...); code != 2 {
			t.Errorf("%v: code %d %s", args, code, stderr)
		}
	}
}

// TestInitHostsRealSSHD runs 'hardway init --hosts' against a real sshd on
// loopback: an unknown host key is refused with the command that trusts
// it, that command works, and the file it writes loads and describes this
// machine.
func TestInitHostsRealSSHD(t *testing.T) {
	sshdtest.RequireRoot(t)
	t.Setenv("SSH_AUTH_SOCK", "") // the test's key only, not a developer's agent
	srv := sshdtest.Start(t, sshdtest.Options{})
	dir := t.TempDir()
	key, pub := sshdtest.ClientKey(t, dir)
	user := sshdtest.AddRootAlias(t, srv.Dir)
	srv.Authorize(t, user.Name, pub)
	kh := filepath.Join(dir, "known_hosts")
	file := filepath.Join(dir, "site", "inventory.yaml")
	port := strconv.Itoa(srv.Port)
	args := []string{"init", "--hosts", user.Name + "@127.0.0.1", "--port", port, "--identity-file", key, "--known-hosts", kh, file}

	// Unknown: refused, nothing written, and the hint is the command.
	code, _, stderr := run(t, args...)
	if code != 1 || !strings.Contains(stderr, "host key unknown") {
		t.Fatalf("unknown host key: code %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"[probe] " + user.Name + "@127.0.0.1: failed: ",
		"hint:  check the new hosts' key fingerprints (e.g. ssh-keyscan -p " + port + " 127.0.0.1 | ssh-keygen -lf -), then trust and record them with:\n",
		"       hardway init --hosts " + user.Name + "@127.0.0.1 --identity-file " + key + " --known-hosts " + kh + " --port " + port + " " + file + " --accept-new-host-keys\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("a file was written: %v", err)
	}

	// The hint's command.
	code, stdout, stderr := run(t, append(args, "--accept-new-host-keys")...)
	if code != 0 {
		t.Fatalf("init: code %d\n%s", code, stderr)
	}
	if b, _ := os.ReadFile(kh); !strings.Contains(string(b), "[127.0.0.1]:"+port) {
		t.Errorf("known_hosts %q", b)
	}
	host, _ := os.Hostname()
	short, _, _ := strings.Cut(host, ".")
	for _, want := range []string{"[probe] " + user.Name + "@127.0.0.1: " + short + ", ", "guess: roles: the one host runs the control plane", "guess: podCIDR "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "wrote "+file) {
		t.Errorf("stdout %q", stdout)
	}
	inv, err := inventory.Load(file)
	if err != nil {
		t.Fatalf("the written file does not load: %v", err)
	}
	goarch := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
	if len(inv.ControlPlane) != 1 || inv.ControlPlane[0].Address != "127.0.0.1" || inv.ControlPlane[0].Name != initinv.Label(short) ||
		inv.Arch != goarch || inv.SSH.User != user.Name || inv.SSH.Port != srv.Port {
		t.Errorf("inventory %+v %+v", inv.ControlPlane, inv.SSH)
	}
	// The paths the flags named, from the file's own directory.
	s := inv.SSHFor(inv.ControlPlane[0])
	if s.IdentityFile != key || s.KnownHostsFile != kh {
		t.Errorf("ssh %+v", s)
	}

	// Known now; -o json without FILE: the facts, the guesses and the
	// file, all on stdout.
	code, stdout, stderr = run(t, append(args[:len(args)-1:len(args)-1], "-o", "json")...)
	if code != 0 {
		t.Fatalf("init -o json: code %d\n%s", code, stderr)
	}
	var res struct {
		Hosts []struct {
			Name  string `json:"name"`
			Role  string `json:"role"`
			Facts struct {
				Arch string `json:"arch"`
				OS   struct {
					ID string `json:"id"`
				} `json:"os"`
			} `json:"facts"`
		} `json:"hosts"`
		PodCIDR   string   `json:"podCIDR"`
		Guesses   []string `json:"guesses"`
		Inventory string   `json:"inventory"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(res.Hosts) != 1 || res.Hosts[0].Facts.Arch != goarch || res.Hosts[0].Role != initinv.RoleControlPlane ||
		res.PodCIDR == "" || len(res.Guesses) == 0 || !strings.Contains(res.Inventory, "controlPlane:") {
		t.Errorf("%+v", res)
	}
	if strings.Contains(stderr, "guess:") {
		t.Errorf("-o json printed the guesses on stderr too:\n%s", stderr)
	}
	osr, _ := os.ReadFile("/etc/os-release")
	if !strings.Contains(string(osr), "ID="+res.Hosts[0].Facts.OS.ID+"\n") && !strings.Contains(string(osr), `ID="`+res.Hosts[0].Facts.OS.ID+`"`) {
		t.Errorf("os id %q, /etc/os-release:\n%s", res.Hosts[0].Facts.OS.ID, osr)
	}

	// Through a bastion (the same sshd): reached, and written down.
	bastion := user.Name + "@127.0.0.1:" + port
	code, stdout, stderr = run(t, append(args[:len(args)-1:len(args)-1], "--bastion", bastion)...)
	if code != 0 || !strings.Contains(stdout, "bastion: "+bastion) || !strings.Contains(stdout, "address: 127.0.0.1") {
		t.Errorf("--bastion: code %d\n%s\n%s", code, stdout, stderr)
	}

	// An existing FILE is never replaced without --force, and is refused
	// before any host is asked.
	code, _, stderr = run(t, args...)
	if code != 1 || !strings.Contains(stderr, "already exists") || strings.Contains(stderr, "[probe]") {
		t.Errorf("existing file: code %d\n%s", code, stderr)
	}
	if code, _, stderr = run(t, append(args, "--force", "--workers", "0")...); code != 0 {
		t.Errorf("--force: code %d\n%s", code, stderr)
	}
}
