package units

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
)

// Registry mirrors (the inventory's registries:): containerd's CRI reads
// one hosts.toml per registry under CertsDir, named by the registry as
// image names carry it, at every pull. A changed or new hosts.toml, or a
// mirror's CA beside it, therefore needs no containerd restart (containerd's
// docs/hosts.md: "Updates under this directory do not require restarting
// the containerd daemon"); only config_path in config.toml does, and it
// changes only when registries: appears or goes.

// RenderedMark begins every hosts.toml hardway renders: what tells
// hardway's own files under CertsDir from ones someone else put there,
// when a registry left the inventory and its files are removed.
const RenderedMark = "# Rendered by hardway"

// dockerHubEndpoint is where Docker Hub's registry API answers: docker.io
// itself does not (containerd's own default for docker.io is this host).
const dockerHubEndpoint = "https://registry-1.docker.io"

// HostsTOML is the hosts.toml of registry name on a worker:
// /etc/containerd/certs.d/registry.k8s.io/hosts.toml. containerd looks for
// host:port as written too (after host_port_, which hardway never writes).
func HostsTOML(name string) string { return CertsDir + "/" + name + "/hosts.toml" }

// MirrorCA is where the CA of the mirror at mirrorURL goes, beside its
// registry's hosts.toml. .pem, not .crt: were the hosts.toml ever gone,
// containerd would take a *.crt there as the CA of the registry itself
// (Docker's certs.d layout).
func MirrorCA(name, mirrorURL string) string {
	host := mirrorURL
	if u, err := url.Parse(mirrorURL); err == nil {
		host = u.Host
	}
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '_'
	}, host)
	return CertsDir + "/" + name + "/hardway-ca-" + safe + ".pem"
}

// registryConfigs are containerd's config files per registry: its
// hosts.toml and its mirrors' CAs. None restarts containerd (above).
func registryConfigs(inv *inventory.Inventory) []Config {
	var out []Config
	for _, reg := range inv.Registries {
		out = append(out, Config{Path: HostsTOML(reg.Name), NoRestart: true,
			render: func(r *renderer, _ inventory.Host) ([]byte, []Setting, error) { return r.hostsTOML(reg) }})
		for _, m := range reg.Mirrors {
			if len(m.CAData) == 0 {
				continue
			}
			out = append(out, Config{Path: MirrorCA(reg.Name, m.URL), NoRestart: true,
				render: func(*renderer, inventory.Host) ([]byte, []Setting, error) { return m.CAData, nil, nil }})
		}
	}
	return out
}

// hostsTOML renders the hosts.toml of one registry: its mirrors, each a
// [host."<url>"] table tried in order, then the server.
func (r *renderer) hostsTOML(reg inventory.Registry) ([]byte, []Setting, error) {
	file := HostsTOML(reg.Name)
	var defs []settingDef
	mirrors := reg.Mirrors
	if reg.MirrorOnly {
		// containerd always tries the server last, and without one the
		// registry itself: only a mirror as the server keeps it out.
		last := mirrors[len(mirrors)-1]
		mirrors = mirrors[:len(mirrors)-1]
		defs = append(defs, settingDef{"", "", "server", last.URL,
			"mirrorOnly: the last mirror is the server, so " + reg.Name + " itself is never tried"})
		defs = append(defs, mirrorDefs(reg.Name, "", last)...)
	} else {
		server, why := "https://"+reg.Name, "tried after the mirrors: "+reg.Name+" itself"
		if reg.Name == inventory.DockerHub {
			server, why = dockerHubEndpoint, "tried after the mirrors: Docker Hub, whose registry API is at registry-1.docker.io"
		}
		defs = append(defs, settingDef{"", "", "server", server, why})
	}
	for _, m := range mirrors {
		defs = append(defs, mirrorDefs(reg.Name, "host."+strconv.Quote(m.URL), m)...)
	}
	v := containerdVersion(r.inv)
	if v == nil {
		return nil, nil, fmt.Errorf("containerd %q: not a version", r.inv.ContainerdVersion)
	}
	settings, err := selectSettings(Containerd, file, defs, v)
	if err != nil {
		return nil, nil, err
	}
	header := RenderedMark + ": the mirrors of " + reg.Name + ", read by containerd at every pull.\n"
	return tomlDoc(header, settings, tomlTables(defs)), settings, nil
}

// mirrorDefs are the settings of one mirror of registry name in table (its
// [host."<url>"], or "" for the server's top-level keys).
func mirrorDefs(name, table string, m inventory.Mirror) []settingDef {
	host := m.URL
	if u, err := url.Parse(m.URL); err == nil {
		host = u.Host
	}
	defs := []settingDef{{"", table, "capabilities", []string{"pull", "resolve"},
		"pull from " + host + " and let it resolve tags to digests: a mirror you run is trusted as the registry is (nothing is pushed to it)"}}
	if len(m.CAData) > 0 {
		defs = append(defs, settingDef{"", table, "ca", MirrorCA(name, m.URL),
			"verify " + host + "'s certificate against the inventory's ca: (pushed beside this file) as well as the host's system roots"})
	}
	if m.InsecureSkipVerify {
		defs = append(defs, settingDef{"", table, "skip_verify", true, "insecureSkipVerify: any certificate from " + host + " is accepted"})
	}
	return defs
}

// registryNames lists the inventory's registries for a reason line.
func registryNames(inv *inventory.Inventory) string {
	names := make([]string, len(inv.Registries))
	for i, reg := range inv.Registries {
		names[i] = reg.Name
	}
	return strings.Join(names, ", ")
}
