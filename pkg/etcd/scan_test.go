package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/etcdtest"
)

// Scan reads every key under a prefix, page by page, at one revision: a
// key written after the first page is not part of the scan.
func TestScanPagesAtOneRevision(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli, err := New(Config{Endpoints: c.Clients, TLS: c.ClientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	etcdtest.WaitHealthy(t, 30*time.Second, func(ctx context.Context) error { return cli.Health(ctx, c.Clients[0]) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 7 {
		if err := cli.Put(ctx, fmt.Sprintf("/registry/secrets/ns/s%d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"/registry/secretsx", "/registry/services/a"} {
		if err := cli.Put(ctx, k, "other"); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err = cli.Scan(ctx, "/registry/secrets/", 3, func(k string, v []byte) error {
		if len(got) == 0 {
			// Written during the scan: not in its snapshot.
			if err := cli.Put(ctx, "/registry/secrets/ns/s9", "late"); err != nil {
				return err
			}
		}
		got = append(got, k+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[/registry/secrets/ns/s0=v0 /registry/secrets/ns/s1=v1 /registry/secrets/ns/s2=v2 /registry/secrets/ns/s3=v3 " +
		"/registry/secrets/ns/s4=v4 /registry/secrets/ns/s5=v5 /registry/secrets/ns/s6=v6]"
	if fmt.Sprint(got) != want {
		t.Errorf("scan:\n%v\nwant\n%s", got, want)
	}
}
