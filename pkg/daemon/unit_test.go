package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

func testUnit(t *testing.T, state string) string {
	t.Helper()
	bin, err := os.Executable() // ExecStart= must exist for systemd-analyze verify
	if err != nil {
		t.Fatal(err)
	}
	u, err := Unit(UnitConfig{
		Binary: bin, Args: []string{"-i", "/etc/hardway/inventory.yaml", "--state", state, "--interval", "1m0s"},
		StateDir: state, Cluster: "lab", Watchdog: 30 * time.Second, StopAfter: 50 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestUnitFile(t *testing.T) {
	u := testUnit(t, "/var/lib/hard way/.hardway")
	opts, err := unit.DeserializeOptions(strings.NewReader(u))
	if err != nil {
		t.Fatalf("deserialize: %v\n%s", err, u)
	}
	got := map[string][]string{}
	for _, o := range opts {
		got[o.Section+"."+o.Name] = append(got[o.Section+"."+o.Name], o.Value)
	}
	for k, want := range map[string]string{
		"Service.Type":            "notify",
		"Service.WatchdogSec":     "30s",
		"Service.Restart":         "on-failure",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "strict",
		"Service.ProtectHome":     "read-only",
		"Service.PrivateTmp":      "yes",
		"Service.ReadWritePaths":  `"/var/lib/hard way/.hardway"`,
		"Service.TimeoutStopSec":  "50s",
		"Install.WantedBy":        "multi-user.target",
	} {
		if v := got[k]; len(v) != 1 || v[0] != want {
			t.Errorf("%s = %q, want exactly %q", k, v, want)
		}
	}
	if _, ok := got["Service.User"]; ok {
		t.Errorf("no User= when none is given")
	}
	if !strings.Contains(got["Service.ExecStart"][0], ` daemon -i /etc/hardway/inventory.yaml --state "/var/lib/hard way/.hardway" --interval 1m0s`) {
		t.Errorf("ExecStart = %q", got["Service.ExecStart"])
	}
	if _, err := Unit(UnitConfig{Binary: "hardway", StateDir: "/x"}); err == nil {
		t.Errorf("a relative binary was accepted")
	}
}

func TestQuoteExec(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/bin/hardway": "/usr/local/bin/hardway",
		"/srv/my cluster/inv":    `"/srv/my cluster/inv"`,
		"50%":                    "50%%",
		"$HOME":                  "$$HOME",
		`a"b c`:                  `"a\"b c"`,
	} {
		if got := quoteExec(in); got != want {
			t.Errorf("quoteExec(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnitVerifies runs the real systemd-analyze: verify must be silent (it
// exits 0 on unknown keys and bad values, so any stderr is a failure) and
// the offline security score must stay "OK" or better.
func TestUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed (hack/setup.sh installs systemd): %v", err)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "hardway-daemon.service")
	if err := os.WriteFile(p, []byte(testUnit(t, state)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(sa, "verify", p)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 || stdout.Len() > 0 {
		t.Fatalf("systemd-analyze verify: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	out, err := exec.Command(sa, "security", "--offline=true", p).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no score in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: %s %s", m[1], m[2])
	if score > 2.5 {
		t.Errorf("exposure %.1f: the sandbox lost settings\n%s", score, out)
	}
}
