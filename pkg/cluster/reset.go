package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// 'hardway reset' takes off the hosts what 'up' put there: it stops and
// disables hardway's services, deletes the routes, the egress rule and the
// bridge of the pod network, unmounts what the kubelet and containerd left
// mounted, removes the data, every file of the host's footprint
// (units.HostFootprint: the manifest and the component table), the
// directories that are empty then, and the etcd user hardway made. It never
// touches the state directory: a later 'up' puts the same cluster identity
// back onto the hosts (with etcd's data gone).
//
// Each step plans from what it reads on the hosts (a dry run is the plan
// printed) and takes one action per host; the hosts go side by side.

// The steps of 'hardway reset', in order.
const (
	StepResetServices = "services"
	StepResetNetwork  = "network"
	StepResetData     = "data"
	StepResetFiles    = "files"
	StepResetDirs     = "dirs"
	StepResetUser     = "user"
)

// kubePodsSlice is the kubelet's cgroup of the pods (its cgroupRoot under
// cgroupDriver: systemd): stopping it ends every pod process left.
const kubePodsSlice = "kubepods.slice"

// ResetSteps are the steps that reset hosts (from ResetHosts).
func (c *Cluster) ResetSteps(hosts []inventory.Host) []plan.Step {
	return []plan.Step{
		{Name: StepResetServices, Doc: "stop and disable hardway's services in reverse start order; on workers every pod is removed while containerd still runs (the CNI frees their addresses and host ports), then what is left of the pods and the shims is stopped",
			Plan: c.resetPlan(hosts, c.resetServices)},
		{Name: StepResetNetwork, Doc: "the pod routes (proto " + units.PodRouteProto + "), the pods' egress masquerade rule, the bridge " + units.CNIBridge + ", kube-proxy's iptables and nftables rules (kube-proxy --cleanup)",
			Plan: c.resetPlan(hosts, c.resetNetwork)},
		{Name: StepResetData, Doc: "unmount what is mounted below the data directories (pods' volumes, shm), then remove them with everything in them: etcd's data, the kubelet's, containerd's, kube-proxy's, hardway's own",
			Plan: c.resetPlan(hosts, c.resetData)},
		{Name: StepResetFiles, Doc: "every file hardway pushes there (units, binaries, certificates, keys, kubeconfigs, configs), then systemctl daemon-reload",
			Plan: c.resetPlan(hosts, c.resetFiles)},
		{Name: StepResetDirs, Doc: "hardway's directories, where nothing else is left in them",
			Plan: c.resetPlan(hosts, c.resetDirs)},
		{Name: StepResetUser, Doc: "the system user etcd, only when hardway's sysusers file made it",
			Plan: c.resetPlan(hosts, c.resetUser)},
	}
}

// ResetStepDocs are the reset steps' names and docs, for --help.
func ResetStepDocs() []plan.Step {
	steps := New(&inventory.Inventory{}, Options{}).ResetSteps(nil)
	for i := range steps {
		steps[i].Plan = nil
	}
	return steps
}

// ResetHosts are the inventory's hosts named (every host when none is), in
// inventory order.
func (c *Cluster) ResetHosts(names []string) ([]inventory.Host, error) {
	all := c.Inv.Hosts()
	if len(names) == 0 {
		return all, nil
	}
	var known []string
	for _, h := range all {
		known = append(known, h.Name)
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, usererr.WithCode(fmt.Errorf("--host %s: no such host in %s", n, c.Inv.Path), usererr.CodeUsage,
				"the hosts are: "+strings.Join(known, ", "))
		}
	}
	var out []inventory.Host
	for _, h := range all {
		if slices.Contains(names, h.Name) {
			out = append(out, h)
		}
	}
	return out, nil
}

