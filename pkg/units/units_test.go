package units

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"
	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/podnet"
)

// newInventory builds a loaded 3-host inventory; etcd "" takes the default
// for the Kubernetes version.
func newInventory(t testing.TB, k8s, etcd string) *inventory.Inventory {
	t.Helper()
	src := fmt.Sprintf(`cluster: lab
kubernetesVersion: %q
controlPlane:
  - {name: controller-1, address: 10.240.0.11}
  - {name: controller-2, address: 10.240.0.12}
  - {name: controller-3, address: 10.240.0.13}
workers:
  - {name: worker-1, address: 10.240.0.21}
  - {name: worker-2, address: 10.240.0.22}
`, k8s)
	if etcd != "" {
		src += fmt.Sprintf("etcdVersion: %q\n", etcd)
	}
	inv, err := inventory.Parse("inventory.yaml", "/nonexistent/inventory.yaml", []byte(src))
	if err != nil {
		t.Fatalf("inventory: %v", err)
	}
	return inv
}

// subnets allocates the workers' pod subnets as 'hardway up' does on a
// fresh state directory.
func subnets(t testing.TB, inv *inventory.Inventory) podnet.Allocation {
	t.Helper()
	var names []string
	for _, w := range inv.Workers {
		names = append(names, w.Name)
	}
	a, _, err := podnet.Allocate(nil, names, inv.Network.PodNet())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// render is Render with the subnets of a fresh allocation.
func render(t testing.TB, inv *inventory.Inventory) ([]Manifest, error) {
	t.Helper()
	return Render(inv, subnets(t, inv))
}

// supported are the Kubernetes minors with the etcd versions they are
// tested with, default first.
var supported = []struct{ k8s, etcd string }{
	{"1.30", ""}, {"1.31", ""}, {"1.32", ""}, {"1.33", ""}, {"1.33", "v3.6.16"},
	{"1.34", ""}, {"1.35", ""}, {"1.36", ""}, {"1.37", ""}, {"1.37", "v3.6.16"},
}

func flagMap(t *testing.T, inv *inventory.Inventory, h inventory.Host, c string) map[string]string {
	t.Helper()
	fl, err := Flags(inv, h, c)
	if err != nil {
		t.Fatalf("Flags(%s): %v", c, err)
	}
	m := map[string]string{}
	for _, f := range fl {
		m[f.Name] = f.Value
		if strings.TrimSpace(f.Reason) == "" || strings.Contains(f.Reason, "\n") {
			t.Errorf("%s --%s: reason must be one non-empty line, got %q", c, f.Name, f.Reason)
		}
	}
	if !slices.IsSortedFunc(fl, func(a, b Flag) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("%s: flags not sorted", c)
	}
	return m
}

// Flags that must never be rendered for any supported version: removed,
// deprecated, insecure or turning on alpha APIs.
var forbidden = map[string][]string{
	Etcd:              {"enable-v2", "experimental-enable-v2v3", "log-package-levels", "logger"},
	APIServer:         {"kubelet-https", "insecure-port", "insecure-bind-address", "address", "port", "apiserver-count", "cloud-provider", "cloud-config", "runtime-config", "feature-gates", "basic-auth-file", "token-auth-file", "enable-swagger-ui", "anonymous-auth"},
	ControllerManager: {"address", "port", "cloud-provider", "insecure-experimental-approve-all-kubelet-csrs-for-group", "feature-gates"},
	Scheduler:         {"address", "port", "kubeconfig", "leader-elect", "policy-config-file", "algorithm-provider", "feature-gates"},
}

func TestFlagsPerVersion(t *testing.T) {
	for _, v := range supported {
		t.Run(v.k8s+"/"+v.etcd, func(t *testing.T) {
			inv := newInventory(t, v.k8s, v.etcd)
			h := inv.ControlPlane[1]
			want := map[string]map[string]string{
				APIServer: {
					"service-cluster-ip-range":                    "10.32.0.0/24",
					"service-account-issuer":                      "https://kubernetes.default.svc.cluster.local",
					"service-account-key-file":                    ServiceAccountPub,
					"service-account-signing-key-file":            ServiceAccountKey,
					"advertise-address":                           "10.240.0.12",
					"etcd-servers":                                "https://10.240.0.11:2379,https://10.240.0.12:2379,https://10.240.0.13:2379",
					"etcd-certfile":                               EtcdClientCert,
					"etcd-keyfile":                                EtcdClientKey,
					"etcd-cafile":                                 EtcdTrustCert,
					"encryption-provider-config":                  EncryptionConfig,
					"encryption-provider-config-automatic-reload": "true",
					"kubelet-client-certificate":                  KubeletClientCert,
					"kubelet-client-key":                          KubeletClientKey,
					"requestheader-client-ca-file":                FrontProxyTrustCert,
					"requestheader-allowed-names":                 "front-proxy-client",
					"proxy-client-cert-file":                      FrontProxyClientCert,
					"proxy-client-key-file":                       FrontProxyClientKey,
					"audit-log-path":                              AuditLog,
					"audit-policy-file":                           AuditPolicy,
					"audit-log-maxage":                            "30",
					"audit-log-maxbackup":                         "10",
					"audit-log-maxsize":                           "100",
					"authorization-mode":                          "Node,RBAC",
					"secure-port":                                 "6443",
				},
				ControllerManager: {
					"cluster-cidr":                     "10.200.0.0/16",
					"allocate-node-cidrs":              "false",
					"service-cluster-ip-range":         "10.32.0.0/24",
					"cluster-signing-cert-file":        CACert,
					"cluster-signing-key-file":         CAKey,
					"root-ca-file":                     CATrustCert,
					"use-service-account-credentials":  "true",
					"leader-elect":                     "true",
					"controllers":                      "*,bootstrapsigner,tokencleaner",
					"authentication-kubeconfig":        ControllerManagerKube,
					"authorization-kubeconfig":         ControllerManagerKube,
					"kubeconfig":                       ControllerManagerKube,
					"secure-port":                      "10257",
					"bind-address":                     "127.0.0.1",
					"service-account-private-key-file": ServiceAccountKey,
				},
				Scheduler: {
					"config":                    SchedulerConfig,
					"authentication-kubeconfig": SchedulerKube,
					"authorization-kubeconfig":  SchedulerKube,
					"secure-port":               "10259",
					"bind-address":              "127.0.0.1",
				},
				Etcd: {
					"name":                  "controller-2",
					"initial-cluster":       "controller-1=https://10.240.0.11:2380,controller-2=https://10.240.0.12:2380,controller-3=https://10.240.0.13:2380",
					"listen-client-urls":    "https://10.240.0.12:2379,https://127.0.0.1:2379",
					"advertise-client-urls": "https://10.240.0.12:2379",
					"listen-peer-urls":      "https://10.240.0.12:2380",
					"client-cert-auth":      "true",
					"peer-client-cert-auth": "true",
					"listen-metrics-urls":   "http://127.0.0.1:2381",
					"data-dir":              EtcdDataDir,
				},
			}
			etcdMinor := inv.Etcd.Segments()[1]
			if etcdMinor >= 6 {
				want[Etcd]["feature-gates"] = "InitialCorruptCheck=true"
				want[Etcd]["watch-progress-notify-interval"] = "5s"
			} else {
				want[Etcd]["experimental-initial-corrupt-check"] = "true"
				want[Etcd]["experimental-watch-progress-notify-interval"] = "5s"
			}
			for _, c := range Names(ControlPlane) {
				got := flagMap(t, inv, h, c)
				for name, val := range want[c] {
					if got[name] != val {
						t.Errorf("%s --%s = %q, want %q", c, name, got[name], val)
					}
				}
				for _, name := range forbidden[c] {
					if _, ok := got[name]; ok {
						t.Errorf("%s: forbidden flag --%s rendered", c, name)
					}
				}
				for name := range got {
					if c == Etcd && etcdMinor >= 6 && strings.HasPrefix(name, "experimental-") {
						t.Errorf("etcd %s: --%s (every --experimental-* is deprecated in 3.6, removed in 3.7)", inv.Etcd, name)
					}
				}
			}
		})
	}
}

func TestRenderedContent(t *testing.T) {
	bad := []string{"--kubelet-https", "--address=", "--port=", "v1beta1", "v1alpha1", "api/all", "${", "--apiserver-count", "--insecure-", "--cloud-provider",
		// lab-only settings (containerHost): none of these hosts is one
		"failCgroupV1", "restrict_oom_score_adj", "NoNewKeyring", "conntrack-max-per-core"}
	for _, v := range supported {
		t.Run(v.k8s+"/"+v.etcd, func(t *testing.T) {
			inv := newInventory(t, v.k8s, v.etcd)
			ms, err := render(t, inv)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 5 {
				t.Fatalf("%d manifests, want 3 control-plane hosts and 2 workers", len(ms))
			}
			for _, m := range ms {
				rendered := 0
				for _, f := range m.Files {
					if (f.Content == nil) == (f.Source == nil) {
						t.Errorf("%s %s: exactly one of Content and Source must be set", m.Host, f.Path)
					}
					if f.Source == nil {
						rendered++
					}
					for _, s := range bad {
						if s == "v1beta1" && f.Path == KubeletConfig && bytes.HasPrefix(f.Content, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\n")) {
							continue // the only version of the kubelet's config API
						}
						if bytes.Contains(f.Content, []byte(s)) {
							t.Errorf("%s %s contains %q", m.Host, f.Path, s)
						}
					}
					if strings.HasSuffix(f.Path, ".service") && f.Path != UnitPath(PodRoutes) {
						checkUnit(t, m.Host+":"+f.Path, f.Content)
					}
				}
				// Control plane: 4 units, scheduler config, audit policy,
				// admission config, etcd's sysusers.d file, routes;
				// workers: 4 units (the node-local load balancer too), containerd,
				// modules, sysctl, crictl, kubelet, the bridge CNI config (no
				// loopback config), the load balancer's config, routes.
				if want := map[Role]int{ControlPlane: 9, Worker: 12}[m.Role]; rendered != want {
					t.Errorf("%s: %d rendered files, want %d", m.Host, rendered, want)
				}
				if m.Role == Worker {
					continue
				}
				f, ok := m.File(UnitPath(APIServer))
				if !ok || !bytes.Contains(f.Content, []byte("--service-cluster-ip-range=10.32.0.0/24")) {
					t.Errorf("%s: apiserver unit lacks --service-cluster-ip-range", m.Host)
				}
				f, _ = m.File(SchedulerConfig)
				if !bytes.Contains(f.Content, []byte("apiVersion: kubescheduler.config.k8s.io/v1\n")) {
					t.Errorf("%s: scheduler config:\n%s", m.Host, f.Content)
				}
			}
		})
	}
}

// checkUnit parses a unit the way systemd's own Go bindings do and checks
// the settings hardway relies on.
func checkUnit(t *testing.T, name string, data []byte) {
	t.Helper()
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: unit.Deserialize: %v", name, err)
		return
	}
	get := func(section, key string) []string {
		var out []string
		for _, o := range opts {
			if o.Section == section && o.Name == key {
				out = append(out, o.Value)
			}
		}
		return out
	}
	if r := get("Service", "Restart"); !slices.Equal(r, []string{"on-failure"}) {
		t.Errorf("%s: Restart=%v", name, r)
	}
	// go-systemd keeps continuation lines as "\\\n"; systemd reads them as a space.
	exec := get("Service", "ExecStart")
	for i := range exec {
		exec[i] = strings.ReplaceAll(exec[i], "\\\n", " ")
	}
	if len(exec) != 1 || !strings.HasPrefix(exec[0], BinDir+"/") {
		t.Errorf("%s: ExecStart=%v", name, exec)
	}
	if strings.Contains(name, "etcd.service") || strings.Contains(name, "kube-apiserver.service") {
		if ty := get("Service", "Type"); !slices.Equal(ty, []string{"notify"}) {
			t.Errorf("%s: Type=%v, want notify", name, ty)
		}
	}
	if w := get("Install", "WantedBy"); !slices.Equal(w, []string{"multi-user.target"}) {
		t.Errorf("%s: WantedBy=%v", name, w)
	}
	// Every flag on its own continuation line, nothing else in ExecStart.
	for _, arg := range strings.Fields(exec[0])[1:] {
		if !strings.HasPrefix(arg, "--") || !strings.Contains(arg, "=") {
			t.Errorf("%s: ExecStart argument %q is not --name=value", name, arg)
		}
	}
}

