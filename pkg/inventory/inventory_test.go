package inventory

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/usererr"
)

const good = `cluster: lab
controlPlane:
  - name: controller-1
    address: 10.240.0.11
  - name: controller-2
    address: 10.240.0.12
  - name: controller-3
    address: 10.240.0.13
`

func parse(t *testing.T, src string) (*Inventory, []Problem) {
	t.Helper()
	inv, err := Parse("inv.yaml", "/tmp/x/inv.yaml", []byte(src))
	if err == nil {
		return inv, nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is not a ValidationError: %v", err)
	}
	if usererr.CodeOf(err) != usererr.CodeInventory {
		t.Fatalf("exit code %d, want %d", usererr.CodeOf(err), usererr.CodeInventory)
	}
	return nil, ve.Problems
}

func TestDefaults(t *testing.T) {
	inv, probs := parse(t, good)
	if probs != nil {
		t.Fatalf("unexpected problems: %v", probs)
	}
	checks := map[string][2]string{
		"kubernetesVersion": {inv.KubernetesVersion, "v1.36.3"},
		"etcdVersion":       {inv.EtcdVersion, "v3.6.16"},
		"arch":              {inv.Arch, "amd64"},
		"serviceCIDR":       {inv.Network.ServiceCIDR, "10.32.0.0/24"},
		"podCIDR":           {inv.Network.PodCIDR, "10.200.0.0/16"},
		"clusterDomain":     {inv.Network.ClusterDomain, "cluster.local"},
		"serviceIP":         {inv.Network.ServiceIP().String(), "10.32.0.1"},
		"apiserver":         {inv.APIServerURL(), "https://10.240.0.11:6443"},
		"algorithm":         {inv.PKI.Algorithm, "ecdsa-p256"},
		"provider":          {inv.Encryption.Provider, "secretbox"},
		"ssh user":          {inv.SSH.User, "root"},
		"k8s mirror":        {inv.Releases.Kubernetes, DefaultKubernetesMirror},
		"lock":              {inv.LockPath(), "/tmp/x/hardway.lock"},
		"state":             {inv.DefaultStateDir(), "/tmp/x/.hardway"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
	if len(inv.Warnings) != 0 {
		t.Errorf("warnings: %v", inv.Warnings)
	}
	if inv.K8s.String() != "1.36.3" || inv.Etcd.String() != "3.6.16" {
		t.Errorf("parsed versions %s %s", inv.K8s, inv.Etcd)
	}
}

func TestEtcdDefaultFollowsKubernetes(t *testing.T) {
	for k8s, etcd := range map[string]string{"v1.30.14": "v3.5.24", "1.33": "v3.5.24", "v1.36.3": "v3.6.16", "1.37": "v3.7.0"} {
		inv, probs := parse(t, "kubernetesVersion: \""+k8s+"\"\n"+good)
		if probs != nil {
			t.Fatalf("%s: %v", k8s, probs)
		}
		if inv.EtcdVersion != etcd {
			t.Errorf("kubernetes %s: etcd %s, want %s", k8s, inv.EtcdVersion, etcd)
		}
	}
}

// Each rule, with the exact position and path it must be reported at.
func TestValidationRules(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want string // "line:col: path: message fragment"
	}{
		{"unknown key", "clustr: x\n" + good, "1:1: clustr: unknown key (hint: did you mean \"cluster\"?)"},
		{"unknown nested key", good + "    adress: 1.2.3.4\n", "9:5: controlPlane[2].adress: unknown key (hint: did you mean \"address\"?)"},
		{"bad ip", strings.Replace(good, "10.240.0.13", "10.0.0.300", 1), "8:14: controlPlane[2].address: \"10.0.0.300\" is not an IP address"},
		{"bad cidr", "network:\n  serviceCIDR: 10.32.0.0/33\n" + good, "2:16: network.serviceCIDR: \"10.32.0.0/33\" is not a CIDR"},
		{"host bits", "network:\n  podCIDR: 10.200.1.0/16\n" + good, "2:12: network.podCIDR: \"10.200.1.0/16\" has host bits set"},
		{"overlap", "network:\n  serviceCIDR: 10.200.0.0/24\n" + good, "2:16: network.serviceCIDR: podCIDR 10.200.0.0/16 and serviceCIDR 10.200.0.0/24 overlap"},
		{"host in pod cidr", "network:\n  podCIDR: 10.240.0.0/16\n" + good, "6:14: controlPlane[0].address: 10.240.0.11 is inside network.podCIDR"},
		{"host in service cidr", "network:\n  serviceCIDR: 10.240.0.0/24\n" + good, "8:14: controlPlane[1].address: 10.240.0.12 is inside network.serviceCIDR"},
		{"duplicate name", strings.Replace(good, "controller-2", "controller-1", 1), "5:11: controlPlane[1].name: \"controller-1\" is already used by controlPlane[0]"},
		{"duplicate address", strings.Replace(good, "10.240.0.12", "10.240.0.11", 1), "6:14: controlPlane[1].address: 10.240.0.11 is already used by controlPlane[0].address"},
		{"not dns-1123", strings.Replace(good, "controller-3", "Controller_3", 1), "7:11: controlPlane[2].name: \"Controller_3\" is not a valid host name"},
		{"version out of range", "kubernetesVersion: v1.29.4\n" + good, "1:20: kubernetesVersion: v1.29.4 is outside the supported range"},
		{"version garbage", "kubernetesVersion: latest\n" + good, "1:20: kubernetesVersion: \"latest\" is not a version"},
		{"etcd out of range", "etcdVersion: v3.4.30\n" + good, "1:14: etcdVersion: v3.4.30 is outside the supported range"},
		{"arch", "arch: s390x\n" + good, "1:7: arch: \"s390x\" is not a supported architecture"},
		{"algorithm", "pki:\n  algorithm: dsa\n" + good, "2:14: pki.algorithm: \"dsa\" is not a supported key algorithm"},
		{"provider", "encryption:\n  provider: kms\n" + good, "2:13: encryption.provider: \"kms\" is not a supported provider"},
		{"mirror", "releases:\n  etcd: ftp://x\n" + good, "2:9: releases.etcd: \"ftp://x\" is not a mirror URL"},
		{"port", "ssh:\n  port: 70000\n" + good, "2:9: ssh.port: 70000 is not a TCP port"},
		{"port not a number", "ssh:\n  port: twenty\n" + good, "2:9: ssh.port: \"twenty\" is not a whole number"},
		{"list expected", "cluster: lab\ncontrolPlane: controller-1\n", "2:15: controlPlane: must be a list"},
		{"no control plane", "cluster: lab\n", "1:1: controlPlane: at least one control-plane host is required"},
		{"missing address", "controlPlane:\n  - name: c1\n", "2:5: controlPlane[0].address: an address is required"},
		{"leaf outlives ca", "pki:\n  caValidity: 1y\n  leafValidity: 2y\n" + good, "3:17: pki.leafValidity: is longer than pki.caValidity"},
		{"bad duration", "pki:\n  caValidity: forever\n" + good, "2:15: pki.caValidity: \"forever\" is not a duration"},
		// Issue 12: these wrapped around into a 21-day leaf and a 15-year CA.
		{"leaf overflow", "pki:\n  leafValidity: 585y\n" + good, "2:17: pki.leafValidity: 585y is longer than the maximum 10y"},
		{"ca overflow", "pki:\n  caValidity: 600y\n" + good, "2:15: pki.caValidity: 600y is longer than the maximum 100y"},
		{"ca overflow in hours", "pki:\n  caValidity: 99999999999h\n" + good, "2:15: pki.caValidity: 99999999999h is longer than the maximum 100y"},
		{"ca overflow in days", "pki:\n  caValidity: 9999999999999999999999d\n" + good, "2:15: pki.caValidity: 9999999999999999999999d is longer than the maximum 100y"},
		{"absurd ca", "pki:\n  caValidity: 200y\n" + good, "2:15: pki.caValidity: 200y is longer than the maximum 100y"},
		{"absurd leaf", "pki:\n  caValidity: 50y\n  leafValidity: 11y\n" + good, "3:17: pki.leafValidity: 11y is longer than the maximum 10y"},
		{"leaf too short", "pki:\n  leafValidity: 10m\n" + good, "2:17: pki.leafValidity: 10m is shorter than the minimum 1h"},
		{"ca too short", "pki:\n  caValidity: 2h\n  leafValidity: 1h\n" + good, "2:15: pki.caValidity: 2h is shorter than the minimum 1d"},
		{"negative", "pki:\n  leafValidity: -5d\n" + good, "2:17: pki.leafValidity: must be positive"},
		{"endpoint", "network:\n  apiServerEndpoint: \"a b:x\"\n" + good, "2:22: network.apiServerEndpoint: \"a b:x\" is not a host[:port]"},
		{"duplicate key", "cluster: a\ncluster: b\n" + good, "2:1: cluster: key appears twice"},
		{"pod security level", "podSecurity:\n  enforce: strict\n" + good, "2:12: podSecurity.enforce: \"strict\" is not a Pod Security level (hint: one of privileged, baseline (the default), restricted)"},
		{"exempt namespace", "podSecurity:\n  exemptNamespaces: [kube-system, Bad_NS]\n" + good, "2:35: podSecurity.exemptNamespaces[1]: \"Bad_NS\" is not a namespace name"},
		{"not yaml", "controlPlane: [\n", "1:1: "},
		{"empty", "", "1:1: the inventory must be a YAML mapping"},
		{"cluster name", strings.Replace(good, "cluster: lab", "cluster: My Lab", 1), "1:10: cluster: \"My Lab\" is not a valid name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, probs := parse(t, c.src)
			if len(probs) == 0 {
				t.Fatalf("no problem reported, want %q", c.want)
			}
			var all []string
			for _, p := range probs {
				s := strings.TrimPrefix(p.String(), "inv.yaml:")
				all = append(all, s)
				if strings.HasPrefix(s, c.want) {
					return
				}
			}
			t.Fatalf("want a problem starting %q, got:\n  %s", c.want, strings.Join(all, "\n  "))
		})
	}
}