// ResetWarnings say what resetting hosts does to the rest of the cluster.
// needYes: the reset takes part of a control plane of several hosts, and
// must be asked for with --yes (typing the cluster name is not enough).
func (c *Cluster) ResetWarnings(hosts []inventory.Host) (warnings []string, needYes bool) {
	var cps, ws []string
	for _, h := range hosts {
		if c.isWorker(h.Name) {
			ws = append(ws, h.Name)
		} else {
			cps = append(cps, h.Name)
		}
	}
	n := len(c.Inv.ControlPlane)
	switch {
	case len(cps) == n:
		warnings = append(warnings, "etcd's data, every object of the cluster, is deleted with the control plane: only a backup brings it back ('hardway restore --from FILE' rebuilds the cluster from one onto the reset hosts)")
		if len(ws) < len(c.Inv.Workers) {
			warnings = append(warnings, fmt.Sprintf("the %d worker(s) not reset keep running, their kubelets without an apiserver, until 'hardway up' builds the control plane again (empty: they register their Nodes anew)", len(c.Inv.Workers)-len(ws)))
		}
	case len(cps) > 0:
		needYes = true
		w := fmt.Sprintf("etcd membership is not changed: %s stay(s) in etcd's member list ('hardway etcd status' shows them unreachable), "+
			"and the next 'hardway up' stops at them: 'hardway up --remove-stale-members' replaces each with a fresh member that joins from the others", strings.Join(cps, ", "))
		if left := n - len(cps); left <= n/2 {
			w += fmt.Sprintf(". etcd LOSES QUORUM: %d of %d members are left, fewer than %d; the API stops until the members come back, and the data is then in the other members only", left, n, n/2+1)
		}
		warnings = append(warnings, w)
	}
	if len(ws) > 0 && len(cps) < n {
		warnings = append(warnings, fmt.Sprintf("the Nodes of %s stay in the API, NotReady, until 'hardway up' brings the workers back (or 'kubectl delete node NAME')", strings.Join(ws, ", ")))
	}
	if rec, err := LoadUpgrade(c.opt.State); err == nil && rec != nil {
		warnings = append(warnings, "an upgrade is half-way ("+rec.Summary()+"): its record stays in the state directory, and 'hardway up' refuses until 'hardway upgrade apply' finishes it")
	}
	warnings = append(warnings, "a 'hardway daemon --repair' of this inventory would put back what reset removes: stop it first (systemctl stop hardway-daemon where it runs)")
	return warnings, needYes
}

// resetFacts is what a reset step reads on one host, in one command.
type resetFacts struct {
	fp      units.Footprint
	units   map[string]remote.UnitState // by unit: "etcd.service"
	present map[string]bool             // the footprint's paths that exist
	entries map[string][]string         // a footprint directory's or State directory's entries (full paths)
	links   []string                    // enablement links of hardway's units (*.wants/, *.requires/)
	mounts  []string                    // every mount point, unescaped
	routes  []string                    // hardway's pod routes (proto 70), as ip prints them
	bridge  bool                        // cni0 exists
	egress  [][]string                  // the egress rules: the command (iptables, ip6tables), then the rule as -S prints it
	kubeIPT int                         // iptables lines naming KUBE- chains (kube-proxy's, the kubelet's canaries)
	kubeNFT []string                    // nft tables of kube-proxy
	user    []string                    // the etcd user's passwd fields; nil: none
	group   []string                    // the etcd group's fields; nil: none
	aside   []string                    // old etcd data a restore moved aside
}

// resetPlan plans one step on every host at once, in inventory order.
func (c *Cluster) resetPlan(hosts []inventory.Host, step func(ctx context.Context, sh remote.Host, f *resetFacts) []plan.Action) func(context.Context, plan.Planned) ([]plan.Action, error) {
	return func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
		if err := c.ensureRendered(ctx); err != nil {
			return nil, err
		}
		per := make([][]plan.Action, len(hosts))
		err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
			sh, f, err := c.readReset(ctx, h)
			if err != nil {
				return err
			}
			as := step(ctx, sh, f)
			for i := range as {
				// One action per host and step: the hosts go side by side.
				as[i].Host, as[i].Parallel = h.Name, true
			}
			per[indexOf(hosts, h.Name)] = as
			return nil
		})
		if err != nil {
			return nil, err
		}
		var out []plan.Action
		for _, as := range per {
			out = append(out, as...)
		}
		return out, nil
	}
}

// resetFootprint is h's footprint: the rendered manifest (every file of it,
// the optional ones the state directory lacks too) and the table, with the
// registry files hardway wrote on a worker that the inventory dropped since.
func (c *Cluster) resetFootprint(ctx context.Context, sh remote.Host, h inventory.Host) (units.Footprint, error) {
	c.renderMu.Lock()
	m := c.manifests[h.Name]
	c.renderMu.Unlock()
	if m == nil {
		return units.Footprint{}, fmt.Errorf("%s: no manifest rendered", h.Name)
	}
	var extra []string
	if m.Role == units.Worker {
		out, err := sh.Run(ctx, readRegistryFilesCmd, nil)
		if err != nil {
			return units.Footprint{}, fmt.Errorf("%s: list %s: %w", h.Name, units.CertsDir, err)
		}
		extra = staleRegistryFiles(out, m)
	}
	return units.HostFootprint(m, extra...), nil
}

// readReset connects to h and reads its facts.
func (c *Cluster) readReset(ctx context.Context, h inventory.Host) (remote.Host, *resetFacts, error) {
	sh, err := c.Host(ctx, h.Name)
	if err != nil {
		if usererr.HintOf(err) == "" {
			err = usererr.New(err, "reset the hosts that answer with --host NAME (each one named), and this one once it does")
		}
		return nil, nil, err
	}
	fp, err := c.resetFootprint(ctx, sh, h)
	if err != nil {
		return nil, nil, err
	}
	out, err := sh.Run(ctx, resetFactsScript(fp), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: read what hardway put there: %w", h.Name, err)
	}
	return sh, parseResetFacts(fp, string(out)), nil
}