// Every path a flag names must be a file or directory the manifest puts on
// the host: a unit pointing at a file nobody pushes fails only at start.
func TestFlagPathsInManifest(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Manifest{ms[0], ms[3]} {
		flagPathsInManifest(t, m)
	}
}

func flagPathsInManifest(t *testing.T, m Manifest) {
	dirs := map[string]bool{}
	for _, d := range m.Dirs {
		dirs[d.Path] = true
	}
	// What a unit has systemd make: its StateDirectory, and the copies of
	// its credentials (each from a file the manifest must hold).
	creds := map[string]string{}
	for comp, settings := range m.Settings {
		for _, s := range settings {
			if s.Key == "StateDirectory" {
				dirs["/var/lib/"+s.Value.(string)] = true
			}
			if id, ok := strings.CutPrefix(s.Key, "LoadCredential."); ok {
				creds[CredentialDir(MustLookup(comp).Unit)+"/"+id] = s.Value.(string)
			}
		}
	}
	for c, settings := range m.Settings {
		for _, s := range settings {
			// containerd makes its own root, state dir and socket; the
			// host step links the kubelet's resolv.conf (a per-host fact).
			if v, ok := s.Value.(string); ok && strings.HasPrefix(v, "/") && !strings.HasSuffix(v, "/containerd") && v != ContainerdSocket && v != KubeletResolvConf {
				if _, ok := m.File(v); !ok && !dirs[v] {
					t.Errorf("%s: %s %s=%s: not in the manifest", m.Host, c, s.File, v)
				}
			}
		}
	}
	for c, flags := range m.Flags {
		for _, f := range flags {
			if !strings.HasPrefix(f.Value, "/") {
				continue
			}
			if _, ok := m.File(f.Value); ok || dirs[f.Value] {
				continue
			}
			if src, ok := creds[f.Value]; ok {
				if _, ok := m.File(src); !ok {
					t.Errorf("%s: %s --%s=%s: the credential's file %s is not in the manifest", m.Host, c, f.Name, f.Value, src)
				}
				continue
			}
			if f.Name == "audit-log-path" && dirs[AuditLogDir] && strings.HasPrefix(f.Value, AuditLogDir+"/") {
				continue // written by the apiserver into a directory the manifest creates
			}
			t.Errorf("%s: %s --%s=%s: not in the manifest", m.Host, c, f.Name, f.Value)
		}
	}
	for _, c := range m.Components {
		if MustLookup(c).Exec() == "" {
			continue // the pod routes run ip
		}
		f, ok := m.File(MustLookup(c).Exec())
		if !ok || f.Source == nil || f.Source.Kind != SourceBinary || f.Mode != ModeExec {
			t.Errorf("%s: binary of %s missing from the manifest: %+v", m.Host, c, f)
		}
	}
}