func TestWarnings(t *testing.T) {
	inv, probs := parse(t, "etcdVersion: v3.5.24\ncontrolPlane:\n  - name: a\n    address: 10.0.1.1\n  - name: b\n    address: 10.0.1.2\n")
	if probs != nil {
		t.Fatal(probs)
	}
	var got []string
	for _, w := range inv.Warnings {
		got = append(got, w.String())
	}
	want := []string{
		"inv.yaml:1:14: etcdVersion: warning: etcd v3.5.24 with Kubernetes v1.36.3 is not a tested pairing",
		"inv.yaml:3:3: controlPlane: warning: an even number of control-plane hosts (2)",
	}
	if len(got) != len(want) {
		t.Fatalf("warnings %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

// The acceptance case: a misspelt key, an overlapping CIDR and a bad IP are
// all reported at once, sorted, each with line:col.
func TestAllProblemsAtOnceSorted(t *testing.T) {
	src := `cluster: lab
network:
  serviceCIDR: 10.200.0.0/24
controlPlane:
  - name: controller-1
    address: 10.240.0.11
  - name: controller-2
    address: 10.240.0.300
  - name: controller-3
    adress: 10.240.0.13
`
	_, probs := parse(t, src)
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	want := []string{
		"inv.yaml:3:16: network.serviceCIDR: podCIDR 10.200.0.0/16 and serviceCIDR 10.200.0.0/24 overlap",
		"inv.yaml:8:14: controlPlane[1].address: \"10.240.0.300\" is not an IP address",
		"inv.yaml:9:5: controlPlane[2].address: an address is required",
		"inv.yaml:10:5: controlPlane[2].adress: unknown key (hint: did you mean \"address\"?)",
	}
	if len(got) != len(want) {
		t.Fatalf("problems: %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func TestLoadResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "inventory.yaml")
	src := "ssh:\n  identityFile: id_ed25519\n  knownHostsFile: kh\n  user: admin\n" + good
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	s := inv.SSHFor(inv.ControlPlane[0])
	if s.IdentityFile != filepath.Join(dir, "id_ed25519") || s.KnownHostsFile != filepath.Join(dir, "kh") {
		t.Fatalf("paths not resolved: %+v", s)
	}
	if s.Sudo == nil || !*s.Sudo {
		t.Fatal("non-root user should default to sudo")
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); usererr.CodeOf(err) != usererr.CodeInventory {
		t.Fatalf("missing file: %v", err)
	}
}

func TestExampleInventoryIsValid(t *testing.T) {
	inv, err := Load("../../inventory.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.ControlPlane) != 3 || len(inv.Workers) != 2 || len(inv.Warnings) != 0 {
		t.Fatalf("example: %d cp, %d workers, warnings %v", len(inv.ControlPlane), len(inv.Workers), inv.Warnings)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("controlPlane: [\n"))
	f.Add([]byte("network: {serviceCIDR: 10.0.0.0/8, podCIDR: 10.0.0.0/8}\ncontrolPlane: [{name: a, address: 10.0.0.1}]"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("pki: {caValidity: 9999999999999y}\n"))
	if b, err := os.ReadFile("../../inventory.example.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := Parse("f.yaml", "/f.yaml", data)
		if err == nil && inv == nil {
			t.Fatal("nil inventory without error")
		}
		if err != nil && usererr.CodeOf(err) != usererr.CodeInventory {
			t.Fatalf("error without the inventory exit code: %v", err)
		}
	})
}

// podSecurity left out is baseline with kube-system exempt; an explicit
// empty list exempts no namespace.
func TestPodSecurityDefaults(t *testing.T) {
	for _, tc := range []struct {
		src     string
		enforce string
		exempt  []string
	}{
		{good, PodSecurityBaseline, []string{"kube-system"}},
		{"podSecurity:\n  enforce: restricted\n" + good, PodSecurityRestricted, []string{"kube-system"}},
		{"podSecurity:\n  exemptNamespaces: []\n" + good, PodSecurityBaseline, []string{}},
	} {
		p := filepath.Join(t.TempDir(), "inventory.yaml")
		if err := os.WriteFile(p, []byte(tc.src), 0o600); err != nil {
			t.Fatal(err)
		}
		inv, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if ps := inv.PodSecurity; ps.Enforce != tc.enforce || ps.ExemptNamespaces == nil || !slices.Equal(ps.ExemptNamespaces, tc.exempt) {
			t.Errorf("%q: %+v", tc.src[:20], ps)
		}
	}
}
