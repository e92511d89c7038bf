// Package units renders what each host runs: the systemd units of etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler on control-plane
// hosts, of containerd, kubelet and kube-proxy on workers, the pod routes on
// every host, their config files, and the manifest of every file a host
// needs.
//
// Every fact about a component is a row of one table (components.go). Flags
// and config settings are data, gated by version constraints and asserted
// by table tests; the templates in templates/ only lay files out. The same
// inputs always render byte-identical files.
package units

import (
	"bytes"
	"fmt"
	"net/netip"
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
	// Environment is the process's environment, each variable with why
	// (--explain lists them as settings of the unit file).
	Environment  []envVar
	Requires     []string // stop with these (the kubelet without containerd is no use)
	ExecStartPre []string // whole command lines, run before ExecStart
	// Delegate and KillMode=process: containerd's shims and containers live
	// in its cgroup and must survive a containerd restart.
	Delegate  bool
	KillMode  string
	Unlimited []string // LimitNPROC, LimitCORE, TasksMax: =infinity
	// User and Group the daemon runs as; "": root. StateDirectory is its
	// directory under /var/lib, which systemd makes and, when its owner is
	// not User (a host etcd ran on as root), chowns recursively at start,
	// with the daemon stopped.
	User, Group        string
	StateDirectory     string
	StateDirectoryMode string
	// Credentials are files systemd reads as root at start and hands the
	// daemon as copies in its credentials directory: keys stay root:root
	// 0600 though the daemon is not root.
	Credentials []credential
}

// credential is one LoadCredential= line: ID names the copy in the
// credentials directory, Path is the root-owned file.
type credential struct {
	ID, Path string
}

// envVar is one Environment= line of a unit, with why it is there.
type envVar struct {
	Name, Value, Reason string
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
	pods map[string]netip.Prefix
}

