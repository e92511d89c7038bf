package units

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
	"gopkg.in/yaml.v3"
)

// Setting is one key of a rendered config file with why it is there (for
// 'hardway render --explain'), as Flag is for a command line.
type Setting struct {
	File   string // the config file's path on the host
	Key    string // "authentication.x509.clientCAFile"; TOML: "<table>.<key>"
	Value  any    // string, bool, int or []string
	Reason string
}

// Text is "key=value" as --explain prints it.
func (s Setting) Text() string { return s.Key + "=" + valueText(s.Value) }

func valueText(v any) string {
	switch x := v.(type) {
	case []string:
		return "[" + strings.Join(x, ",") + "]"
	default:
		return fmt.Sprint(x)
	}
}

// settingDef is a row of a config file's table. when gates it by the
// component's version like a flagDef; table is the TOML table ("" for YAML,
// whose key is a dotted path).
type settingDef struct {
	when   string
	table  string
	key    string
	value  any
	reason string
}

func selectSettings(component, file string, defs []settingDef, v *version.Version) ([]Setting, error) {
	core := v.Core()
	var out []Setting
	seen := map[string]bool{}
	for _, d := range defs {
		if d.when != "" {
			c, err := version.NewConstraint(d.when)
			if err != nil {
				return nil, fmt.Errorf("%s %s: constraint %q: %w", component, d.key, d.when, err)
			}
			if !c.Check(core) {
				continue
			}
		}
		key := d.key
		if d.table != "" {
			key = d.table + "." + d.key
		}
		if seen[key] {
			return nil, fmt.Errorf("%s %s: %s set twice", component, file, key)
		}
		seen[key] = true
		switch d.value.(type) {
		case string, bool, int, []string, map[string]string:
		default:
			return nil, fmt.Errorf("%s %s: %s: unsupported value %T", component, file, key, d.value)
		}
		out = append(out, Setting{File: file, Key: key, Value: d.value, Reason: d.reason})
	}
	return out, nil
}

// yamlDoc lays settings out as a YAML document under a header of fixed
// keys (apiVersion, kind): nested mappings follow the dotted keys, in the
// settings' order.
func yamlDoc(header [][2]string, settings []Setting) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, h := range header {
		root.Content = append(root.Content, str(h[0]), str(h[1]))
	}
	for _, s := range settings {
		m := root
		parts := strings.Split(s.Key, ".")
		for _, p := range parts[:len(parts)-1] {
			m = child(m, p)
		}
		m.Content = append(m.Content, str(parts[len(parts)-1]), valueNode(s.Value))
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// child is the mapping under key in m, made if missing.
func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	c := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, str(key), c)
	return c
}

func valueNode(v any) *yaml.Node {
	switch x := v.(type) {
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x)}
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, s := range x {
			n.Content = append(n.Content, str(s))
		}
		return n
	case map[string]string:
		// A map whose keys hold dots (evictionHard's imagefs.available):
		// one setting, its keys in order.
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n.Content = append(n.Content, str(k), str(x[k]))
		}
		return n
	default:
		return str(fmt.Sprint(x))
	}
}

// tomlDoc lays settings out as TOML: top-level keys first, then one
// [table] per table in the order the tables first appear.
func tomlDoc(header string, defs []Setting, tables []string) []byte {
	var b strings.Builder
	b.WriteString(header)
	byTable := map[string][]Setting{}
	for _, s := range defs {
		t, k := splitTOMLKey(s.Key, tables)
		byTable[t] = append(byTable[t], Setting{Key: k, Value: s.Value})
	}
	for _, s := range byTable[""] {
		fmt.Fprintf(&b, "%s = %s\n", s.Key, tomlValue(s.Value))
	}
	for _, t := range tables {
		if len(byTable[t]) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n[%s]\n", t)
		for _, s := range byTable[t] {
			fmt.Fprintf(&b, "  %s = %s\n", s.Key, tomlValue(s.Value))
		}
	}
	return []byte(b.String())
}

// splitTOMLKey finds the longest table that prefixes key.
func splitTOMLKey(key string, tables []string) (table, leaf string) {
	best := ""
	for _, t := range tables {
		if strings.HasPrefix(key, t+".") && len(t) > len(best) && !strings.Contains(key[len(t)+1:], ".") {
			best = t
		}
	}
	if best == "" {
		return "", key
	}
	return best, key[len(best)+1:]
}

func tomlValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	default:
		return fmt.Sprint(x)
	}
}

// tomlTables are the tables of defs, in order of first appearance.
func tomlTables(defs []settingDef) []string {
	var out []string
	for _, d := range defs {
		if d.table != "" && !slices.Contains(out, d.table) {
			out = append(out, d.table)
		}
	}
	return out
}
