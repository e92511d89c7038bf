package pki

import (
	"context"
	"crypto/x509"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
)

// baseInventory has three control-plane hosts (one with a separate internal
// address) and two workers.
const baseInventory = `cluster: test
pki:
  algorithm: ALG
  caValidity: 10y
  leafValidity: 365d
network:
  apiServerEndpoint: api.example.test:443
controlPlane:
  - name: cp-0
    address: 192.0.2.10
    internalAddress: 10.0.0.10
  - name: cp-1
    address: 192.0.2.11
  - name: cp-2
    address: 192.0.2.12
workers:
  - name: w-0
    address: 192.0.2.20
  - name: w-1
    address: 192.0.2.21
`

// loadInventory writes text (with ALG replaced) next to a fresh state
// directory and loads it as the CLI would.
func loadInventory(t testing.TB, text, alg string) (*inventory.Inventory, state.Dir) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, "ALG", alg)), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(p)
	if err != nil {
		t.Fatalf("load inventory: %v", err)
	}
	return inv, state.Dir(inv.DefaultStateDir())
}

// reload loads text into the existing inventory path (state stays).
func reload(t testing.TB, inv *inventory.Inventory, text, alg string) *inventory.Inventory {
	t.Helper()
	if err := os.WriteFile(inv.Path, []byte(strings.ReplaceAll(text, "ALG", alg)), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := inventory.Load(inv.Path)
	if err != nil {
		t.Fatalf("load inventory: %v", err)
	}
	return n
}

func generate(t testing.TB, inv *inventory.Inventory, dir state.Dir, opts Options) []Result {
	t.Helper()
	rs, err := Generate(context.Background(), inv, dir, opts)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return rs
}

func byName(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.Kind+"/"+r.Name] = r
	}
	return m
}

type fileState struct {
	data  string
	mode  fs.FileMode
	mtime time.Time
}

// snapshot records every file under root: content, mode and mtime.
func snapshot(t testing.TB, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var data []byte
		if !d.IsDir() {
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		m[p] = fileState{string(data), fi.Mode(), fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readCert(t testing.TB, dir state.Dir, name string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(dir.Cert(name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCert(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}
