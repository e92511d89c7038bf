package daemon

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// UnitConfig is what `hardway daemon unit` puts in the unit file.
type UnitConfig struct {
	Binary    string   // absolute path of the hardway binary
	Args      []string // after "daemon": -i, --state, --interval, ...
	StateDir  string   // the only writable path
	BackupDir string   // with scheduled backups: writable too
	User      string   // "" runs as root
	Cluster   string   // for Description=
	Watchdog  time.Duration
	StopAfter time.Duration // TimeoutStopSec=; above the daemon's own stop bound
}

// The sandbox is systemd.exec(5)'s list applied as far as a program that
// only reads files, talks TCP and serves one port can go; see
// 'systemd-analyze security hardway-daemon.service'.
const unitTemplate = `# Written by 'hardway daemon unit'. Install it with:
#   hardway daemon unit -i INVENTORY > /etc/systemd/system/hardway-daemon.service
#   systemctl daemon-reload && systemctl enable --now hardway-daemon
[Unit]
Description=hardway: continuous verification of the {{.Cluster}} control plane
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={{.ExecStart}}
ExecReload=/bin/kill -HUP $MAINPID
WatchdogSec={{.WatchdogSec}}
Restart=on-failure
RestartSec=10s
TimeoutStartSec=5min
TimeoutStopSec={{.StopSec}}
{{- if .User}}
User={{.User}}
{{- end}}
UMask=0077

NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateMounts=yes
ReadWritePaths={{.StateDir}}
{{- if .BackupDir}}
ReadWritePaths={{.BackupDir}}
{{- end}}
PrivateDevices=yes
DevicePolicy=closed
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
PrivateIPC=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
CapabilityBoundingSet=
AmbientCapabilities=
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`

// Unit renders the unit file.
func Unit(c UnitConfig) (string, error) {
	if !strings.HasPrefix(c.Binary, "/") || !strings.HasPrefix(c.StateDir, "/") {
		return "", fmt.Errorf("unit: binary %q and state directory %q must be absolute paths", c.Binary, c.StateDir)
	}
	if c.Watchdog <= 0 {
		c.Watchdog = 60 * time.Second
	}
	if c.StopAfter <= 0 {
		c.StopAfter = 60 * time.Second
	}
	backupDir := ""
	if c.BackupDir != "" {
		if !strings.HasPrefix(c.BackupDir, "/") {
			return "", fmt.Errorf("unit: backup directory %q must be an absolute path", c.BackupDir)
		}
		backupDir = quotePath(c.BackupDir)
	}
	words := []string{quoteExec(c.Binary), "daemon"}
	for _, a := range c.Args {
		words = append(words, quoteExec(a))
	}
	t := template.Must(template.New("unit").Option("missingkey=error").Parse(unitTemplate))
	var b bytes.Buffer
	err := t.Execute(&b, map[string]any{
		"Cluster":     c.Cluster,
		"ExecStart":   strings.Join(words, " "),
		"WatchdogSec": seconds(c.Watchdog),
		"StopSec":     seconds(c.StopAfter),
		"User":        c.User,
		"StateDir":    quotePath(c.StateDir),
		"BackupDir":   backupDir,
	})
	return b.String(), err
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int((d+time.Second-1)/time.Second))
}

// quoteExec quotes one word for ExecStart= and path lists: systemd splits
// on spaces and expands % specifiers and $ variables.
func quoteExec(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// quotePath quotes a path for ReadWritePaths=, which expands % specifiers
// but not $ variables.
func quotePath(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}
