// Package units renders what a control-plane host runs: the systemd units of
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler, their
// config files, and the manifest of every file the host needs.
//
// Flags are data (flags.go), gated by version constraints and asserted by
// table tests; the templates in templates/ only lay files out. The same
// inventory always renders byte-identical files.
package units

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/hashicorp/go-version"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/templates"
)

// unitData is what systemd.service.tmpl lays out.
type unitData struct {
	Description   string
	Documentation string
	After         []string
	Wants         []string
	Type          string // notify: systemd waits until the daemon says it is ready
	ExecStart     string
	Args          []string
	LimitNOFILE   int
	// EnvironmentFile is read if it exists ("-" prefix): see EtcdJoinEnv.
	EnvironmentFile string
}

// unitSpec is everything but the flags of a component's unit.
func unitSpec(component string) unitData {
	switch component {
	case Etcd:
		return unitData{Description: "etcd key-value store", Documentation: "https://etcd.io/docs/",
			After: []string{"network-online.target"}, Wants: []string{"network-online.target"},
			Type: "notify", LimitNOFILE: 65536, EnvironmentFile: "-" + EtcdJoinEnv}
	case APIServer:
		// The apiserver reports READY=1 once its listeners are up and its
		// post-start hooks ran, so 'systemctl start' waits for it.
		return unitData{Description: "Kubernetes API server",
			Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/",
			After:         []string{"network-online.target", "etcd.service"}, Wants: []string{"network-online.target"},
			Type: "notify", LimitNOFILE: 65536}
	case ControllerManager:
		return unitData{Description: "Kubernetes controller manager",
			Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/",
			After:         []string{"kube-apiserver.service"}, Type: "simple"}
	case Scheduler:
		return unitData{Description: "Kubernetes scheduler",
			Documentation: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-scheduler/",
			After:         []string{"kube-apiserver.service"}, Type: "simple"}
	}
	return unitData{}
}

// apiVersions picks each config file's apiVersion by Kubernetes version.
// Only GA versions: v1beta*/v1alpha* ones are removed within a few releases
// and a removed one stops the component from starting.
func apiVersions(k8s *version.Version) (scheduler, audit string, err error) {
	if !version.MustConstraints(version.NewConstraint(">= 1.25.0")).Check(k8s.Core()) {
		return "", "", fmt.Errorf("kubernetes %s: kubescheduler.config.k8s.io/v1 needs 1.25 or later", k8s)
	}
	return "kubescheduler.config.k8s.io/v1", "audit.k8s.io/v1", nil
}

