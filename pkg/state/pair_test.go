package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/usererr"
)

// A process killed at any point of WritePair leaves the old pair or the new
// one once the next Lock ran: never the new key beside the old certificate
// (the state a killed `rotate ca` left in a CI run, which made the resumed
// rotation refuse its own etcd client certificate).
func TestWritePairKilledAtEachStep(t *testing.T) {
	oldCert, oldKey := "old cert\n", "old key\n"
	newCert, newKey := "new cert\n", "new key\n"
	for _, tc := range []struct {
		name string
		// what reached the disk before the kill
		record, key, cert bool
		want              string // "old" or "new"
	}{
		{name: "before the record", want: "old"},
		{name: "after the record", record: true, want: "new"},
		{name: "after the key", record: true, key: true, want: "new"},
		{name: "after the certificate", record: true, key: true, cert: true, want: "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Dir(filepath.Join(t.TempDir(), "state"))
			if err := d.WritePair("etcd-peer-a", []byte(oldCert), []byte(oldKey)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(d.pending("etcd-peer-a")); !os.IsNotExist(err) {
				t.Fatalf("a whole write left its record: %v", err)
			}
			if tc.record {
				b, _ := json.Marshal(pendingPair{Cert: newCert, Key: newKey})
				write(t, d.pending("etcd-peer-a"), string(b))
			}
			if tc.key {
				write(t, d.Key("etcd-peer-a"), newKey)
			}
			if tc.cert {
				write(t, d.Cert("etcd-peer-a"), newCert)
			}
			l, err := d.Lock(t.Context(), "test", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock()
			cert, key := read(t, d.Cert("etcd-peer-a")), read(t, d.Key("etcd-peer-a"))
			wantCert, wantKey := oldCert, oldKey
			if tc.want == "new" {
				wantCert, wantKey = newCert, newKey
			}
			if cert != wantCert || key != wantKey {
				t.Errorf("after Lock: cert %q key %q, want the %s pair", cert, key, tc.want)
			}
			if fi, err := os.Stat(d.Key("etcd-peer-a")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("key file: %v %v", fi, err)
			}
			if _, err := os.Stat(d.pending("etcd-peer-a")); !os.IsNotExist(err) {
				t.Errorf("the record is still there: %v", err)
			}
		})
	}
}

// A record damaged from outside is an error with a hint, the pair is left
// as it is, and the lock is not held.
func TestFinishPairsDamagedRecord(t *testing.T) {
	d := Dir(filepath.Join(t.TempDir(), "state"))
	if err := d.WritePair("admin", []byte("cert"), []byte("key")); err != nil {
		t.Fatal(err)
	}
	write(t, d.pending("admin"), `{"cert":"half`)
	_, err := d.Lock(t.Context(), "test", 0)
	if err == nil || !strings.Contains(err.Error(), "admin") || usererr.HintOf(err) == "" {
		t.Fatalf("Lock with a damaged record: %v (hint %q)", err, usererr.HintOf(err))
	}
	if read(t, d.Cert("admin")) != "cert" || read(t, d.Key("admin")) != "key" {
		t.Error("the pair changed")
	}
	os.Remove(d.pending("admin"))
	l, err := d.Lock(t.Context(), "test", 0)
	if err != nil {
		t.Fatalf("the failed Lock kept the lock: %v", err)
	}
	l.Unlock()
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
