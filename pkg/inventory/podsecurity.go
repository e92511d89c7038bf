package inventory

import (
	"slices"
	"strconv"
)

// PodSecurity is the cluster-wide default of the Pod Security admission
// (the apiserver's PodSecurity plugin): the level every namespace enforces
// unless it carries its own pod-security.kubernetes.io/enforce label.
type PodSecurity struct {
	// Enforce is privileged, baseline (the default: no privileged pods, no
	// host namespaces, ports or paths) or restricted.
	Enforce string `yaml:"enforce"`
	// ExemptNamespaces are namespaces no level applies to. Default:
	// kube-system, where network add-ons (Cilium, Calico's manifest) run
	// privileged DaemonSets. [] exempts none.
	ExemptNamespaces []string `yaml:"exemptNamespaces"`
}

// Pod Security levels, as the admission plugin names them.
const (
	PodSecurityPrivileged = "privileged"
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
	DefaultPodSecurity    = PodSecurityBaseline
)

// PodSecurityLevels are the levels in order, loosest first.
var PodSecurityLevels = []string{PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted}

// DefaultExemptNamespaces is podSecurity.exemptNamespaces when left out.
var DefaultExemptNamespaces = []string{"kube-system"}

func (p *PodSecurity) applyDefaults() {
	if p.Enforce == "" {
		p.Enforce = DefaultPodSecurity
	}
	// nil: left out; an explicit [] stays empty.
	if p.ExemptNamespaces == nil {
		p.ExemptNamespaces = slices.Clone(DefaultExemptNamespaces)
	}
}

func (l *loader) validatePodSecurity(inv *Inventory) {
	p := inv.PodSecurity
	if !slices.Contains(PodSecurityLevels, p.Enforce) {
		l.errorf("podSecurity.enforce", "one of privileged, baseline (the default), restricted", "%q is not a Pod Security level", p.Enforce)
	}
	for i, ns := range p.ExemptNamespaces {
		if !isDNS1123Label(ns) {
			l.errorf("podSecurity.exemptNamespaces["+strconv.Itoa(i)+"]", "a namespace name, e.g. kube-system", "%q is not a namespace name", ns)
		}
	}
}
