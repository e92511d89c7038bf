package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The bounds are inclusive, and the largest values still parse exactly.
func TestValidityBounds(t *testing.T) {
	inv, probs := parse(t, "pki:\n  caValidity: 100y\n  leafValidity: 10y\n"+good)
	if len(probs) > 0 {
		t.Fatalf("%v", probs)
	}
	if inv.PKI.CAValidity.D() != MaxCAValidity || inv.PKI.LeafValidity.D() != MaxLeafValidity {
		t.Errorf("ca %v leaf %v", inv.PKI.CAValidity.D(), inv.PKI.LeafValidity.D())
	}
	if _, probs := parse(t, "pki:\n  caValidity: 1d\n  leafValidity: 1h\n"+good); len(probs) > 0 {
		t.Errorf("minimums: %v", probs)
	}
	for _, s := range []string{"585y", "600y", "106752d", "2562048h", "9223372036854775808y"} {
		if _, err := ParseDuration(s); !errors.Is(err, ErrTooLong) {
			t.Errorf("%s: %v", s, err)
		}
	}
	for s, want := range map[string]time.Duration{"292y": 292 * 365 * 24 * time.Hour, "106751d": 106751 * 24 * time.Hour, "2562047h": 2562047 * time.Hour} {
		if d, err := ParseDuration(s); err != nil || d != want {
			t.Errorf("%s: %v %v", s, d, err)
		}
	}
}

// Plain http is refused unless releases.allowHTTP says so (then a warning);
// https and file are fine.
func TestPlainHTTPMirrors(t *testing.T) {
	src := "releases:\n  kubernetes: http://mirror.lab/k8s\n  etcd: https://mirror.lab/etcd\n  runc: file:///m/runc\n" +
		"images:\n  - name: hardway.local/x:v1\n    url: http://mirror.lab/x.tar\n" + good
	_, probs := parse(t, src)
	if len(probs) != 2 || probs[0].Path != "releases.kubernetes" || probs[1].Path != "images[0].url" ||
		!strings.Contains(probs[0].Msg, "plain http") || !strings.Contains(probs[0].Hint, "releases.allowHTTP: true") {
		t.Fatalf("%v", probs)
	}
	inv, probs := parse(t, strings.Replace(src, "releases:\n", "releases:\n  allowHTTP: true\n", 1))
	if len(probs) > 0 {
		t.Fatalf("%v", probs)
	}
	if len(inv.Warnings) != 2 || !strings.Contains(inv.Warnings[0].Msg, "allowed by releases.allowHTTP") {
		t.Errorf("warnings %v", inv.Warnings)
	}
}

// IPv6 zones and user names a shell would read are refused wherever they
// can be written; plain IPv6 and ordinary user names are fine.
func TestZonesAndUserNames(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"controlPlane:\n  - {name: c1, address: \"fe80::1%eth0\"}\n", `controlPlane[0].address: "fe80::1%eth0" has an IPv6 zone`},
		{"controlPlane:\n  - {name: c1, address: 10.240.0.11, internalAddress: \"fe80::2%25eth1\"}\n", `controlPlane[0].internalAddress: "fe80::2%25eth1" has an IPv6 zone`},
		{"ssh:\n  user: \"root; rm -rf /\"\n" + good, `ssh.user: "root; rm -rf /" is not a safe user name`},
		{"ssh:\n  user: \"$(id)\"\n" + good, `ssh.user: "$(id)" is not a safe user name`},
		{"ssh:\n  user: Admin\n" + good, `ssh.user: "Admin" is not a safe user name`},
		{"ssh:\n  user: -oProxyCommand=x\n" + good, `ssh.user: "-oProxyCommand=x" is not a safe user name`},
		{"ssh:\n  bastion: \"a b@jump:22\"\n" + good, `ssh.bastion: "a b" is not a safe user name`},
		{"ssh:\n  bastion: \"[fe80::1%eth0]:22\"\n" + good, `ssh.bastion: "[fe80::1%eth0]:22" has an IPv6 zone`},
		{"controlPlane:\n  - {name: c1, address: 10.240.0.11, ssh: {user: \"x'y\"}}\n", `controlPlane[0].ssh.user: "x'y" is not a safe user name`},
	} {
		_, probs := parse(t, tc.src)
		found := false
		for _, p := range probs {
			found = found || strings.Contains(p.String(), tc.want)
		}
		if !found {
			t.Errorf("%q: want %q in %v", tc.src, tc.want, probs)
		}
	}
	ok := "ssh:\n  user: deploy_01\n  bastion: ops-user@jump.example.org:2222\ncontrolPlane:\n  - {name: c1, address: \"fd00::11\", ssh: {user: _svc-k8s}}\n  - {name: c2, address: \"2001:db8::12\"}\n  - {name: c3, address: 10.240.0.13}\n"
	if _, probs := parse(t, ok); len(probs) > 0 {
		t.Errorf("%v", probs)
	}
}
