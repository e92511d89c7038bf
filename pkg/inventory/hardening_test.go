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