// resetFactsScript prints the sections parseResetFacts reads. It only reads.
func resetFactsScript(fp units.Footprint) string {
	var b strings.Builder
	b.WriteString("# reset: what hardway put on the host (reads only)\n")
	b.WriteString("echo '@units'; " + remote.ShowUnitsCommand(fp.Units...) + " 2>/dev/null\n")
	all := slices.Concat(fp.Files, fp.Dirs, fp.State)
	fmt.Fprintf(&b, "echo '@paths'; for p in %s; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then printf '%%s\\n' \"$p\"; fi; done\n", quoteAll(all))
	fmt.Fprintf(&b, "echo '@entries'; for d in %s; do if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then find \"$d\" -mindepth 1 -maxdepth 1 2>/dev/null; fi; done\n", quoteAll(slices.Concat(fp.Dirs, fp.State)))
	fmt.Fprintf(&b, "echo '@links'; for u in %s; do for l in %[2]s/*.wants/\"$u\" %[2]s/*.requires/\"$u\"; do if [ -L \"$l\" ]; then printf '%%s\\n' \"$l\"; fi; done; done\n", quoteAll(fp.Units), units.UnitDir)
	b.WriteString("echo '@mounts'; cut -d ' ' -f 2 /proc/self/mounts\n")
	fmt.Fprintf(&b, "echo '@routes'; ip route show proto %[1]s 2>/dev/null; ip -6 route show proto %[1]s 2>/dev/null\n", units.PodRouteProto)
	fmt.Fprintf(&b, "echo '@bridge'; if [ -e /sys/class/net/%[1]s ]; then echo %[1]s; fi\n", units.CNIBridge)
	fmt.Fprintf(&b, "echo '@egress'; for t in iptables ip6tables; do if command -v $t >/dev/null 2>&1; then $t -w -t nat -S POSTROUTING 2>/dev/null | grep -F -e %s | sed \"s/^/$t /\"; fi; done\n", units.PodEgressComment)
	b.WriteString("echo '@kube-iptables'; for t in iptables ip6tables; do if command -v $t >/dev/null 2>&1; then for x in filter nat mangle; do $t -w -t $x -S 2>/dev/null; done; fi; done | grep -c -e KUBE- || true\n")
	b.WriteString("echo '@kube-nft'; if command -v nft >/dev/null 2>&1; then nft list tables 2>/dev/null | grep -w -e kube-proxy; fi\n")
	fmt.Fprintf(&b, "echo '@user'; getent passwd %[1]s 2>/dev/null; echo '@group'; getent group %[1]s 2>/dev/null\n", units.EtcdUser)
	fmt.Fprintf(&b, "echo '@aside'; for d in %s*; do if [ -e \"$d\" ]; then printf '%%s\\n' \"$d\"; fi; done\n", restoreAside)
	b.WriteString("true\n")
	return b.String()
}

func quoteAll(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = remote.Quote(p)
	}
	return strings.Join(q, " ")
}

func parseResetFacts(fp units.Footprint, out string) *resetFacts {
	f := &resetFacts{fp: fp, present: map[string]bool{}, entries: map[string][]string{}}
	section := ""
	var show strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "@"); ok && !strings.Contains(name, " ") {
			section = name
			continue
		}
		if l == "" && section != "units" {
			continue
		}
		switch section {
		case "units":
			show.WriteString(l + "\n")
		case "paths":
			f.present[l] = true
		case "entries":
			d := l[:max(strings.LastIndexByte(l, '/'), 0)]
			f.entries[d] = append(f.entries[d], l)
		case "links":
			f.links = append(f.links, l)
		case "mounts":
			f.mounts = append(f.mounts, unescapeMount(l))
		case "routes":
			f.routes = append(f.routes, strings.TrimSpace(l))
		case "bridge":
			f.bridge = f.bridge || l == units.CNIBridge
		case "egress":
			if r := egressRule(l); r != nil {
				f.egress = append(f.egress, r)
			}
		case "kube-iptables":
			f.kubeIPT, _ = strconv.Atoi(strings.TrimSpace(l))
		case "kube-nft":
			f.kubeNFT = append(f.kubeNFT, strings.TrimSpace(l))
		case "user":
			if fs := strings.Split(l, ":"); len(fs) >= 7 && fs[0] == units.EtcdUser {
				f.user = fs
			}
		case "group":
			if fs := strings.Split(l, ":"); len(fs) >= 4 && fs[0] == units.EtcdUser {
				f.group = fs
			}
		case "aside":
			f.aside = append(f.aside, l)
		}
	}
	f.units = map[string]remote.UnitState{}
	for u, st := range remote.ParseShowUnits(show.String()) {
		f.units[u] = st
	}
	return f
}

