package inventory

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// docs/inventory.md names every key the loader knows (in backquotes, as
// its tables do): a new key without a line in the reference fails here.
func TestDocsNameEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/inventory.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, span := range regexp.MustCompile("`[^`\n]+`").FindAllString(string(b), -1) {
		for _, w := range regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`).FindAllString(span, -1) {
			named[w] = true
		}
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				continue
			}
			if !named[key] {
				t.Errorf("docs/inventory.md does not name %s%s", path, key)
			}
			walk(f.Type, path+key+".")
		}
	}
	walk(reflect.TypeOf(Inventory{}), "")
	if len(seen) < 10 {
		t.Fatalf("walked %d types: the walk is broken", len(seen))
	}
}
