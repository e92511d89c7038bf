package hostos

import "strings"

// Package is a tool a component calls, and the package that has it in each
// family.
type Package struct {
	Tool string // the command looked for with command -v
	Apt  string
	Dnf  string
}

// Name is the package's name in family f ("" when unknown).
func (p Package) Name(f Family) string {
	switch f {
	case Apt:
		return p.Apt
	case Dnf:
		return p.Dnf
	}
	return ""
}

// The tools of a worker, one row per tool: pkg/cluster says which a worker
// needs (by kube-proxy's mode and the CNI).
var (
	PkgIP              = Package{Tool: "ip", Apt: "iproute2", Dnf: "iproute"}
	PkgIptables        = Package{Tool: "iptables", Apt: "iptables", Dnf: "iptables-nft"}
	PkgIptablesSave    = Package{Tool: "iptables-save", Apt: "iptables", Dnf: "iptables-nft"}
	PkgIptablesRestore = Package{Tool: "iptables-restore", Apt: "iptables", Dnf: "iptables-nft"}
	PkgNft             = Package{Tool: "nft", Apt: "nftables", Dnf: "nftables"}
	PkgConntrack       = Package{Tool: "conntrack", Apt: "conntrack", Dnf: "conntrack-tools"}
	PkgModprobe        = Package{Tool: "modprobe", Apt: "kmod", Dnf: "kmod"}
	PkgMount           = Package{Tool: "mount", Apt: "mount", Dnf: "util-linux"}
	PkgNsenter         = Package{Tool: "nsenter", Apt: "util-linux", Dnf: "util-linux"}
	PkgSystemdSysusers = Package{Tool: "systemd-sysusers", Apt: "systemd", Dnf: "systemd"}
)

// InstallCommand is the shell command that installs pkgs with family f's
// package manager, non-interactively; apt's package lists are refreshed
// when the first try does not find a package (a fresh host has none).
func InstallCommand(f Family, pkgs []string) string {
	list := strings.Join(pkgs, " ")
	switch f {
	case Apt:
		inst := "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + list
		return inst + " || { apt-get update && " + inst + "; }"
	case Dnf:
		return "dnf install -y " + list
	}
	return ""
}

// InstallHint is InstallCommand for a person to type (no fallback).
func InstallHint(f Family, pkgs []string) string {
	switch f {
	case Apt:
		return "apt-get install " + strings.Join(pkgs, " ")
	case Dnf:
		return "dnf install " + strings.Join(pkgs, " ")
	}
	return "install " + strings.Join(pkgs, " ") + " with the host's package manager"
}