func TestManifestModes(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[2:4] {
		for _, f := range m.Files {
			want := ModePublic // certificates, public keys, image tarballs
			switch {
			case f.Source == nil:
				// Rendered: units and configs, 0600 as the CIS benchmark asks.
				want = ModeConfig
			case f.Source != nil && f.Source.Kind == SourceBinary && !strings.HasPrefix(f.Path, ImageDir+"/"):
				want = ModeExec
			case f.Source != nil && (f.Source.Kind == SourceKey || f.Source.Kind == SourceKubeconfig || f.Source.Kind == SourceEncryptionConfig):
				want = ModeSecret
			}
			if strings.HasSuffix(f.Path, ".key") || strings.HasSuffix(f.Path, "kubeconfig") || f.Path == EncryptionConfig {
				if want != ModeSecret {
					t.Errorf("%s %s: a secret from %v", m.Host, f.Path, f.Source)
				}
			}
			if f.Mode != want || f.Owner != Owner {
				t.Errorf("%s %s: mode %04o owner %s, want %04o %s", m.Host, f.Path, f.Mode, f.Owner, want, Owner)
			}
		}
	}
	for _, tc := range []struct{ path, src string }{
		{EtcdServerCert, "cert etcd-server-controller-3"},
		{EtcdPeerKey, "key etcd-peer-controller-3"},
		{CACert, "cert ca"},
		{ServiceAccountPub, "public-key service-account"},
		{EncryptionConfig, "encryption-config"},
		{SchedulerKube, "kubeconfig kube-scheduler"},
		{KubeletCert, "cert kubelet-worker-1"},
		{KubeletKey, "key kubelet-worker-1"},
		{KubeletKubeconfig, "kubeconfig worker-1"},
		{KubeProxyKubeconfig, "kubeconfig kube-proxy"},
		{CNIBinDir + "/bridge", "binary cni-bridge"},
		{SbinDir + "/runc", "binary runc"},
	} {
		m := ms[2] // controller-3, or worker-1 for the worker's files
		if _, ok := m.File(tc.path); !ok {
			m = ms[3]
		}
		f, ok := m.File(tc.path)
		if !ok || f.Source == nil || f.Source.String() != tc.src {
			t.Errorf("%s: source %v, want %s", tc.path, f.Source, tc.src)
		}
	}
	// etcd's data dir is systemd's to make and own (StateDirectory=):
	// etcd:etcd 0700, which a Dir here would fight.
	if d := ms[0].Dirs; slices.ContainsFunc(d, func(d Dir) bool { return d.Path == EtcdDataDir }) {
		t.Errorf("dirs %v hold %s", d, EtcdDataDir)
	}
	unit, _ := ms[0].File(UnitPath(Etcd))
	for _, line := range []string{"User=etcd", "Group=etcd", "StateDirectory=etcd", "StateDirectoryMode=0700", "LoadCredential=server.key:" + EtcdServerKey} {
		if !slices.Contains(strings.Split(string(unit.Content), "\n"), line) {
			t.Errorf("etcd.service lacks %s:\n%s", line, unit.Content)
		}
	}
	for _, f := range ms[0].Files {
		if strings.HasPrefix(f.Path, EtcdDir+"/") && f.Owner != Owner {
			t.Errorf("%s is %s: etcd's keys stay root's (it gets copies)", f.Path, f.Owner)
		}
	}
}

