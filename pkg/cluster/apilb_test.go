package cluster

import (
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/apilb"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/verify"
)

func TestLBVerdict(t *testing.T) {
	inv, err := inventory.Parse("inv.yaml", t.TempDir()+"/inv.yaml", []byte(`controlPlane:
  - {name: controller-1, address: 10.240.4.11}
  - {name: controller-2, address: 10.240.4.12}
  - {name: controller-3, address: 10.240.4.13}
workers:
  - {name: worker-1, address: 10.240.4.21}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Inv: inv}
	b := func(addr, st string) apilb.Backend { return apilb.Backend{Address: addr, Status: st} }
	const one, two, three = "10.240.4.11:6443", "10.240.4.12:6443", "10.240.4.13:6443"
	for _, tc := range []struct {
		name     string
		backends []apilb.Backend
		status   verify.Status
		msg      []string
		hint     string
	}{
		{"all up", []apilb.Backend{b(one, apilb.Up), b(two, apilb.Up), b(three, apilb.Up)}, verify.Pass,
			[]string{"3 backends, all passing", "controller-1 10.240.4.11:6443 UP, controller-2 10.240.4.12:6443 UP, controller-3 10.240.4.13:6443 UP"}, ""},
		{"one down", []apilb.Backend{b(one, apilb.Down), b(two, apilb.Up), b(three, apilb.Up)}, verify.Warn,
			[]string{"1 of 3 backends down", "controller-1 10.240.4.11:6443 DOWN"}, "the apiserver on controller-1 does not accept connections from worker-1"},
		{"all down", []apilb.Backend{b(one, apilb.Down), b(two, apilb.Down), b(three, apilb.Down)}, verify.Fail,
			[]string{"no backend passes the health check"}, "worker-1 reaches no apiserver on port 6443"},
		{"just started", []apilb.Backend{b(one, apilb.Unknown), b(two, apilb.Up), b(three, apilb.Up)}, verify.Warn,
			[]string{"not health-checked yet", "controller-1 10.240.4.11:6443 not checked yet"}, "just started"},
		{"stale config", []apilb.Backend{b(one, apilb.Up), b(two, apilb.Up), b("10.240.4.14:6443", apilb.Up)}, verify.Fail,
			[]string{"lacks 10.240.4.13:6443", "has 10.240.4.14:6443, which is not a control-plane host"}, "'hardway up' renders the backends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.lbVerdict("worker-1", tc.backends)
			if r.Status != tc.status || !strings.Contains(r.Hint, tc.hint) {
				t.Errorf("%s: %s (hint %q), want %s with hint %q", tc.name, r.Status, r.Hint, tc.status, tc.hint)
			}
			for _, m := range tc.msg {
				if !strings.Contains(r.Message, m) {
					t.Errorf("%s: message %q lacks %q", tc.name, r.Message, m)
				}
			}
		})
	}
}
