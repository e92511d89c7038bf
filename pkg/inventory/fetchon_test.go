package inventory

import (
	"strings"
	"testing"
)

// fetchOn defaults to the operator, takes hosts, refuses anything else, and
// warns when every release URL is on the operator's disk (nothing for the
// hosts to fetch).
func TestFetchOn(t *testing.T) {
	inv, probs := parse(t, good)
	if len(probs) > 0 || inv.Releases.FetchOn != FetchOnOperator {
		t.Fatalf("default: %q %v", inv.Releases.FetchOn, probs)
	}
	inv, probs = parse(t, "releases:\n  fetchOn: hosts\n"+good)
	if len(probs) > 0 || inv.Releases.FetchOn != FetchOnHosts || len(inv.Warnings) != 0 {
		t.Fatalf("hosts: %q %v %v", inv.Releases.FetchOn, probs, inv.Warnings)
	}
	_, probs = parse(t, "releases:\n  fetchOn: laptop\n"+good)
	if len(probs) != 1 || probs[0].Path != "releases.fetchOn" || !strings.Contains(probs[0].Hint, "hosts (each host downloads") {
		t.Fatalf("bad value: %v", probs)
	}
	inv, probs = parse(t, "releases:\n  fetchOn: hosts\n  kubernetes: file:///m/k8s\n  etcd: file:///m/etcd\n"+good)
	if len(probs) > 0 || len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0].Msg, "pushed over SSH all the same") {
		t.Fatalf("file mirrors: %v %v", probs, inv.Warnings)
	}
}
