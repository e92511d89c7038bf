package cluster

import (
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/inventory"
)

// A worker's facts as the host step reads them: a bare Debian 13 with
// nothing of Kubernetes' setup, ufw on with SSH only, systemd-resolved's
// stub. Each is named with its command, and a host that has it all plans
// nothing.
func TestHostPrepChanges(t *testing.T) {
	bare := `@os
PRETTY_NAME="Debian GNU/Linux 13 (trixie)"
ID=debian
VERSION_ID="13"
@facts
timesync 1
module overlay yes
module br_netfilter no
sysctl net.ipv4.ip_forward 0
sysctl net.bridge.bridge-nf-call-iptables missing
sysctl net.bridge.bridge-nf-call-ip6tables missing
tool ip yes
tool modprobe yes
tool iptables yes
tool iptables-restore yes
tool iptables-save yes
tool nft yes
tool conntrack no
resolv stub-upstream
link
ufw Status: active
ufw Default: deny (incoming), allow (outgoing), deny (routed)
ufw 22/tcp                     ALLOW IN    Anywhere
`
	ready := `@os
ID=debian
VERSION_ID="13"
@facts
module overlay yes
module br_netfilter yes
sysctl net.ipv4.ip_forward 1
sysctl net.bridge.bridge-nf-call-iptables 1
sysctl net.bridge.bridge-nf-call-ip6tables 1
tool ip yes
tool modprobe yes
tool iptables yes
tool iptables-restore yes
tool iptables-save yes
tool nft yes
tool conntrack yes
resolv ok
link /etc/resolv.conf
ufw Status: active
ufw Default: deny (incoming), allow (outgoing), deny (routed)
ufw 10250/tcp                  ALLOW IN    Anywhere
ufw 10256/tcp                  ALLOW IN    Anywhere
ufw 10.200.0.0/16              ALLOW FWD   Anywhere
ufw Anywhere                   ALLOW FWD   10.200.0.0/16
`
	inv := withWorkers(t, 1)
	c := New(inv, Options{})
	w := inv.Workers[0]
	descs := func(chs []hostPrepChange) string {
		var s []string
		for _, ch := range chs {
			s = append(s, ch.Desc+" $ "+ch.Cmd+ch.Fix)
		}
		return strings.Join(s, "\n")
	}

	// check (the default): the packages are preflight's (a warning for
	// conntrack), the firewall a problem naming its commands.
	changes, problems, warnings := c.hostPrepChanges(w, parseHostPrepFacts(bare))
	got := descs(changes)
	for _, want := range []string{
		"load kernel module br_netfilter (and at boot: /etc/modules-load.d/hardway-kubernetes.conf) $ modprobe br_netfilter",
		"set net.ipv4.ip_forward = 1, now 0 (and at boot: /etc/sysctl.d/99-hardway-kubernetes.conf) $ sysctl -qw net.ipv4.ip_forward=1",
		"set net.bridge.bridge-nf-call-iptables = 1, now missing",
		"link /var/lib/kubelet/resolv.conf to /run/systemd/resolve/resolv.conf (the kubelet's resolvConf) $ install -d -m 0700 /var/lib/kubelet && ln -sfn /run/systemd/resolve/resolv.conf /var/lib/kubelet/resolv.conf",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("changes lack %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "modprobe br_netfilter") > strings.Index(got, "bridge-nf-call-iptables") {
		t.Errorf("the bridge sysctls are set before br_netfilter is loaded:\n%s", got)
	}
	if strings.Contains(got, "install conntrack") {
		t.Errorf("packages installed without hostPrep.packages: install:\n%s", got)
	}
	if p := descs(problems); len(problems) != 1 || !strings.Contains(p, "ufw closes 10250/tcp (kubelet secure), 10256/tcp (kube-proxy healthz), forwarded pod traffic 10.200.0.0/16") ||
		!strings.Contains(p, "ufw allow 10250/tcp comment 'hardway: kubelet secure'; ufw allow 10256/tcp") || !strings.Contains(p, "or set hostPrep.firewall: open") {
		t.Errorf("firewall problem: %s", p)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings for Debian 13: %v", warnings)
	}

	// install and open: the step does it all.
	inv.HostPrep.Packages, inv.HostPrep.Firewall = inventory.HostPrepInstall, inventory.HostPrepOpen
	changes, problems, _ = c.hostPrepChanges(w, parseHostPrepFacts(bare))
	got = descs(changes)
	if len(problems) != 0 || !strings.Contains(got, "install conntrack (apt) $ DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends conntrack") ||
		!strings.Contains(got, "open in ufw: 10250/tcp (kubelet secure), 10256/tcp (kube-proxy healthz), forwarded pod traffic 10.200.0.0/16 $ ufw allow 10250/tcp comment 'hardway: kubelet secure' && ufw allow 10256/tcp comment 'hardway: kube-proxy healthz' && ufw route allow from 10.200.0.0/16") {
		t.Errorf("install and open: %v\n%s", problems, got)
	}

	// A prepared host: nothing.
	if changes, problems, warnings := c.hostPrepChanges(w, parseHostPrepFacts(ready)); len(changes)+len(problems)+len(warnings) != 0 {
		t.Errorf("a prepared host: %s %s %v", descs(changes), descs(problems), warnings)
	}

	// A container host cannot load modules: named for its machine.
	w.ContainerHost = true
	_, problems, _ = c.hostPrepChanges(w, parseHostPrepFacts(bare))
	if p := descs(problems); !strings.Contains(p, "kernel module br_netfilter is not loaded") || !strings.Contains(p, "modprobe br_netfilter on the machine") {
		t.Errorf("container host: %s", p)
	}

	// A control-plane host: its ports, no kernel setup, no pod traffic;
	// an unknown distribution is a warning.
	cp := `@os
ID=arch
@facts
timesync 0
ufw Status: active
ufw Default: deny (incoming), allow (outgoing), deny (routed)
ufw 6443/tcp                   ALLOW IN    Anywhere
`
	_, _, warnings = c.hostPrepChanges(inv.ControlPlane[0], parseHostPrepFacts(strings.Replace(cp, "timesync 0\n", "timesync 0\ncontainer systemd-nspawn\n", 1)))
	if len(warnings) != 1 {
		t.Errorf("a container's clock is its machine's, no time sync warning: %v", warnings)
	}
	changes, _, warnings = c.hostPrepChanges(inv.ControlPlane[0], parseHostPrepFacts(strings.Replace(cp, "timesync 0\n", "timesync 0\ncontainer none\n", 1)))
	if got := descs(changes); len(changes) != 1 || !strings.Contains(got, "open in ufw: 2379/tcp (etcd client), 2380/tcp (etcd peer) $") || strings.Contains(got, "route") {
		t.Errorf("control plane: %s", got)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "not a distribution hardway knows") || !strings.Contains(warnings[1], "no time sync service is active") {
		t.Errorf("unknown distribution, no time sync: %v", warnings)
	}
}
