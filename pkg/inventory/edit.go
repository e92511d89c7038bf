package inventory

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Edit is one top-level scalar an edit changes: its key, the value before
// ("" when the file does not have the key) and after.
type Edit struct {
	Key, Old, New string
}

// SetTopLevel rewrites the top-level scalars of an inventory file in place,
// value by value on its own line, so the file keeps its comments, order,
// quoting and indentation ('hardway upgrade apply' moves the versions; a
// re-encoded file would be a diff of every line). A key in set that the
// file lacks is added only when add names it, after the cluster: line (or
// first); the others are left out, because a missing version follows the
// defaults of the Kubernetes version the file names. It returns the new
// bytes and the edits made (none: the file already says so).
func SetTopLevel(data []byte, set map[string]string, add []string) ([]byte, []Edit, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("parse the inventory: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("the inventory is not a mapping")
	}
	top := doc.Content[0]
	lines := strings.SplitAfter(string(data), "\n")
	var edits []Edit
	found := map[string]bool{}
	clusterLine := 0
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value == "cluster" {
			clusterLine = v.Line
		}
		want, ok := set[k.Value]
		if !ok {
			continue
		}
		found[k.Value] = true
		if v.Kind != yaml.ScalarNode {
			return nil, nil, fmt.Errorf("%s (line %d) is not a plain value", k.Value, v.Line)
		}
		if v.Value == want {
			continue
		}
		line := lines[v.Line-1]
		start := v.Column - 1
		n := len(v.Value)
		quoted := ""
		switch v.Style {
		case yaml.DoubleQuotedStyle:
			quoted = `"`
		case yaml.SingleQuotedStyle:
			quoted = `'`
		case 0, yaml.FlowStyle:
		default:
			return nil, nil, fmt.Errorf("%s (line %d): a block scalar, not a version", k.Value, v.Line)
		}
		n += 2 * len(quoted)
		if start+n > len(line) || line[start:start+n] != quoted+v.Value+quoted {
			return nil, nil, fmt.Errorf("%s (line %d): the value is written in a way this edit does not follow; set it to %s by hand", k.Value, v.Line, want)
		}
		lines[v.Line-1] = line[:start] + quoted + want + quoted + line[start+n:]
		edits = append(edits, Edit{Key: k.Value, Old: v.Value, New: want})
	}
	for _, key := range add {
		want, ok := set[key]
		if !ok || found[key] {
			continue
		}
		// After the cluster: line, or first: where the example puts it.
		at := clusterLine
		newLine := key + ": " + want + "\n"
		lines = slices.Insert(lines, at, newLine)
		if at > 0 && !strings.HasSuffix(lines[at-1], "\n") {
			lines[at-1] += "\n"
		}
		edits = append(edits, Edit{Key: key, New: want})
	}
	out := []byte(strings.Join(lines, ""))
	// What was written must read back as the values asked for.
	var check map[string]any
	if err := yaml.Unmarshal(out, &check); err != nil {
		return nil, nil, fmt.Errorf("the edited inventory does not parse (nothing written): %w", err)
	}
	for _, e := range edits {
		if fmt.Sprint(check[e.Key]) != e.New {
			return nil, nil, fmt.Errorf("the edited inventory reads %s as %v, not %s (nothing written)", e.Key, check[e.Key], e.New)
		}
	}
	if len(edits) == 0 {
		return bytes.Clone(data), nil, nil
	}
	return out, edits, nil
}
