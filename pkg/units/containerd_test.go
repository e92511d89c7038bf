package units

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/internal/mirrortest"
)

// The rendered config.toml, read by the real containerd: 'config dump'
// parses it (a TOML or type error fails) and prints the effective config,
// in which every setting hardway writes must show up where containerd reads
// it. Defaults cannot hide a misplaced key: SystemdCgroup, NoNewKeyring and
// restrict_oom_score_adj default to false.
func TestContainerdConfigAgainstRealBinary(t *testing.T) {
	bin := filepath.Join(mirrortest.ContainerdBinaries(t, "containerd"), "containerd")
	inv := workerInventory(t, "1.36", "", true)
	inv.ContainerdVersion = mirrortest.Containerd
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := ms[len(ms)-1].File(ContainerdConfig)
	if !ok {
		t.Fatal("no containerd config")
	}
	dump := containerdDump(t, bin, f.Content)
	for _, want := range []string{
		"restrict_oom_score_adj = true", "SystemdCgroup = true", "NoNewKeyring = true",
		"BinaryName = '" + SbinDir + "/runc'", "sandbox = '" + DefaultPauseImage + "'",
		"snapshotter = 'overlayfs'", "bin_dirs = ['" + CNIBinDir + "']", "conf_dir = '" + CNIConfDir + "'",
		"address = '" + ContainerdSocket + "'", "default_runtime_name = 'runc'", "runtime_type = 'io.containerd.runc.v2'",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("containerd's effective config lacks %q", want)
		}
	}
	// The check can fail: SystemdCgroup in the wrong table is ignored.
	bad := strings.Replace(string(f.Content), "  SystemdCgroup = true\n", "", 1)
	bad = strings.Replace(bad, "[plugins.'io.containerd.cri.v1.runtime'.cni]\n", "[plugins.'io.containerd.cri.v1.runtime'.cni]\n  SystemdCgroup = true\n", 1)
	if bad == string(f.Content) || strings.Contains(containerdDump(t, bin, []byte(bad)), "SystemdCgroup = true") {
		t.Error("a misplaced SystemdCgroup still shows in the effective config: the check above proves nothing")
	}
}

func containerdDump(t *testing.T, bin string, config []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, config, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(bin, "--config", p, "config", "dump")
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, firstLines(out, 10))
	}
	return out
}