func TestRestarts(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	pick := func(paths ...string) []File {
		var out []File
		for _, p := range paths {
			f, ok := m.File(p)
			if !ok {
				t.Fatalf("%s not in manifest", p)
			}
			out = append(out, f)
		}
		return out
	}
	for _, tc := range []struct {
		changed []string
		want    []string
	}{
		{[]string{SchedulerConfig}, []string{Scheduler}},
		// The apiserver keeps the CA itself only for the identity check: the
		// trust bundle is what it reads.
		{[]string{CACert, EtcdCACert}, []string{Etcd, ControllerManager}},
		{[]string{CATrustCert}, []string{APIServer, ControllerManager}},
		{[]string{BinPath("etcdctl"), FrontProxyCAKey}, nil},
		{[]string{UnitPath(Scheduler), ServiceAccountKey}, []string{APIServer, ControllerManager, Scheduler}},
	} {
		if got := Restarts(pick(tc.changed...)); !slices.Equal(got, tc.want) {
			t.Errorf("Restarts(%v) = %v, want %v", tc.changed, got, tc.want)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a, err := render(t, newInventory(t, "1.37", ""))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, err := render(t, newInventory(t, "1.37", ""))
		if err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if !bytes.Equal(a[i].Text(), b[i].Text()) {
				t.Fatalf("manifest of %s differs between renders", a[i].Host)
			}
			for j := range a[i].Files {
				if !bytes.Equal(a[i].Files[j].Content, b[i].Files[j].Content) {
					t.Fatalf("%s differs between renders", a[i].Files[j].Path)
				}
			}
		}
	}
}

