package hostprobe

import (
	"fmt"
	"strings"
)

// archs maps uname -m to the architecture names of Go and of the release
// downloads: the two hardway has binaries for.
var archs = map[string]string{
	"x86_64":  "amd64",
	"aarch64": "arm64",
}

// GoArch is the download architecture of a uname -m, or "" for one hardway
// has no binaries for (armv7l, i686, riscv64...).
func GoArch(machine string) string { return archs[machine] }

// MinSystemdLoadCredential is the first systemd with LoadCredential=,
// which hardway's etcd.service hands etcd its keys with: a control-plane
// host needs it.
const MinSystemdLoadCredential = 247

// Summary is the host in one line: "Debian GNU/Linux 12 (bookworm), x86_64,
// 4 CPUs, 7.8 GiB, systemd 252".
func (f Facts) Summary() string {
	parts := []string{f.OS.Name(), f.Machine}
	if f.CPUs > 0 {
		cpus := fmt.Sprintf("%d CPUs", f.CPUs)
		if f.CPUs == 1 {
			cpus = "1 CPU"
		}
		parts = append(parts, cpus)
	}
	if f.MemoryKiB > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB", float64(f.MemoryKiB)/(1<<20)))
	}
	if f.Systemd > 0 {
		parts = append(parts, fmt.Sprintf("systemd %d", f.Systemd))
	}
	if f.Container != "" {
		parts = append(parts, "container "+f.Container)
	}
	return strings.Join(parts, ", ")
}
