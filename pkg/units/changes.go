package units

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/hardway/hardway/pkg/inventory"
)

// Change is one difference in what a component runs with between two
// versions of the same inventory: a flag or config setting the version
// gates add, drop or change, or a rendered config file whose content
// differs otherwise (an apiVersion).
type Change struct {
	Component string   `json:"component"`
	Kind      string   `json:"kind"` // "flag", "setting" or "file"
	Op        string   `json:"op"`   // "added", "removed" or "changed"
	Name      string   `json:"name"` // "--feature-gates", "kubelet.yaml: failSwapOn", a path
	From      string   `json:"from,omitempty"`
	To        string   `json:"to,omitempty"`
	Reason    string   `json:"reason,omitempty"` // the table row's reason (the removed row's for "removed")
	Hosts     []string `json:"hosts"`            // the hosts it applies to, in inventory order
}

// Text is the change as one line: "+ --watch-progress-notify-interval=5s".
func (c Change) Text() string {
	switch c.Op {
	case "added":
		return "+ " + c.Name + "=" + c.To
	case "removed":
		return "- " + c.Name + "=" + c.From
	case "changed":
		if c.Kind == "file" {
			return "~ " + c.Name
		}
		return "~ " + c.Name + ": " + c.From + " → " + c.To
	}
	return c.Op + " " + c.Name
}

// Changes renders inv as from and as to (the same hosts, other versions)
// and reports, per component, the flags and settings that the versions'
// gates add, remove or change, and the other rendered files whose content
// differs. It is what an upgrade changes in each unit, before it does.
// Identical changes on several hosts are one Change with every host.
func Changes(from, to *inventory.Inventory, pods map[string]netip.Prefix) ([]Change, error) {
	a, err := Render(from, pods)
	if err != nil {
		return nil, fmt.Errorf("render at %s: %w", from.KubernetesVersion, err)
	}
	b, err := Render(to, pods)
	if err != nil {
		return nil, fmt.Errorf("render at %s: %w", to.KubernetesVersion, err)
	}
	after := map[string]Manifest{}
	for _, m := range b {
		after[m.Host] = m
	}
	var out []Change
	index := map[string]int{}
	add := func(host string, c Change) {
		k := strings.Join([]string{c.Component, c.Kind, c.Op, c.Name, c.From, c.To}, "\x00")
		if i, ok := index[k]; ok {
			out[i].Hosts = append(out[i].Hosts, host)
			return
		}
		c.Hosts = []string{host}
		index[k] = len(out)
		out = append(out, c)
	}
	for _, ma := range a {
		mb, ok := after[ma.Host]
		if !ok {
			continue
		}
		for _, comp := range ma.Components {
			for _, c := range diffFlags(comp, ma.Flags[comp], mb.Flags[comp]) {
				add(ma.Host, c)
			}
			for _, c := range diffSettings(comp, ma.Settings[comp], mb.Settings[comp]) {
				add(ma.Host, c)
			}
		}
		for _, c := range diffFiles(ma, mb) {
			add(ma.Host, c)
		}
	}
	order := map[string]int{}
	for i, c := range Components() {
		order[c.Name] = i
	}
	slices.SortStableFunc(out, func(x, y Change) int { return order[x.Component] - order[y.Component] })
	return out, nil
}

func diffFlags(comp string, a, b []Flag) []Change {
	var out []Change
	bm := map[string]Flag{}
	for _, f := range b {
		bm[f.Name] = f
	}
	am := map[string]bool{}
	for _, f := range a {
		am[f.Name] = true
		g, ok := bm[f.Name]
		switch {
		case !ok:
			out = append(out, Change{Component: comp, Kind: "flag", Op: "removed", Name: "--" + f.Name, From: f.Value, Reason: f.Reason})
		case g.Value != f.Value:
			out = append(out, Change{Component: comp, Kind: "flag", Op: "changed", Name: "--" + f.Name, From: f.Value, To: g.Value, Reason: g.Reason})
		}
	}
	for _, g := range b {
		if !am[g.Name] {
			out = append(out, Change{Component: comp, Kind: "flag", Op: "added", Name: "--" + g.Name, To: g.Value, Reason: g.Reason})
		}
	}
	return out
}

func diffSettings(comp string, a, b []Setting) []Change {
	key := func(s Setting) string { return s.File + ": " + s.Key }
	var out []Change
	bm := map[string]Setting{}
	for _, s := range b {
		bm[key(s)] = s
	}
	am := map[string]bool{}
	for _, s := range a {
		am[key(s)] = true
		t, ok := bm[key(s)]
		switch {
		case !ok:
			out = append(out, Change{Component: comp, Kind: "setting", Op: "removed", Name: key(s), From: valueText(s.Value), Reason: s.Reason})
		case valueText(t.Value) != valueText(s.Value):
			out = append(out, Change{Component: comp, Kind: "setting", Op: "changed", Name: key(s), From: valueText(s.Value), To: valueText(t.Value), Reason: t.Reason})
		}
	}
	for _, t := range b {
		if !am[key(t)] {
			out = append(out, Change{Component: comp, Kind: "setting", Op: "added", Name: key(t), To: valueText(t.Value), Reason: t.Reason})
		}
	}
	return out
}

// diffFiles reports rendered files whose content changed beyond what the
// flags and settings say: config files without a settings table (the
// scheduler's, the audit policy), whose apiVersion a version may move.
// Units are left out: their flags are reported one by one.
func diffFiles(a, b Manifest) []Change {
	explained := map[string]bool{}
	for _, m := range []Manifest{a, b} {
		for _, ss := range m.Settings {
			for _, s := range ss {
				explained[s.File] = true
			}
		}
	}
	bf := map[string]File{}
	for _, f := range b.Files {
		bf[f.Path] = f
	}
	var out []Change
	for _, f := range a.Files {
		g, ok := bf[f.Path]
		if f.Content == nil || !ok || g.Content == nil || explained[f.Path] || strings.HasPrefix(f.Path, UnitDir+"/") {
			continue
		}
		if !bytes.Equal(f.Content, g.Content) {
			comp := ""
			if len(f.Components) > 0 {
				comp = f.Components[0]
			}
			out = append(out, Change{Component: comp, Kind: "file", Op: "changed", Name: f.Path})
		}
	}
	return out
}
