package inventory

import "slices"

// HostPrep says how far `up` may change a host's own setup, beyond the files
// and services it installs. What is left "check" is named by preflight and
// verify with the command that fixes it; nothing of the host's package set
// or firewall changes without the inventory saying so.
type HostPrep struct {
	// Packages: check (the default) names the packages the components need
	// and the host lacks; install installs them with the host's package
	// manager (apt-get or dnf).
	Packages string `yaml:"packages"`
	// Firewall: check (the default) names the ports the host's components
	// need that an active ufw or firewalld closes; open opens them (and lets
	// pod traffic through on workers).
	Firewall string `yaml:"firewall"`
	// Swap: fail (the default) keeps the kubelet's failSwapOn, so preflight
	// refuses a worker with swap on; limited lets the kubelet run with swap
	// and gives pods of the Burstable class a share of it (LimitedSwap,
	// cgroup v2 only).
	Swap string `yaml:"swap"`
}

// The values of hostPrep's keys.
const (
	HostPrepCheck   = "check"
	HostPrepInstall = "install"
	HostPrepOpen    = "open"
	SwapFail        = "fail"
	SwapLimited     = "limited"
)

func (p *HostPrep) applyDefaults() {
	if p.Packages == "" {
		p.Packages = HostPrepCheck
	}
	if p.Firewall == "" {
		p.Firewall = HostPrepCheck
	}
	if p.Swap == "" {
		p.Swap = SwapFail
	}
}

func (l *loader) validateHostPrep(inv *Inventory) {
	p := inv.HostPrep
	for _, k := range []struct {
		path, val, hint string
		ok              []string
	}{
		{"hostPrep.packages", p.Packages, "check (the default: name what is missing) or install (with the host's package manager)", []string{HostPrepCheck, HostPrepInstall}},
		{"hostPrep.firewall", p.Firewall, "check (the default: name the closed ports) or open (ufw or firewalld)", []string{HostPrepCheck, HostPrepOpen}},
		{"hostPrep.swap", p.Swap, "fail (the default: no kubelet with swap on) or limited (the kubelet's LimitedSwap)", []string{SwapFail, SwapLimited}},
	} {
		if !slices.Contains(k.ok, k.val) {
			l.errorf(k.path, k.hint, "%q is not one of %v", k.val, k.ok)
		}
	}
}