func TestIPv6Host(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	h := inventory.Host{Name: "controller-1", Address: "fd00::11"}
	inv.ControlPlane = []inventory.Host{h}
	got := flagMap(t, inv, h, Etcd)
	if got["listen-client-urls"] != "https://[fd00::11]:2379,https://[::1]:2379" {
		t.Errorf("listen-client-urls = %q", got["listen-client-urls"])
	}
	if got := flagMap(t, inv, h, APIServer)["bind-address"]; got != "::" {
		t.Errorf("apiserver bind-address = %q, want ::", got)
	}
}

func TestCheckArg(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"controllers", "*,bootstrapsigner,tokencleaner", true},
		{"listen-client-urls", "https://[fd00::1]:2379", true},
		{"encryption-provider-config", "${ENCRYPTION_CONFIG}", false},
		{"name", "100%", false},
		{"name", "a b", false},
		{"name", `"quoted"`, false},
		{"name", `a\b`, false},
		{"name", "", false},
	} {
		if err := checkArg(tc.name, tc.value); (err == nil) != tc.ok {
			t.Errorf("checkArg(%q, %q) = %v, want ok=%v", tc.name, tc.value, err, tc.ok)
		}
	}
}

func TestSelectFlagsRejectsDuplicatesAndBadConstraints(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	if _, err := selectFlags("x", []flagDef{{"", "a", "1", "r"}, {">= 1.0.0", "a", "2", "r"}}, inv.K8s); err == nil {
		t.Error("duplicate flag accepted")
	}
	if _, err := selectFlags("x", []flagDef{{"~> nonsense", "a", "1", "r"}}, inv.K8s); err == nil {
		t.Error("bad constraint accepted")
	}
	if _, err := Flags(inv, inv.ControlPlane[0], "kubelet-x"); err == nil {
		t.Error("unknown component accepted")
	}
}

// A pre-release must be gated like the release it leads to.
func TestPrereleaseGating(t *testing.T) {
	inv := newInventory(t, "1.37", "")
	v, err := inventoryVersion("3.7.0-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	inv.Etcd = v
	got := flagMap(t, inv, inv.ControlPlane[0], Etcd)
	if got["feature-gates"] != "InitialCorruptCheck=true" {
		t.Errorf("etcd 3.7.0-rc.1: feature-gates = %q", got["feature-gates"])
	}
}

func TestAPIServerPortMatchesInventory(t *testing.T) {
	if APIServerPort != inventory.DefaultAPIServerPort {
		t.Errorf("APIServerPort %d != inventory.DefaultAPIServerPort %d: kubeconfigs would point elsewhere", APIServerPort, inventory.DefaultAPIServerPort)
	}
}

func inventoryVersion(s string) (*version.Version, error) { return version.NewSemver(s) }

func BenchmarkRender(b *testing.B) {
	inv := newInventory(b, "1.36", "")
	pods := subnets(b, inv)
	for b.Loop() {
		if _, err := Render(inv, pods); err != nil {
			b.Fatal(err)
		}
	}
}
