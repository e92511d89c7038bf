package inventory

import (
	"strings"
	"testing"
)

func TestDNS(t *testing.T) {
	inv, probs := parse(t, "dns:\n  upstream: [10.240.0.1, \"10.240.0.2:5353\"]\n  image: registry.k8s.io/coredns/coredns:v1.14.7\n"+good)
	if probs != nil {
		t.Fatalf("unexpected problems: %v", probs)
	}
	if len(inv.DNS.Upstream) != 2 || inv.DNS.Image == "" {
		t.Errorf("dns: %+v", inv.DNS)
	}
	for _, tc := range []struct{ src, want string }{
		{"dns:\n  upstream: [resolver.local]\n", `2:14: dns.upstream[0]: "resolver.local" is not an IP address`},
		{"dns:\n  upstream: [\"10.0.0.1:0\"]\n", `dns.upstream[0]: "10.0.0.1:0" is not an IP address`},
		{"dns:\n  image: coredns\n", `2:10: dns.image: "coredns" is not an image name with a tag`},
		{"dns:\n  upstrem: [10.0.0.1]\n", `2:3: dns.upstrem: unknown key`},
	} {
		_, probs := parse(t, tc.src+good)
		var all []string
		found := false
		for _, p := range probs {
			s := strings.TrimPrefix(p.String(), "inv.yaml:")
			all = append(all, s)
			found = found || strings.Contains(s, tc.want)
		}
		if !found {
			t.Errorf("want a problem containing %q, got:\n  %s", tc.want, strings.Join(all, "\n  "))
		}
	}
}
