package initinv

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/inventory"
)

// sectionComments explain each top-level key in a line, above it; a key
// the --like file explains already keeps its own words.
var sectionComments = map[string]string{
	"cluster":           "The cluster's name: lower-case letters, digits and '-'.",
	"kubernetesVersion": `An exact version, or a minor such as "1.36" (resolved once, then pinned in hardway.lock).`,
	"etcdVersion":       "Left out: the tested etcd for that Kubernetes minor.",
	"arch":              "The architecture of the binaries the hosts get: amd64 or arm64.",
	"network":           "The cluster's own address ranges: they must overlap no network of the hosts.",
	"ssh":               "How hardway reaches the hosts; their keys are always checked against known_hosts.",
	"pki":               "The key algorithm and the certificates' lifetimes.",
	"encryption":        "How Secrets are encrypted at rest.",
	"releases":          "Where the binaries come from: mirrors laid out like the official download sites.",
	"images":            "Image tarballs every worker imports, for hosts that cannot pull.",
	"registries":        "Registries the workers' containerd pulls through mirrors.",
	"dns":               "CoreDNS, which 'hardway up' applies when there are workers.",
	"podSecurity":       "Pod Security admission's default for the whole cluster.",
	"hostPrep":          "How far 'hardway up' may change the hosts' packages, firewall and swap (check: only name what is missing).",
	"controlPlane":      "etcd and the Kubernetes control plane run here; an odd count keeps etcd's quorum.",
	"workers":           "containerd, the kubelet and kube-proxy run here: the hosts pods run on.",
}

// defaultsLeft are the sections a file without --like leaves out, at their
// defaults: the file's last comment names them.
const defaultsLeft = "pki, encryption, releases, images, registries, dns, podSecurity, hostPrep"

// write renders the inventory: the --like file's document with the hosts,
// the ranges, arch and the SSH settings replaced, or a new one.
func (r *Result) write(in Input, pod, svc Range) ([]byte, error) {
	var doc *yaml.Node
	if in.Like != nil {
		var err error
		if doc, err = in.Like.doc(); err != nil {
			return nil, err
		}
		// The file's own header described the file it was, not this one.
		doc.HeadComment = ""
		if top := doc.Content[0]; len(top.Content) > 0 {
			top.Content[0].HeadComment = ""
		}
		rebaseCAs(doc.Content[0], in.Like.Inv.Dir(), in.Conn.Dir())
	} else {
		top := mapping()
		set(top, "cluster", str(inventory.DefaultClusterName))
		set(top, "kubernetesVersion", str(inventory.DefaultKubernetesVersion))
		doc = &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{top}}
	}
	top := doc.Content[0]
	file := in.Display
	if file == "" {
		file = "inventory.yaml"
	}
	header := []string{
		"hardway inventory, written by 'hardway init --hosts' from what the hosts said.",
		"The guesses (roles, names, address ranges, arch) are said beside them: check them, then run",
		"  hardway up -i " + file,
		"Every key: docs/inventory.md; 'hardway init' without --hosts prints them all, explained.",
	}
	if in.Like != nil {
		header = append(header, "Every setting but the hosts, the address ranges and arch is "+in.Like.Path+"'s.")
	}
	doc.HeadComment = strings.Join(header, "\n")

	_, archComment, _ := strings.Cut(r.archGuess(), ": ")
	if r.MixedArch {
		archComment = "the most common; the cluster mixes architectures (see the hosts)"
	}
	setAfter(top, "arch", withLine(str(r.Arch), archComment), "kubernetesVersion", "cluster")

	net := ensureMap(top, "network", "arch")
	setAfter(net, "serviceCIDR", withLine(str(svc.Prefix.String()), rangeComment(svc)))
	setAfter(net, "podCIDR", withLine(str(pod.Prefix.String()), rangeComment(pod)), "serviceCIDR")

	s := in.Conn.SSH
	sshm := ensureMap(top, "ssh", "network")
	setAfter(sshm, "user", str(s.User))
	setAfter(sshm, "port", integer(s.Port), "user")
	for _, kv := range []struct{ key, val string }{
		{"identityFile", s.IdentityFile}, {"knownHostsFile", s.KnownHostsFile}, {"bastion", s.Bastion},
	} {
		if kv.val == "" {
			del(sshm, kv.key)
		} else {
			setAfter(sshm, kv.key, str(kv.val), "port")
		}
	}

	var cps, ws []*yaml.Node
	for _, h := range r.Hosts {
		if h.Role == RoleControlPlane {
			cps = append(cps, h.node())
		} else {
			ws = append(ws, h.node())
		}
	}
	setAfter(top, "controlPlane", &yaml.Node{Kind: yaml.SequenceNode, Content: cps}, "ssh")
	if len(ws) > 0 {
		setAfter(top, "workers", &yaml.Node{Kind: yaml.SequenceNode, Content: ws}, "controlPlane")
	} else {
		del(top, "workers")
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k := top.Content[i]; k.HeadComment == "" {
			k.HeadComment = sectionComments[k.Value]
		}
	}

	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("init: write the inventory: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("init: write the inventory: %w", err)
	}
	out := spaceSections(b.String())
	if in.Like == nil {
		out += "\n# Left at their defaults: " + defaultsLeft + ".\n"
	}
	return []byte(out), nil
}