// egressRule is a line of the @egress section ("iptables -A POSTROUTING
// ... --comment hardway-pod-egress -j MASQUERADE") as the command and the
// rule's words after -A, or nil when it is not exactly hardway's rule.
func egressRule(l string) []string {
	fs := strings.Fields(l)
	if len(fs) < 3 || (fs[0] != "iptables" && fs[0] != "ip6tables") || fs[1] != "-A" || fs[2] != "POSTROUTING" {
		return nil
	}
	i := slices.Index(fs, "--comment")
	if i < 0 || i+1 >= len(fs) || strings.Trim(fs[i+1], `"`) != units.PodEgressComment {
		return nil
	}
	return append([]string{fs[0]}, fs[2:]...)
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 for a
// space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// active says whether a unit runs or would run: anything but inactive (a
// failed unit is stopped too, to be reset), or enabled.
func active(st remote.UnitState) bool {
	return st.State != "" && st.State != "inactive" || st.Enabled
}

// mountsUnder are the mount points below the footprint's State paths (not
// the paths themselves), deepest first.
func (f *resetFacts) mountsUnder() []string {
	var out []string
	for _, m := range f.mounts {
		for _, s := range f.fp.State {
			if m != s && units.Under(m, s) && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(b, a) })
	return out
}

// mountPoint says whether p is itself mounted on.
func (f *resetFacts) mountPoint(p string) bool { return slices.Contains(f.mounts, p) }

// --- services ------------------------------------------------------------

func (c *Cluster) resetServices(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	var stop []string
	for _, u := range f.fp.Units {
		if active(f.units[u]) {
			stop = append(stop, u)
		}
	}
	if len(stop) == 0 {
		return nil
	}
	const cd = units.Containerd + ".service"
	rmp := slices.Contains(stop, cd) && f.units[cd].Active
	desc := "stop and disable " + strings.Join(stop, ", ")
	if rmp {
		desc += "; before containerd stops, remove every pod (crictl rmp --all --force: the CNI frees their addresses and host ports), after it stop what is left of them (" + kubePodsSlice + ") and of its shims"
	}
	var b strings.Builder
	b.WriteString("# reset: stop hardway's services\nset -u\n")
	for _, u := range stop {
		q := remote.Quote(u)
		if u == cd && rmp {
			fmt.Fprintf(&b, "if systemctl is-active -q -- %s; then %s rmp --all --force >/dev/null 2>&1 || true; fi\n", q, crictlCmd)
		}
		fmt.Fprintf(&b, "systemctl disable -q -- %s 2>/dev/null || true\nsystemctl stop -- %s || true\n", q, q)
		if u == cd {
			fmt.Fprintf(&b, "systemctl stop -- %s 2>/dev/null || true\n", kubePodsSlice)
			fmt.Fprintf(&b, "systemctl kill --kill-who=all --signal=SIGKILL -- %s 2>/dev/null || true\n", q)
		}
	}
	fmt.Fprintf(&b, "still=''; for u in %s; do if systemctl is-active -q -- \"$u\"; then still=\"$still $u\"; fi; done\n", quoteAll(stop))
	b.WriteString("if [ -n \"$still\" ]; then echo \"still running:$still\" >&2; exit 1; fi\n")
	script := b.String()
	return []plan.Action{{Host: sh.Name(), Kind: plan.Stop, Desc: desc, Do: func(ctx context.Context) error {
		if _, err := sh.Run(ctx, script, nil); err != nil {
			return usererr.New(fmt.Errorf("%s: %w", sh.Name(), err), "see 'journalctl -u UNIT' there for the unit that does not stop; run 'hardway reset' again once it does")
		}
		return nil
	}}}
}

// --- network -------------------------------------------------------------

func (c *Cluster) resetNetwork(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	var what, diff, cmds []string
	if len(f.routes) > 0 {
		what = append(what, fmt.Sprintf("delete %d pod route(s) (proto %s)", len(f.routes), units.PodRouteProto))
		diff = append(diff, f.routes...)
		cmds = append(cmds, fmt.Sprintf("ip route flush proto %[1]s 2>/dev/null || true\nip -6 route flush proto %[1]s 2>/dev/null || true\n"+
			"if [ -n \"$(ip route show proto %[1]s; ip -6 route show proto %[1]s 2>/dev/null)\" ]; then echo 'pod routes (proto %[1]s) are left' >&2; exit 1; fi", units.PodRouteProto))
	}
	for _, r := range f.egress {
		what = append(what, "delete the pods' egress masquerade rule ("+r[0]+", "+units.PodEgressComment+")")
		diff = append(diff, strings.Join(r, " "))
		// Gone meanwhile (-C finds no such rule) is no failure.
		args := quoteAll(r[2:])
		cmds = append(cmds, fmt.Sprintf("%[1]s -w -t nat -D POSTROUTING %[2]s 2>/dev/null || ! %[1]s -w -t nat -C POSTROUTING %[2]s 2>/dev/null", r[0], args))
	}
	if f.bridge {
		what = append(what, "delete the bridge "+units.CNIBridge)
		cmds = append(cmds, fmt.Sprintf("ip link delete %[1]s 2>/dev/null || [ ! -e /sys/class/net/%[1]s ]", units.CNIBridge))
	}
	proxy := units.BinPath(units.KubeProxy)
	if (f.kubeIPT > 0 || len(f.kubeNFT) > 0) && f.present[proxy] {
		w := "remove kube-proxy's rules (" + proxy + " --cleanup: "
		var n []string
		if f.kubeIPT > 0 {
			n = append(n, fmt.Sprintf("%d iptables line(s) with KUBE- chains", f.kubeIPT))
		}
		if len(f.kubeNFT) > 0 {
			n = append(n, "nftables "+strings.Join(f.kubeNFT, ", "))
		}
		what = append(what, w+strings.Join(n, ", ")+")")
		// It says what it could not remove on stderr, and exits non-zero
		// for the rule sets a host does not have (no ip6tables, say).
		cmds = append(cmds, proxy+" --cleanup >/dev/null 2>&1 || true")
	}
	if len(what) == 0 {
		return nil
	}
	script := "# reset: the pod network\nset -e\n" + strings.Join(cmds, "\n") + "\n"
	return []plan.Action{{Host: sh.Name(), Kind: plan.Remove, Desc: strings.Join(what, "; "), Diff: strings.Join(diff, "\n"),
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, script, nil)
			return err
		}}}
}

