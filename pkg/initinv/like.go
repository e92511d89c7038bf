package initinv

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/hardway/hardway/pkg/inventory"
)

// Like is the inventory of --like: every setting of the new file but the
// hosts, the pod and service ranges and arch comes from it, with its
// comments (a lab's or an air-gapped site's mirrors, registries, images
// and versions).
type Like struct {
	Path string
	Inv  *inventory.Inventory // loaded: defaults filled in, validated
	data []byte               // the file as written, comments included
}

// doc is the file's node tree, parsed anew for each use: the writer edits
// it.
func (l *Like) doc() (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(l.data, &doc); err != nil {
		return nil, fmt.Errorf("--like %s: %w", l.Path, err) // Load parsed it: not reached
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("--like %s: not a mapping", l.Path) // Load accepted it: not reached
	}
	return &doc, nil
}

// LoadLike loads path with the inventory loader: a broken file is refused
// with every problem at its line, as any command would.
func LoadLike(path string) (*Like, error) {
	inv, err := inventory.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--like: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--like: %w", err)
	}
	return &Like{Path: path, Inv: inv, data: data}, nil
}