// Render returns the manifest of every control-plane host, in inventory order.
func Render(inv *inventory.Inventory) ([]Manifest, error) {
	tmpl, err := template.New("").Option("missingkey=error").ParseFS(templates.FS, "*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse templates: %w", err)
	}
	if inv.K8s == nil || inv.Etcd == nil {
		return nil, fmt.Errorf("render: inventory has no parsed Kubernetes or etcd version")
	}
	var out []Manifest
	for _, h := range inv.ControlPlane {
		m, err := renderHost(tmpl, inv, h)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", h.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func execute(tmpl *template.Template, name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

func renderHost(tmpl *template.Template, inv *inventory.Inventory, h inventory.Host) (Manifest, error) {
	m := Manifest{Host: h.Name, Flags: map[string][]Flag{}, Versions: map[string]string{}}
	rendered := func(path string, comp string, content []byte) {
		m.Files = append(m.Files, File{Path: path, Mode: ModePublic, Owner: Owner, Components: []string{comp}, Content: content})
	}
	for _, c := range Components() {
		flags, err := Flags(inv, h, c)
		if err != nil {
			return m, err
		}
		m.Flags[c] = flags
		m.Versions[c] = "v" + inv.K8s.String()
		if c == Etcd {
			m.Versions[c] = "v" + inv.Etcd.String()
		}
		d := unitSpec(c)
		d.ExecStart = BinPath(c)
		d.Args = Args(flags)
		b, err := execute(tmpl, "systemd.service.tmpl", d)
		if err != nil {
			return m, err
		}
		rendered(UnitPath(c), c, b)
	}
	schedAPI, auditAPI, err := apiVersions(inv.K8s)
	if err != nil {
		return m, err
	}
	b, err := execute(tmpl, "kube-scheduler.yaml.tmpl", map[string]string{"APIVersion": schedAPI, "Kubeconfig": SchedulerKube})
	if err != nil {
		return m, err
	}
	rendered(SchedulerConfig, Scheduler, b)
	if b, err = execute(tmpl, "audit-policy.yaml.tmpl", map[string]string{"APIVersion": auditAPI}); err != nil {
		return m, err
	}
	rendered(AuditPolicy, APIServer, b)

	m.Files = append(m.Files, copiedFiles(h)...)
	for i := range m.Files {
		f := &m.Files[i]
		f.Components = startOrder(f.Components)
		if bytes.Contains(f.Content, []byte("${")) {
			// A literal ${VAR} left by a template is what breaks tutorials
			// (systemd or the apiserver reads it verbatim).
			return m, fmt.Errorf("%s: rendered content contains \"${\"", f.Path)
		}
	}
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for i := 1; i < len(m.Files); i++ {
		if m.Files[i].Path == m.Files[i-1].Path {
			return m, fmt.Errorf("%s listed twice", m.Files[i].Path)
		}
	}
	m.Dirs = []Dir{
		{ConfigDir, ModeDir, Owner},
		{EtcdDir, ModePriv, Owner},
		{KubeDir, ModePriv, Owner},
		{EtcdDataDir, ModePriv, Owner},
		{AuditLogDir, ModePriv, Owner},
	}
	slices.SortFunc(m.Dirs, func(a, b Dir) int { return strings.Compare(a.Path, b.Path) })
	return m, nil
}

// copiedFiles is the table of files that come from the state directory or
// the release cache rather than a template.
func copiedFiles(h inventory.Host) []File {
	cert := func(n string) *Source { return &Source{Kind: SourceCert, Name: n} }
	key := func(n string) *Source { return &Source{Kind: SourceKey, Name: n} }
	kc := func(n string) *Source { return &Source{Kind: SourceKubeconfig, Name: n} }
	binary := func(n string) *Source { return &Source{Kind: SourceBinary, Name: n} }
	rows := []struct {
		path  string
		src   *Source
		comps []string
	}{
		{CACert, cert("ca"), []string{APIServer, ControllerManager}},
		{CAKey, key("ca"), []string{ControllerManager}},
		{APIServerCert, cert("kube-apiserver"), []string{APIServer}},
		{APIServerKey, key("kube-apiserver"), []string{APIServer}},
		{KubeletClientCert, cert("apiserver-kubelet-client"), []string{APIServer}},
		{KubeletClientKey, key("apiserver-kubelet-client"), []string{APIServer}},
		{EtcdClientCert, cert("apiserver-etcd-client"), []string{APIServer}},
		{EtcdClientKey, key("apiserver-etcd-client"), []string{APIServer}},
		{ServiceAccountKey, key("service-account"), []string{APIServer, ControllerManager}},
		{ServiceAccountPub, &Source{Kind: SourcePublicKey, Name: "service-account"}, []string{APIServer}},
		{FrontProxyCACert, cert("front-proxy-ca"), []string{APIServer, ControllerManager}},
		{FrontProxyClientCert, cert("front-proxy-client"), []string{APIServer}},
		{FrontProxyClientKey, key("front-proxy-client"), []string{APIServer}},
		// The apiserver would reload it by itself; restarting makes a key
		// rotation step certain instead of "within a minute".
		{EncryptionConfig, &Source{Kind: SourceEncryptionConfig}, []string{APIServer}},
		{AdminKubeconfig, kc("admin"), nil},
		{ControllerManagerKube, kc("kube-controller-manager"), []string{ControllerManager}},
		{SchedulerKube, kc("kube-scheduler"), []string{Scheduler}},
		{EtcdCACert, cert("ca"), []string{Etcd}},
		{EtcdServerCert, cert("etcd-server-" + h.Name), []string{Etcd}},
		{EtcdServerKey, key("etcd-server-" + h.Name), []string{Etcd}},
		{EtcdPeerCert, cert("etcd-peer-" + h.Name), []string{Etcd}},
		{EtcdPeerKey, key("etcd-peer-" + h.Name), []string{Etcd}},
		{BinPath("etcd"), binary("etcd"), []string{Etcd}},
		{BinPath("etcdctl"), binary("etcdctl"), nil},
		{BinPath("etcdutl"), binary("etcdutl"), nil},
		{BinPath(APIServer), binary(APIServer), []string{APIServer}},
		{BinPath(ControllerManager), binary(ControllerManager), []string{ControllerManager}},
		{BinPath(Scheduler), binary(Scheduler), []string{Scheduler}},
		{BinPath("kubectl"), binary("kubectl"), nil},
	}
	out := make([]File, 0, len(rows))
	for _, r := range rows {
		mode := ModePublic
		switch r.src.Kind {
		case SourceKey, SourceKubeconfig, SourceEncryptionConfig:
			mode = ModeSecret
		case SourceBinary:
			mode = ModeExec
		}
		out = append(out, File{Path: r.path, Mode: mode, Owner: Owner, Components: r.comps, Source: r.src})
	}
	return out
}

func startOrder(comps []string) []string {
	var out []string
	for _, c := range Components() {
		if slices.Contains(comps, c) {
			out = append(out, c)
		}
	}
	return out
}