// --- data ----------------------------------------------------------------

func (c *Cluster) resetData(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	var gone []string
	for _, s := range f.fp.State {
		// A mount point stays: only what is in it goes.
		if f.present[s] && (!f.mountPoint(s) || len(f.entries[s]) > 0) {
			gone = append(gone, s)
		}
	}
	mounts := f.mountsUnder()
	if len(gone) == 0 && len(mounts) == 0 {
		return nil
	}
	var desc []string
	if len(mounts) > 0 {
		desc = append(desc, fmt.Sprintf("unmount the %d mount(s) below the data directories (pods' volumes, shm; lazily when busy)", len(mounts)))
	}
	var names []string
	for _, g := range gone {
		if f.mountPoint(g) {
			g += " (a mount point: its contents)"
		}
		names = append(names, g)
	}
	if len(names) > 0 {
		desc = append(desc, "remove with everything in them: "+strings.Join(names, ", "))
	}
	var diff []string
	for _, m := range mounts {
		diff = append(diff, "umount "+m)
	}
	script := resetDataScript(f.fp)
	return []plan.Action{{Host: sh.Name(), Kind: plan.Remove, Desc: strings.Join(desc, "; "), Diff: strings.Join(diff, "\n"),
		Do: func(ctx context.Context) error {
			if _, err := sh.Run(ctx, script, nil); err != nil {
				return usererr.New(fmt.Errorf("%s: %w", sh.Name(), err), "something still uses them: see 'findmnt -R' and 'fuser -vm' for each path on the host, then run 'hardway reset' again")
			}
			return nil
		}}}
}

// resetDataScript unmounts, deepest first, whatever is mounted below the
// footprint's State paths (it reads the mounts again: a pod may have come
// and gone since the plan), then removes each path with everything in it,
// never crossing into another file system; a path that is a mount point
// itself keeps the directory and loses its contents. It refuses while one
// of hardway's services runs.
func resetDataScript(fp units.Footprint) string {
	state := quoteAll(fp.State)
	return fmt.Sprintf(`# reset: hardway's data
set -u
for u in %[1]s; do if systemctl is-active -q -- "$u"; then echo "$u is running: its data stays" >&2; exit 1; fi; done
list() { for d in %[2]s; do awk -v p="$d/" 'index($2, p) == 1 {print $2}' /proc/self/mounts; done | sort -r -u; }
n=0
while ms=$(list); [ -n "$ms" ]; do
  n=$((n + 1))
  if [ $n -gt 5 ]; then echo "still mounted: $ms" >&2; exit 1; fi
  printf '%%s\n' "$ms" | while IFS= read -r m; do
    m=$(printf '%%b' "$m")
    umount -- "$m" 2>/dev/null || umount -l -- "$m" 2>/dev/null || true
  done
done
failed=''
for d in %[2]s; do
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then continue; fi
  if awk -v p="$d" '$2 == p {f = 1} END {exit !f}' /proc/self/mounts; then
    find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system -- {} + || failed="$failed $d"
  else
    rm -rf --one-file-system -- "$d" || failed="$failed $d"
  fi
done
if [ -n "$failed" ]; then echo "not all removed:$failed" >&2; exit 1; fi
`, quoteAll(fp.Units), state)
}