// Render returns the manifest of every host: the control-plane hosts, then
// the workers, in inventory order. pods is each worker's pod subnet
// (pkg/podnet: loaded from and saved to the state directory by the caller,
// so that Render stays a pure function of its inputs); with network.cni
// none it may be empty.
func Render(inv *inventory.Inventory, pods map[string]netip.Prefix) ([]Manifest, error) {
	tmpl, err := template.New("").Option("missingkey=error").ParseFS(templates.FS, "*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse templates: %w", err)
	}
	if inv.K8s == nil || inv.Etcd == nil {
		return nil, fmt.Errorf("render: inventory has no parsed Kubernetes or etcd version")
	}
	if err := checkSubnets(inv, pods); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	r := &renderer{tmpl: tmpl, inv: inv, pods: pods}
	var out []Manifest
	for _, g := range []struct {
		role  Role
		hosts []inventory.Host
	}{{ControlPlane, inv.ControlPlane}, {Worker, inv.Workers}} {
		for _, h := range g.hosts {
			m, err := r.host(h, g.role)
			if err != nil {
				return nil, fmt.Errorf("render %s: %w", h.Name, err)
			}
			out = append(out, m)
		}
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

func renderSchedulerConfig(r *renderer, _ inventory.Host) ([]byte, []Setting, error) {
	schedAPI, _, err := apiVersions(r.inv.K8s)
	if err != nil {
		return nil, nil, err
	}
	b, err := r.execute("kube-scheduler.yaml.tmpl", map[string]string{"APIVersion": schedAPI, "Kubeconfig": SchedulerKube})
	return b, nil, err
}

func renderAuditPolicy(r *renderer, _ inventory.Host) ([]byte, []Setting, error) {
	_, auditAPI, err := apiVersions(r.inv.K8s)
	if err != nil {
		return nil, nil, err
	}
	b, err := r.execute("audit-policy.yaml.tmpl", map[string]string{"APIVersion": auditAPI})
	return b, nil, err
}

// renderEtcdSysusers declares the system user etcd runs as, for
// systemd-sysusers: the file's apply runs it when the file is written, and
// systemd-sysusers.service reads it at boot.
func renderEtcdSysusers(*renderer, inventory.Host) ([]byte, []Setting, error) {
	const home = EtcdDataDir
	b := "# Rendered by hardway: the system user etcd runs as (User=" + EtcdUser + " in etcd.service).\n" +
		"# hardway runs 'systemd-sysusers " + EtcdSysusersConf + "' when it writes this file.\n" +
		"u " + EtcdUser + " - \"" + EtcdUserGECOS + "\" " + home + "\n"
	return []byte(b), []Setting{{File: EtcdSysusersConf, Key: "u " + EtcdUser, Value: home,
		Reason: "a system user and group etcd, home " + home + ", no login shell: what etcd runs as"}}, nil
}

// renderAdmissionConfig is the apiserver's --admission-control-config-file:
// the PodSecurity plugin's defaults from the inventory's podSecurity.
func renderAdmissionConfig(r *renderer, _ inventory.Host) ([]byte, []Setting, error) {
	p := r.inv.PodSecurity
	exempt := p.ExemptNamespaces
	if exempt == nil {
		exempt = []string{}
	}
	settings := []Setting{
		{File: AdmissionConfig, Key: "PodSecurity.defaults.enforce", Value: p.Enforce, Reason: "the level a namespace without its own pod-security.kubernetes.io/enforce label enforces (inventory podSecurity.enforce)"},
		{File: AdmissionConfig, Key: "PodSecurity.defaults.warn", Value: p.Enforce, Reason: "kubectl warns of what enforce refuses, e.g. a Deployment whose pods would be refused"},
		{File: AdmissionConfig, Key: "PodSecurity.defaults.audit", Value: inventory.PodSecurityRestricted, Reason: "the audit log marks every pod that restricted would refuse, for tightening later"},
		{File: AdmissionConfig, Key: "PodSecurity.exemptions.namespaces", Value: exempt, Reason: "namespaces no level applies to (inventory podSecurity.exemptNamespaces)"},
	}
	b, err := r.execute("admission-config.yaml.tmpl", map[string]any{"Enforce": p.Enforce, "Audit": inventory.PodSecurityRestricted, "Exempt": exempt})
	return b, settings, err
}

// host renders the manifest of host h, which runs the components of role.
func (r *renderer) host(h inventory.Host, role Role) (Manifest, error) {
	m := Manifest{Host: h.Name, Role: role, Arch: r.inv.HostArch(h), Flags: map[string][]Flag{}, Settings: map[string][]Setting{}, Versions: map[string]string{}}
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
		if !c.RunsOn(role) || c.enabled != nil && !c.enabled(r, h) {
			continue
		}
		m.Components = append(m.Components, c.Name)
		if c.version != nil {
			m.Versions[c.Name] = "v" + c.version(r.inv).String()
		}
		var b []byte
		if c.unitFile != nil {
			var settings []Setting
			var err error
			if b, settings, err = c.unitFile(r, h); err != nil {
				return m, err
			}
			m.Settings[c.Name] = append(m.Settings[c.Name], settings...)
		} else {
			flags, err := c.hostFlags(r.inv, h)
			if err != nil {
				return m, err
			}
			m.Flags[c.Name] = flags
			d := c.unit
			d.ExecStart = c.Exec()
			d.Args = Args(flags)
			if b, err = r.execute("systemd.service.tmpl", d); err != nil {
				return m, err
			}
			for _, e := range d.Environment {
				m.Settings[c.Name] = append(m.Settings[c.Name], Setting{File: UnitPath(c.Name), Key: "Environment." + e.Name, Value: e.Value, Reason: e.Reason})
			}
			if d.User != "" {
				m.Settings[c.Name] = append(m.Settings[c.Name],
					Setting{File: UnitPath(c.Name), Key: "User", Value: d.User, Reason: "not root: a flaw in the daemon is not root's (a system user, made by systemd-sysusers)"},
					Setting{File: UnitPath(c.Name), Key: "StateDirectory", Value: d.StateDirectory, Reason: "systemd makes /var/lib/" + d.StateDirectory + " (" + d.StateDirectoryMode + ") owned by the user, and chowns a root-owned one (a restore's, a host etcd ran on as root) with the daemon stopped"})
			}
			for _, cr := range d.Credentials {
				m.Settings[c.Name] = append(m.Settings[c.Name], Setting{File: UnitPath(c.Name), Key: "LoadCredential." + cr.ID, Value: cr.Path,
					Reason: "systemd reads the root-owned file at start and gives the daemon a copy in its credentials directory (" + CredentialDir(c.Unit) + "/" + cr.ID + ")"})
			}
		}
		if err := add(File{Path: UnitPath(c.Name), Mode: ModeUnit, Owner: Owner, Components: []string{c.Name}, Content: b}); err != nil {
			return m, err
		}
		configs := c.Configs
		if c.moreConfigs != nil {
			configs = append(slices.Clip(configs), c.moreConfigs(r.inv)...)
		}
		for _, cf := range configs {
			b, settings, err := cf.render(r, h)
			if err != nil {
				return m, err
			}
			if b == nil {
				continue
			}
			m.Settings[c.Name] = append(m.Settings[c.Name], settings...)
			var comps []string
			if !cf.NoRestart {
				comps = []string{c.Name}
			}
			if err := add(File{Path: cf.Path, Mode: ModeConfig, Owner: Owner, Components: comps, Content: b, Apply: cf.apply}); err != nil {
				return m, err
			}
		}
		for _, f := range r.copied(c, h) {
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
func (r *renderer) copied(c Component, h inventory.Host) []File {
	var out []File
	restart := func(no bool) []string {
		if no {
			return nil
		}
		return []string{c.Name}
	}
	for _, b := range c.Binaries {
		if b.bridgeOnly && r.inv.Network.CNI == inventory.CNINone {
			continue
		}
		out = append(out, File{Path: b.Path, Mode: ModeExec, Owner: Owner, Components: restart(b.NoRestart),
			Source: &Source{Kind: SourceBinary, Name: b.Name}})
	}
	for _, f := range c.Files {
		if f.onlyIf != nil && !f.onlyIf(r.inv) {
			continue
		}
		name := strings.ReplaceAll(f.Name, "{host}", h.Name)
		mode := ModePublic
		switch f.Kind {
		case SourceKey, SourceKubeconfig, SourceEncryptionConfig:
			mode = ModeSecret
		}
		out = append(out, File{Path: f.Path, Mode: mode, Owner: Owner, Components: restart(f.NoRestart),
			Source: &Source{Kind: f.Kind, Name: name, Optional: f.Optional}})
	}
	if c.Name == Containerd {
		// Image tarballs for hosts that cannot pull; a later step imports
		// them (nothing restarts). The release set knows them as image:<name>,
		// one per architecture: a worker gets those listed for its own.
		for _, im := range r.inv.ImagesFor(r.inv.HostArch(h)) {
			out = append(out, File{Path: ImagePath(im.Name), Mode: ModePublic, Owner: Owner,
				Source: &Source{Kind: SourceBinary, Name: "image:" + im.Name}})
		}
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