// rangeComment is the range's why without its key and value, beside them.
func rangeComment(r Range) string {
	why := strings.TrimPrefix(r.Why, strings.Fields(r.Why)[0]+" "+r.Prefix.String())
	return strings.TrimLeft(why, ",: ")
}

// node is the host's item in controlPlane or workers.
func (h Host) node() *yaml.Node {
	m := mapping()
	m.HeadComment = strings.Join(h.comments, "\n")
	set(m, "name", str(h.Name))
	set(m, "address", str(h.Address))
	if h.InternalAddress != "" {
		set(m, "internalAddress", withLine(str(h.InternalAddress), "where its sshd saw the connection arrive"))
	}
	if h.ssh != nil {
		o := mapping()
		if h.ssh.User != "" {
			set(o, "user", str(h.ssh.User))
		}
		if h.ssh.Port != 0 {
			set(o, "port", integer(h.ssh.Port))
		}
		set(m, "ssh", o)
	}
	if h.ContainerHost {
		set(m, "containerHost", withLine(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
			"systemd-detect-virt --container says "+h.Facts.Container+"; never set it on a real host"))
	}
	return m
}

// rebaseCAs makes the registries' mirror CA paths, relative to the --like
// file, relative to the new file.
func rebaseCAs(top *yaml.Node, from, to string) {
	regs := get(top, "registries")
	if regs == nil || regs.Kind != yaml.SequenceNode {
		return
	}
	for _, reg := range regs.Content {
		ms := get(reg, "mirrors")
		if ms == nil || ms.Kind != yaml.SequenceNode {
			continue
		}
		for _, m := range ms.Content {
			if ca := get(m, "ca"); ca != nil && ca.Kind == yaml.ScalarNode {
				ca.Value = rebase(ca.Value, from, to)
			}
		}
	}
}

// spaceSections puts a blank line before each top-level comment block and
// after each section, as a person writes the file.
func spaceSections(s string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	prev := ""
	for i, l := range lines {
		top := l != "" && l[0] != ' ' && l[0] != '\n' && l[0] != '-'
		comment := strings.HasPrefix(l, "#")
		prevComment := strings.HasPrefix(prev, "#")
		prevNested := strings.HasPrefix(prev, " ") || strings.HasPrefix(prev, "-")
		if i > 0 && top && strings.TrimSpace(prev) != "" && ((comment && !prevComment) || (!comment && prevNested)) {
			b.WriteString("\n")
		}
		b.WriteString(l)
		prev = l
	}
	return b.String()
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func str(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }

func integer(v int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}
}

func withLine(n *yaml.Node, comment string) *yaml.Node {
	n.LineComment = comment
	return n
}

// get is the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func set(m *yaml.Node, key string, v *yaml.Node) { setAfter(m, key, v) }

// setAfter sets key in mapping m to v: in its place when m has it (a
// scalar keeps the comment beside it unless v brings its own), else after
// the first of after that m has, else at the end.
func setAfter(m *yaml.Node, key string, v *yaml.Node, after ...string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			if v.LineComment == "" && old.Kind == yaml.ScalarNode && v.Kind == yaml.ScalarNode {
				v.LineComment = old.LineComment
			}
			m.Content[i+1] = v
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Value: key}
	for _, a := range after {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == a {
				m.Content = append(m.Content[:i+2], append([]*yaml.Node{k, v}, m.Content[i+2:]...)...)
				return
			}
		}
	}
	m.Content = append(m.Content, k, v)
}

// ensureMap is the mapping under key in m, made (after the first of after
// that m has) when m has none.
func ensureMap(m *yaml.Node, key string, after ...string) *yaml.Node {
	if v := get(m, key); v != nil && v.Kind == yaml.MappingNode {
		return v
	}
	v := mapping()
	setAfter(m, key, v, after...)
	return v
}

func del(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}