// --- files ---------------------------------------------------------------

func (c *Cluster) resetFiles(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	var gone []string
	for _, p := range f.fp.Files {
		if f.present[p] {
			gone = append(gone, p)
		}
	}
	gone = append(gone, f.links...)
	if len(gone) == 0 {
		return nil
	}
	desc := fmt.Sprintf("remove %d file(s) hardway pushed (units, binaries, certificates, keys, kubeconfigs, configs)", len(gone))
	if len(f.links) > 0 {
		desc += fmt.Sprintf(" and %d enablement link(s)", len(f.links))
	}
	desc += ", then systemctl daemon-reload"
	script := fmt.Sprintf("# reset: hardway's files\nset -e\nrm -f -- %s\nsystemctl daemon-reload\nsystemctl reset-failed -- %s 2>/dev/null || true\n", quoteAll(gone), quoteAll(f.fp.Units))
	return []plan.Action{{Host: sh.Name(), Kind: plan.Remove, Desc: desc, Diff: strings.Join(gone, "\n"),
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, script, nil)
			return err
		}}}
}

// --- dirs ----------------------------------------------------------------

// emptyDirs are the footprint's directories on the host that hold nothing
// but what the reset removes (the files, the State paths, and directories
// of the same kind), deepest first. The others are what it leaves, each
// with what is in it that is not hardway's.
func (f *resetFacts) emptyDirs() (empty []string, kept map[string][]string) {
	kept = map[string][]string{}
	removable := map[string]bool{}
	for _, d := range f.fp.Dirs { // deepest first: a directory's own directories come before it
		if !f.present[d] {
			continue
		}
		var foreign []string
		for _, e := range f.entries[d] {
			switch {
			case slices.Contains(f.fp.Files, e), removable[e]:
			case slices.ContainsFunc(f.fp.State, func(s string) bool { return units.Under(e, s) }) && !f.mountPoint(e):
			default:
				foreign = append(foreign, e)
			}
		}
		if len(foreign) == 0 {
			removable[d] = true
			empty = append(empty, d)
		} else {
			kept[d] = foreign
		}
	}
	return empty, kept
}

func (c *Cluster) resetDirs(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	empty, _ := f.emptyDirs()
	if len(empty) == 0 {
		return nil
	}
	script := "# reset: hardway's directories\nrmdir --ignore-fail-on-non-empty -- " + quoteAll(empty) + "\n"
	return []plan.Action{{Host: sh.Name(), Kind: plan.Remove, Desc: "remove the directories left empty: " + strings.Join(empty, ", "),
		Do: func(ctx context.Context) error {
			_, err := sh.Run(ctx, script, nil)
			return err
		}}}
}

// --- user ----------------------------------------------------------------

// hardwaysUser says whether the etcd user is the one hardway's sysusers
// file made: its description is the file's (systemd-sysusers leaves a user
// that exists alone). Only on a host whose footprint has the file.
func (f *resetFacts) hardwaysUser() bool {
	return f.user != nil && f.user[4] == units.EtcdUserGECOS && slices.Contains(f.fp.Files, units.EtcdSysusersConf)
}

func (c *Cluster) resetUser(_ context.Context, sh remote.Host, f *resetFacts) []plan.Action {
	if !f.hardwaysUser() {
		return nil
	}
	u := units.EtcdUser
	desc := fmt.Sprintf("delete the system user %s (uid %s, %q: made by %s)", u, f.user[2], units.EtcdUserGECOS, units.EtcdSysusersConf)
	// The group of the same name goes too when userdel leaves it (no
	// USERGROUPS_ENAB) and it is the user's own: the same GID, no members.
	script := fmt.Sprintf("# reset: hardway's etcd user\nset -e\nuserdel %[1]s\ng=$(getent group %[1]s || true)\nif [ \"$g\" = %[2]s ]; then groupdel %[1]s; fi\n",
		u, remote.Quote(u+":x:"+f.user[3]+":"))
	if f.group != nil && f.group[2] == f.user[3] && f.group[3] == "" {
		desc += " and its group"
	}
	return []plan.Action{{Host: sh.Name(), Kind: plan.Remove, Desc: desc, Do: func(ctx context.Context) error {
		_, err := sh.Run(ctx, script, nil)
		return err
	}}}
}

// --- what it leaves ------------------------------------------------------

// Leftover is something a reset does not remove, and how to.
type Leftover struct {
	Host    string `json:"host,omitempty"` // "": every host reset
	What    string `json:"what"`
	Command string `json:"command,omitempty"`
}

