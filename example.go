// Package hardway holds the files that ship inside the binary from the
// repository root: today, the commented example inventory that
// `hardway init` prints (kept at the root so readers find it there).
package hardway

import _ "embed"

// ExampleInventory is inventory.example.yaml.
//
//go:embed inventory.example.yaml
var ExampleInventory []byte
