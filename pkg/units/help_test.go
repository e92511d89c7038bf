package units

import (
	"bytes"
	"context"
	"fmt"
	"github.com/hardway/hardway/internal/mirrortest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The versions the e2e mirror holds (hack/mirror/build.sh).
const (
	mirrorK8s  = mirrortest.Kubernetes
	mirrorEtcd = mirrortest.Etcd
)

// TestFlagsAgainstRealBinaries asks the real release binaries whether they
// know every flag hardway renders: a flag removed upstream fails here
// without starting anything. Three checks per component: the flag is in
// --help (pflag hides deprecated flags from it), etcd's text does not call
// it deprecated, and the binary parses the whole rendered command line
// (types, feature-gate names) before printing help.
//
// Both Kubernetes versions the mirror holds: the default, and the minor
// before it that the upgrade test starts from.
func TestFlagsAgainstRealBinaries(t *testing.T) {
	for _, k8s := range []string{mirrorK8s, mirrortest.PreviousKubernetes()} {
		t.Run(k8s, func(t *testing.T) { flagsAgainstRealBinaries(t, k8s) })
	}
}

func flagsAgainstRealBinaries(t *testing.T, k8s string) {
	inv := newInventory(t, k8s, mirrorEtcd)
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	// A container-host worker renders every worker flag there is.
	wms, err := render(t, workerInventory(t, k8s, "", true))
	if err != nil {
		t.Fatal(err)
	}
	worker := wms[len(wms)-1]
	for _, c := range append(Names(ControlPlane), Kubelet, KubeProxy) {
		m := ms[0]
		if MustLookup(c).Role == Worker {
			m = worker
		}
		t.Run(c, func(t *testing.T) {
			if len(m.Flags[c]) == 0 {
				t.Fatalf("%s: no flags rendered", c)
			}
			bin := realBinaryAt(t, k8s, c)
			for _, p := range checkFlags(t, bin, c, m.Flags[c]) {
				t.Error(p)
			}
		})
	}
}

// The same check for a worker binary: a flag kubelet does not know fails.
func TestFlagsAgainstRealKubeletCatchesWrongFlags(t *testing.T) {
	bin := realBinary(t, Kubelet)
	inv := workerInventory(t, mirrorK8s, "", false)
	flags, err := Flags(inv, inv.Workers[0], Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	probs := strings.Join(checkFlags(t, bin, Kubelet, append(slices.Clone(flags), Flag{Name: "network-plugin", Value: "cni"})), "\n")
	if !strings.Contains(probs, "rejects the rendered command line") {
		t.Errorf("--network-plugin (removed in 1.24): want a parse failure, got %q", probs)
	}
}

// The real-binary check must fail for flags of the wrong version: etcd 3.5's
// spelling is deprecated in 3.6, and an unknown flag stops the parse.
func TestFlagsAgainstRealBinariesCatchesWrongFlags(t *testing.T) {
	bin := realBinary(t, Etcd)
	inv := newInventory(t, "1.33", "v3.5.24")
	old, err := Flags(inv, inv.ControlPlane[0], Etcd)
	if err != nil {
		t.Fatal(err)
	}
	probs := checkFlags(t, bin, Etcd, old)
	if !strings.Contains(strings.Join(probs, "\n"), "--experimental-initial-corrupt-check is deprecated") {
		t.Errorf("3.5 flags against etcd %s: want a deprecation complaint, got %q", mirrorEtcd, probs)
	}
	bogus := append(old, Flag{Name: "enable-v2", Value: "true"})
	if probs := checkFlags(t, bin, Etcd, bogus); !strings.Contains(strings.Join(probs, "\n"), "rejects the rendered command line") {
		t.Errorf("--enable-v2 against etcd %s: want a parse failure, got %q", mirrorEtcd, probs)
	}
}

// The same for the apiserver: a removed flag fails the parse, a deprecated
// one (hidden from --help by pflag) is reported missing.
func TestFlagsAgainstRealAPIServerCatchesWrongFlags(t *testing.T) {
	bin := realBinary(t, APIServer)
	inv := newInventory(t, mirrorK8s, mirrorEtcd)
	flags, err := Flags(inv, inv.ControlPlane[0], APIServer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag Flag
		want string
	}{
		{Flag{Name: "kubelet-https", Value: "true"}, "rejects the rendered command line"},
		{Flag{Name: "apiserver-count", Value: "3"}, "--apiserver-count is not in --help"},
	} {
		probs := strings.Join(checkFlags(t, bin, APIServer, append(slices.Clone(flags), tc.flag)), "\n")
		if !strings.Contains(probs, tc.want) {
			t.Errorf("--%s: want %q, got %q", tc.flag.Name, tc.want, probs)
		}
	}
}

// checkFlags returns what is wrong with running bin with flags.
func checkFlags(t *testing.T, bin, c string, flags []Flag) []string {
	t.Helper()
	var probs []string
	help := runHelp(t, bin)
	for _, f := range flags {
		desc, ok := helpEntry(help, f.Name)
		if !ok {
			probs = append(probs, fmt.Sprintf("%s %s: --%s is not in --help (removed or deprecated?)", c, versionOf(c), f.Name))
			continue
		}
		if strings.Contains(strings.ToLower(desc), "deprecated") {
			probs = append(probs, fmt.Sprintf("%s %s: --%s is deprecated: %s", c, versionOf(c), f.Name, strings.TrimSpace(desc)))
		}
		if f.Name == "feature-gates" {
			for _, g := range strings.Split(f.Value, ",") {
				name, _, _ := strings.Cut(g, "=")
				if !strings.Contains(desc, name+"=") {
					probs = append(probs, fmt.Sprintf("%s: feature gate %s not listed in --help", c, name))
				}
			}
		}
	}
	args := append(Args(flags), "--help")
	if out, err := run(bin, args...); err != nil {
		probs = append(probs, fmt.Sprintf("%s rejects the rendered command line: %v\n%s", c, err, firstLines(out, 5)))
	}
	return probs
}

// The help check must notice a flag the binary does not have.
func TestHelpEntry(t *testing.T) {
	kube := "      --advertise-address ip   The IP address.\n      --bind-address ip   Bind.\n  -h, --help   help\n"
	etcd := "  --name 'default'\n    Human-readable name.\n  --experimental-x 'false'\n    Something. Deprecated in v3.6.\n  --x 1\n    Y.\n"
	for _, tc := range []struct {
		help, flag string
		ok         bool
		deprecated bool
	}{
		{kube, "advertise-address", true, false},
		{kube, "address", false, false},
		{kube, "help", true, false},
		{etcd, "name", true, false},
		{etcd, "experimental-x", true, true},
		{etcd, "x", true, false},
		{etcd, "nam", false, false},
	} {
		desc, ok := helpEntry(tc.help, tc.flag)
		if ok != tc.ok || strings.Contains(desc, "Deprecated") != tc.deprecated {
			t.Errorf("helpEntry(%q) = %q, %v; want ok=%v deprecated=%v", tc.flag, desc, ok, tc.ok, tc.deprecated)
		}
	}
}

func versionOf(c string) string {
	if c == Etcd {
		return mirrorEtcd
	}
	return mirrorK8s
}

// helpEntry finds --name in help text (kube: "  -h, --name type   text",
// etcd: "  --name 'default'" then indented text) and returns its description.
func helpEntry(help, name string) (string, bool) {
	re := regexp.MustCompile(`^\s*(?:-\w, )?--` + regexp.QuoteMeta(name) + `(?:[\s=]|$)`)
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		if !re.MatchString(l) {
			continue
		}
		desc := []string{l}
		for _, next := range lines[i+1:] {
			if t := strings.TrimSpace(next); t == "" || strings.HasPrefix(t, "-") {
				break
			}
			desc = append(desc, next)
		}
		return strings.Join(desc, "\n"), true
	}
	return "", false
}

func run(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()}
	err := cmd.Run()
	return out.String(), err
}

func runHelp(t *testing.T, bin string) string {
	t.Helper()
	out, err := run(bin, "--help")
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", bin, err, firstLines(out, 5))
	}
	return out
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}

// realBinary returns the component's binary from the mirror, verified
// against its published digest (internal/mirrortest).
func realBinary(t *testing.T, c string) string {
	t.Helper()
	return realBinaryAt(t, mirrorK8s, c)
}

// realBinaryAt is c's binary at Kubernetes k8s (etcd: the mirror's one).
func realBinaryAt(t *testing.T, k8s, c string) string {
	t.Helper()
	if c == Etcd {
		return filepath.Join(mirrortest.EtcdBinaries(t, "etcd"), "etcd")
	}
	return mirrortest.KubeBinaryAt(t, k8s, c)
}
