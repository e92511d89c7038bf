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

// apiVersions picks each config file's apiVersion by Kubernetes version.
// Only GA versions: v1beta*/v1alpha* ones are removed within a few releases
// and a removed one stops the component from starting.
func apiVersions(k8s *version.Version) (scheduler, audit string, err error) {
	if !version.MustConstraints(version.NewConstraint(">= 1.25.0")).Check(k8s.Core()) {
		return "", "", fmt.Errorf("kubernetes %s: kubescheduler.config.k8s.io/v1 needs 1.25 or later", k8s)
	}
	return "kubescheduler.config.k8s.io/v1", "audit.k8s.io/v1", nil
}

// renderer holds what every host's rendering shares.
type renderer struct {
	tmpl *template.Template
	inv  *inventory.Inventory
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
	r := &renderer{tmpl: tmpl, inv: inv}
	var out []Manifest
	for _, h := range inv.ControlPlane {
		m, err := r.host(h, ControlPlane)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", h.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func (r *renderer) execute(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

func renderSchedulerConfig(r *renderer, _ inventory.Host) ([]byte, error) {
	schedAPI, _, err := apiVersions(r.inv.K8s)
	if err != nil {
		return nil, err
	}
	return r.execute("kube-scheduler.yaml.tmpl", map[string]string{"APIVersion": schedAPI, "Kubeconfig": SchedulerKube})
}

func renderAuditPolicy(r *renderer, _ inventory.Host) ([]byte, error) {
	_, auditAPI, err := apiVersions(r.inv.K8s)
	if err != nil {
		return nil, err
	}
	return r.execute("audit-policy.yaml.tmpl", map[string]string{"APIVersion": auditAPI})
}

// host renders the manifest of host h, which runs the components of role.
func (r *renderer) host(h inventory.Host, role Role) (Manifest, error) {
	m := Manifest{Host: h.Name, Flags: map[string][]Flag{}, Versions: map[string]string{}}
	files := map[string]*File{}
	add := func(f File) error {
		old, ok := files[f.Path]
		if !ok {
			files[f.Path] = &f
			return nil
		}
		// A file two components read (the CA) is one file that restarts both.
		if old.Source == nil || f.Source == nil || *old.Source != *f.Source || old.Mode != f.Mode {
			return fmt.Errorf("%s listed twice", f.Path)
		}
		old.Components = append(old.Components, f.Components...)
		return nil
	}
	dirs := map[string]Dir{}
	for _, c := range Components() {
		if c.Role != role {
			continue
		}
		m.Components = append(m.Components, c.Name)
		flags, err := c.hostFlags(r.inv, h)
		if err != nil {
			return m, err
		}
		m.Flags[c.Name] = flags
		m.Versions[c.Name] = "v" + c.version(r.inv).String()
		d := c.unit
		d.ExecStart = c.Exec()
		d.Args = Args(flags)
		b, err := r.execute("systemd.service.tmpl", d)
		if err != nil {
			return m, err
		}
		if err := add(File{Path: UnitPath(c.Name), Mode: ModePublic, Owner: Owner, Components: []string{c.Name}, Content: b}); err != nil {
			return m, err
		}
		for _, cf := range c.Configs {
			b, err := cf.render(r, h)
			if err != nil {
				return m, err
			}
			if err := add(File{Path: cf.Path, Mode: ModePublic, Owner: Owner, Components: []string{c.Name}, Content: b}); err != nil {
				return m, err
			}
		}
		for _, f := range c.copied(h) {
			if err := add(f); err != nil {
				return m, err
			}
		}
		for _, d := range c.Dirs {
			if old, ok := dirs[d.Path]; ok && old != d {
				return m, fmt.Errorf("directory %s wanted as %04o and %04o", d.Path, old.Mode, d.Mode)
			}
			dirs[d.Path] = d
		}
	}
	for _, f := range files {
		f.Components = startOrder(f.Components)
		if bytes.Contains(f.Content, []byte("${")) {
			// A literal ${VAR} left by a template is what breaks tutorials
			// (systemd or the apiserver reads it verbatim).
			return m, fmt.Errorf("%s: rendered content contains \"${\"", f.Path)
		}
		m.Files = append(m.Files, *f)
	}
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, d := range dirs {
		m.Dirs = append(m.Dirs, d)
	}
	slices.SortFunc(m.Dirs, func(a, b Dir) int { return strings.Compare(a.Path, b.Path) })
	return m, nil
}

// copied are the component's files that come from the state directory or
// the release cache rather than a template.
func (c Component) copied(h inventory.Host) []File {
	var out []File
	restart := func(no bool) []string {
		if no {
			return nil
		}
		return []string{c.Name}
	}
	for _, b := range c.Binaries {
		out = append(out, File{Path: b.Path, Mode: ModeExec, Owner: Owner, Components: restart(b.Tool),
			Source: &Source{Kind: SourceBinary, Name: b.Name}})
	}
	for _, f := range c.Files {
		name := f.Name
		if f.PerHost {
			name += "-" + h.Name
		}
		mode := ModePublic
		switch f.Kind {
		case SourceKey, SourceKubeconfig, SourceEncryptionConfig:
			mode = ModeSecret
		}
		out = append(out, File{Path: f.Path, Mode: mode, Owner: Owner, Components: restart(f.NoRestart),
			Source: &Source{Kind: f.Kind, Name: name}})
	}
	return out
}

func startOrder(comps []string) []string {
	var out []string
	for _, c := range Components() {
		if slices.Contains(comps, c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}
