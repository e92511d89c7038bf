package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/usererr"
)

// Problem is one thing wrong (or worth a warning) in an inventory, at a position.
type Problem struct {
	File    string
	Line    int
	Col     int
	Path    string // "controlPlane[2].address"; "" for the whole file
	Msg     string
	Hint    string
	Warning bool
}

func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", p.File, p.Line, p.Col)
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	if p.Warning {
		b.WriteString("warning: ")
	}
	b.WriteString(p.Msg)
	if p.Hint != "" {
		b.WriteString(" (hint: " + p.Hint + ")")
	}
	return b.String()
}

// ValidationError lists every problem found in an inventory, sorted by position.
type ValidationError struct {
	File     string
	Problems []Problem // errors only; warnings stay on the Inventory
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	n := len(e.Problems)
	fmt.Fprintf(&b, "%s: %d problem", e.File, n)
	if n != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Load reads, defaults and validates the inventory at path. An invalid
// inventory returns a *usererr.Error with code 3 wrapping a *ValidationError.
func Load(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usererr.WithCode(fmt.Errorf("read inventory: %w", err), usererr.CodeInventory,
			"pass the inventory with -i FILE; 'hardway init > inventory.yaml' writes a commented one")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("inventory path: %w", err)
	}
	return Parse(path, abs, data)
}

// Parse is Load for data already read. display is the name used in
// messages (what the user typed); abs is where relative paths resolve from.
func Parse(display, abs string, data []byte) (*Inventory, error) {
	l := &loader{file: display, pos: map[string]*yaml.Node{}}
	inv := l.parse(data)
	if inv != nil {
		inv.Path = abs
		inv.applyDefaults()
		l.validate(inv)
	}
	var errs, warns []Problem
	for _, p := range l.problems {
		if p.Warning {
			warns = append(warns, p)
		} else {
			errs = append(errs, p)
		}
	}
	sortProblems(errs)
	sortProblems(warns)
	if len(errs) > 0 {
		return nil, usererr.WithCode(&ValidationError{File: display, Problems: errs}, usererr.CodeInventory,
			"fix the lines above and run again; every problem is listed at once")
	}
	inv.Warnings = warns
	return inv, nil
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		if ps[i].Col != ps[j].Col {
			return ps[i].Col < ps[j].Col
		}
		return ps[i].Path < ps[j].Path
	})
}

type loader struct {
	file     string
	pos      map[string]*yaml.Node // field path -> value node
	problems []Problem
}

// at returns the position of path, falling back to its closest ancestor
// that is in the file (a defaulted field is reported where its parent is).
func (l *loader) at(path string) (line, col int) {
	for p := path; ; {
		if n, ok := l.pos[p]; ok {
			return n.Line, n.Column
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 1, 1
}

func (l *loader) add(warning bool, path, hint, format string, args ...any) {
	line, col := l.at(path)
	l.problems = append(l.problems, Problem{File: l.file, Line: line, Col: col, Path: path,
		Msg: fmt.Sprintf(format, args...), Hint: hint, Warning: warning})
}

func (l *loader) errorf(path, hint, format string, args ...any) {
	l.add(false, path, hint, format, args...)
}
func (l *loader) warnf(path, hint, format string, args ...any) {
	l.add(true, path, hint, format, args...)
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func (l *loader) parse(data []byte) *Inventory {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		l.yamlError(err, "the file is not valid YAML; check indentation (spaces, not tabs) near that line")
		return nil
	}
	if root.Kind == 0 || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		l.errorf("", "start from 'hardway init', which writes a commented example", "the inventory must be a YAML mapping with at least controlPlane")
		return nil
	}
	doc := root.Content[0]
	l.pos[""] = doc
	l.walk(doc, reflect.TypeOf(Inventory{}), "")
	// Decode even when the walk found problems: yaml.v3 keeps going past
	// unknown fields and type errors, so the rest of the file is still
	// validated and the user sees every problem in one run.
	var inv Inventory
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&inv); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			l.yamlError(err, "")
			return nil
		}
		flagged := map[int]bool{}
		for _, p := range l.problems {
			flagged[p.Line] = true
		}
		var rest []string
		for _, m := range te.Errors {
			if sm := lineRE.FindStringSubmatch(m); sm != nil {
				if n, _ := strconv.Atoi(sm[1]); flagged[n] {
					continue // the walk said it already, with a column
				}
			}
			rest = append(rest, m)
		}
		if len(rest) > 0 {
			l.yamlError(&yaml.TypeError{Errors: rest}, "")
		}
	}
	return &inv
}

// yamlError turns yaml.v3's "line N: msg" errors (one or many) into problems.
func (l *loader) yamlError(err error, hint string) {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	for _, m := range msgs {
		line, col, path := 1, 1, ""
		if sm := lineRE.FindStringSubmatch(m); sm != nil {
			line, _ = strconv.Atoi(sm[1])
			m = sm[2]
			// Find the field at that line for a column and a path.
			for p, n := range l.pos {
				if n.Line == line && (path == "" || len(p) > len(path)) {
					path, col = p, n.Column
				}
			}
		}
		m = strings.TrimPrefix(m, "yaml: ")
		l.problems = append(l.problems, Problem{File: l.file, Line: line, Col: col, Path: path, Msg: m, Hint: hint})
	}
}

// walk records the position of every field and reports unknown keys and
// nodes of the wrong kind, comparing the node tree with the Go type.
func (l *loader) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if path != "" {
		l.pos[path] = n
	}
	if t == reflect.TypeOf(Duration(0)) {
		if n.Kind != yaml.ScalarNode {
			l.errorf(path, "write a duration such as 8760h, 365d or 10y", "must be a duration")
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.MappingNode {
			l.errorf(path, "", "must be a mapping (key: value lines), not %s", kindName(n))
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = f.Type
			names = append(names, tag)
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := joinPath(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				hint := "remove it, or check the spelling"
				if s := closest(k.Value, names); s != "" {
					hint = fmt.Sprintf("did you mean %q?", s)
				}
				l.problems = append(l.problems, Problem{File: l.file, Line: k.Line, Col: k.Column, Path: kp,
					Msg: "unknown key", Hint: hint})
				continue
			}
			if seen[k.Value] {
				l.problems = append(l.problems, Problem{File: l.file, Line: k.Line, Col: k.Column, Path: kp,
					Msg: "key appears twice", Hint: "keep one of them"})
				continue
			}
			seen[k.Value] = true
			l.walk(v, ft, kp)
		}
	case reflect.Slice:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.SequenceNode {
			l.errorf(path, "write one '- name: ...' item per host", "must be a list, not %s", kindName(n))
			return
		}
		for i, c := range n.Content {
			l.walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			l.errorf(path, "", "must be a single value, not %s", kindName(n))
			return
		}
		switch t.Kind() {
		case reflect.Int:
			if _, err := strconv.Atoi(n.Value); err != nil {
				l.errorf(path, "", "%q is not a whole number", n.Value)
			}
		case reflect.Bool:
			if _, err := strconv.ParseBool(n.Value); err != nil {
				l.errorf(path, "write true or false", "%q is not true or false", n.Value)
			}
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("the value %q", n.Value)
	}
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// closest returns the candidate within edit distance 2 of s (case folded), if any.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