// ResetLeft says what a reset of hosts leaves: on the hosts as read now
// (before a reset what it will leave, after it what it left) and what no
// host shows (packages, firewall rules, the kernel's settings).
func (c *Cluster) ResetLeft(ctx context.Context, hosts []inventory.Host, after bool) ([]Leftover, error) {
	if err := c.ensureRendered(ctx); err != nil {
		return nil, err
	}
	per := make([][]Leftover, len(hosts))
	err := remote.ForEach(ctx, hosts, hostsAtOnce, func(ctx context.Context, h inventory.Host) error {
		_, f, err := c.readReset(ctx, h)
		if err != nil {
			return err
		}
		per[indexOf(hosts, h.Name)] = f.left(h.Name, after)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Leftover
	for _, l := range per {
		out = append(out, l...)
	}
	return append(out, c.resetLeftEverywhere(hosts)...), nil
}

// left is what the reset leaves on one host, from its facts.
func (f *resetFacts) left(host string, after bool) []Leftover {
	var out []Leftover
	add := func(what, cmd string) { out = append(out, Leftover{Host: host, What: what, Command: cmd}) }
	if after {
		for _, u := range f.fp.Units {
			if f.units[u].Active {
				add(u+" still runs", "systemctl disable --now "+u)
			}
		}
		for _, m := range f.mountsUnder() {
			add(m+" is still mounted", "umount -l "+remote.Quote(m))
		}
		for _, p := range f.fp.Files {
			if f.present[p] {
				add(p+" is still there", "rm -f "+remote.Quote(p))
			}
		}
	}
	for _, s := range f.fp.State {
		if f.present[s] && f.mountPoint(s) {
			add(s+" is a mount point: the reset empties it and leaves the directory and its mount", "")
		}
	}
	_, kept := f.emptyDirs()
	for _, d := range f.fp.Dirs {
		var es []string
		for _, e := range kept[d] {
			if _, sub := kept[e]; !sub { // a directory of hardway's kept is named itself
				es = append(es, e)
			}
		}
		if len(es) == 0 {
			continue
		}
		shown := es
		if len(shown) > 3 {
			shown = append(slices.Clip(shown[:3]), fmt.Sprintf("%d more", len(es)-3))
		}
		add(fmt.Sprintf("%s: not empty, it holds what hardway did not put there: %s", d, strings.Join(shown, ", ")), "rm -rf "+remote.Quote(d))
	}
	for _, a := range f.aside {
		add(a+": old etcd data a restore moved aside", "rm -rf "+remote.Quote(a))
	}
	if f.user != nil && !f.hardwaysUser() && slices.Contains(f.fp.Files, units.EtcdSysusersConf) {
		add(fmt.Sprintf("the user %s: hardway did not make it (its description is %q, not %q)", units.EtcdUser, f.user[4], units.EtcdUserGECOS), "")
	}
	proxy := units.BinPath(units.KubeProxy)
	if (f.kubeIPT > 0 || len(f.kubeNFT) > 0) && (after || !f.present[proxy]) {
		var what []string
		if f.kubeIPT > 0 {
			what = append(what, fmt.Sprintf("%d iptables line(s) with KUBE- chains", f.kubeIPT))
		}
		if len(f.kubeNFT) > 0 {
			what = append(what, "nftables "+strings.Join(f.kubeNFT, ", "))
		}
		why := "kube-proxy is not there to remove them"
		if after {
			why = "the kubelet's (KUBE-KUBELET-CANARY), or kube-proxy's that its cleanup did not remove"
		}
		add(strings.Join(what, ", ")+": "+why, flushRulesCommand)
	}
	return out
}

// flushRulesCommand is kubeadm reset's advice: it flushes every rule of the
// host, kube-proxy's and everyone else's.
const flushRulesCommand = "iptables -F && iptables -t nat -F && iptables -t mangle -F && iptables -X (and the same with ip6tables), or for nftables: nft delete table ip kube-proxy; nft delete table ip6 kube-proxy"

// resetLeftEverywhere is what a reset leaves that it does not read on the
// hosts: rules of others, packages, firewall ports, the kernel's settings,
// a CNI of the user's.
func (c *Cluster) resetLeftEverywhere(hosts []inventory.Host) []Leftover {
	var out []Leftover
	add := func(what, cmd string) { out = append(out, Leftover{What: what, Command: cmd}) }
	workers, cps := false, false
	for _, h := range hosts {
		if c.isWorker(h.Name) {
			workers = true
		} else {
			cps = true
		}
	}
	if workers {
		add("iptables and nftables rules that are not kube-proxy's (kube-proxy --cleanup removes its own) nor hardway's egress rule: the kubelet's KUBE-KUBELET-CANARY chains, a CNI's, a firewall's, your own; "+
			"to flush every rule of a host, as kubeadm reset suggests", flushRulesCommand)
		var mods, sysctls []string
		for _, m := range units.NodeModules() {
			mods = append(mods, m.Key)
		}
		for _, h := range hosts {
			if c.isWorker(h.Name) {
				for _, s := range units.NodeSysctls(c.Inv, h) {
					if kv := fmt.Sprintf("%s=%v", s.Key, s.Value); !slices.Contains(sysctls, kv) {
						sysctls = append(sysctls, kv)
					}
				}
			}
		}
		add("the kernel modules the host step loaded ("+strings.Join(mods, ", ")+") and the sysctls it set ("+strings.Join(sysctls, ", ")+
			"): as they are until the next boot; their boot files ("+units.ModulesLoadConf+", "+units.SysctlConf+") are removed", "")
		if c.Inv.HostPrep.Packages == inventory.HostPrepInstall {
			add("the packages the host step installed where a tool was missing (hostPrep.packages: install): hardway does not record which; of "+workerPackages(c.proxyMode(), c.cniBridge())+
				", remove those nothing else needs with the package manager", "")
		}
		if !c.cniBridge() {
			add("your CNI's own files, interfaces and rules (network.cni: none): remove them as its documentation says", "")
		}
	}
	if c.Inv.HostPrep.Firewall == inventory.HostPrepOpen {
		var ports []string
		for _, w := range []bool{false, true} {
			if (w && !workers) || (!w && !cps) {
				continue
			}
			for _, p := range c.neededPorts(w) {
				if s := p.String(); !slices.Contains(ports, s) {
					ports = append(ports, s)
				}
			}
		}
		what := "the firewall ports the host step opened (hostPrep.firewall: open): " + strings.Join(ports, ", ")
		if workers && c.cniBridge() {
			what += ", and the pod network " + c.Inv.Network.PodCIDR + " it let through"
		}
		add(what+"; hardway cannot tell them from rules that were there before",
			"ufw: 'ufw status numbered', then 'ufw delete N' for each rule commented 'hardway: …'; firewalld: firewall-cmd --permanent --remove-port=PORT/tcp for each, --zone=trusted --remove-source="+c.Inv.Network.PodCIDR+", then firewall-cmd --reload")
	}
	return out
}

// workerPackages names the packages of workerTools for the inventory, per
// family: "iproute2, kmod, iptables (apt), iproute, ... (dnf)".
func workerPackages(mode string, bridge bool) string {
	var apt, dnf []string
	for _, t := range workerTools {
		if !t.need(mode, bridge) {
			continue
		}
		if n := t.pkg.Apt; n != "" && !slices.Contains(apt, n) {
			apt = append(apt, n)
		}
		if n := t.pkg.Dnf; n != "" && !slices.Contains(dnf, n) {
			dnf = append(dnf, n)
		}
	}
	return strings.Join(apt, ", ") + " (apt); " + strings.Join(dnf, ", ") + " (dnf)"
}

// --- the result ----------------------------------------------------------

// ResetResult is what 'hardway reset -o json' prints.
type ResetResult struct {
	DryRun   bool              `json:"dryRun"`
	Hosts    []ResetHostResult `json:"hosts"`
	Steps    []plan.StepResult `json:"steps"`
	Warnings []string          `json:"warnings,omitempty"`
	Left     []Leftover        `json:"left"`
	// StateDir is never touched by a reset: its CA, keys, kubeconfigs and
	// backups, and hardway.lock beside the inventory, stay as they are.
	StateDir string `json:"stateDir"`
	LockFile string `json:"lockFile"`
	Summary  string `json:"summary"`
}

// ResetHostResult is one host's part of a reset.
type ResetHostResult struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Changes int    `json:"changes"` // actions planned (dry run) or taken
}

// NewResetResult sums a reset run up.
func (c *Cluster) NewResetResult(res *plan.Result, hosts []inventory.Host, warnings []string, left []Leftover) *ResetResult {
	r := &ResetResult{Warnings: warnings, Left: left, StateDir: string(c.opt.State), LockFile: c.Inv.LockPath()}
	if res != nil {
		r.DryRun, r.Steps = res.DryRun, res.Steps
	}
	for _, h := range hosts {
		hr := ResetHostResult{Name: h.Name, Role: string(units.ControlPlane)}
		if c.isWorker(h.Name) {
			hr.Role = string(units.Worker)
		}
		for _, s := range r.Steps {
			for _, a := range s.Actions {
				if a.Host == h.Name {
					hr.Changes++
				}
			}
		}
		r.Hosts = append(r.Hosts, hr)
	}
	n := 0
	if res != nil {
		n = res.Changes()
	}
	var what string
	switch {
	case n == 0:
		what = "nothing of hardway's left to remove"
	case r.DryRun:
		what = fmt.Sprintf("%d change(s) planned, nothing changed (--dry-run)", n)
	default:
		what = fmt.Sprintf("%d change(s) made: hardway's services stopped, its files, data, routes and user removed", n)
	}
	r.Summary = fmt.Sprintf("reset %d host(s): %s; the state directory %s is untouched", len(hosts), what, usererr.Quote(r.StateDir))
	return r
}
