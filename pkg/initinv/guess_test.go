package initinv

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/usererr"
)

func TestRoles(t *testing.T) {
	for _, c := range []struct {
		n, controllers, workers int
		want                    int
		why                     string // a part of it
		err                     bool
	}{
		{n: 1, workers: -1, want: 1, why: "the one host runs the control plane; no workers, so no pods run"},
		{n: 2, workers: -1, want: 1, why: "one, not two"}, // never 2: etcd wants an odd count
		{n: 3, workers: -1, want: 3, why: "no workers, so no pods run: --workers N"},
		{n: 4, workers: -1, want: 3, why: "the other host is a worker"},
		{n: 7, workers: -1, want: 3, why: "the other 4 hosts are workers"},
		{n: 5, controllers: 1, workers: -1, want: 1, why: "--controllers 1"},
		{n: 5, controllers: 5, workers: -1, want: 5, why: "no workers"},
		{n: 5, workers: 2, want: 3, why: "the last 2 hosts are workers (--workers 2)"},
		{n: 3, workers: 0, want: 3, why: "no workers"},
		{n: 3, controllers: 4, workers: -1, err: true},
		{n: 3, workers: 3, err: true},
		{n: 3, controllers: 1, workers: 1, err: true},
	} {
		cp, why, err := Roles(c.n, c.controllers, c.workers)
		if c.err {
			if err == nil || usererr.CodeOf(err) != usererr.CodeUsage {
				t.Errorf("%+v: err %v, want a usage error", c, err)
			}
			continue
		}
		if err != nil || cp != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%+v: %d %q %v", c, cp, why, err)
		}
	}
}

func TestLabel(t *testing.T) {
	for in, want := range map[string]string{
		"node-1":                       "node-1",
		"Node_A":                       "node-a",
		"RPi 4 (kitchen)":              "rpi-4-kitchen",
		"--x--":                        "x",
		"___":                          "",
		"ÜBER":                         "ber",
		strings.Repeat("a", 70):        strings.Repeat("a", 63),
		strings.Repeat("a", 62) + "-b": strings.Repeat("a", 62),
	} {
		if got := Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	names, notes := Names(
		[]string{"ctl", "ctl", "CTL", "", "ctl-2", "___"},
		[]string{"a", "b", "c", "d", "e", "f"})
	if got, want := strings.Join(names, " "), "ctl ctl-2 ctl-3 host-4 ctl-2-2 host-6"; got != want {
		t.Errorf("names %s, want %s", got, want)
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{
		"name ctl-2 for b: ctl is a's already",
		"name ctl-3 for c: its host name \"CTL\" made a DNS-1123 label; ctl is a's already",
		"name host-4 for d: it has no host name",
		"name ctl-2-2 for e: ctl-2 is b's already",
		"name host-6 for f: its host name \"___\" gives no DNS-1123 label",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
	// A name at the length limit keeps its suffix inside 63.
	long := strings.Repeat("a", 63)
	names, _ = Names([]string{long, long}, []string{"a", "b"})
	if len(names[1]) != 63 || !strings.HasSuffix(names[1], "-2") {
		t.Errorf("%q", names[1])
	}
}

func nets(ps ...string) []Network {
	var out []Network
	for _, p := range ps {
		out = append(out, Network{Prefix: netip.MustParsePrefix(p).Masked(), Why: "test " + p})
	}
	return out
}

func TestPickRanges(t *testing.T) {
	for _, c := range []struct {
		name     string
		avoid    []Network
		pod, svc string
		why      string // a part of the pod's why
	}{
		{"nothing in the way: the defaults", nets("192.168.1.0/24", "10.0.0.11/32"), "10.200.0.0/16", "10.32.0.0/24", "the default: no host"},
		{"a host address in the pod default", nets("10.200.3.7/24"), "10.201.0.0/16", "10.32.0.0/24", "the default 10.200.0.0/16 overlaps 10.200.3.0/24 (test 10.200.3.7/24)"},
		{"a route into the service default", nets("10.32.0.0/16"), "10.200.0.0/16", "10.33.0.0/24", ""},
		{"the walk wraps around inside 10/8", nets("10.200.0.0/13", "10.208.0.0/12", "10.224.0.0/11"), "10.0.0.0/16", "10.32.0.0/24", ""},
		{"all of 10/8 routed: 172.16/12, then past docker's bridge", nets("10.0.0.0/8", "172.16.0.0/16"), "172.17.0.0/16", "172.18.0.0/24", ""},
		{"only 192.168 left", nets("10.0.0.0/8", "172.16.0.0/12"), "192.168.0.0/16", "", ""},
		// The lab's workers route the Services' range itself, bare: that
		// route is the range's, not a network in its way.
		{"a bare route of exactly the range", append(nets("10.0.0.0/24"), Network{Prefix: netip.MustParsePrefix("10.32.0.0/24"), Why: "w1's route", Bare: true}),
			"10.200.0.0/16", "10.32.0.0/24", ""},
		{"a bare route of more than the range", []Network{{Prefix: netip.MustParsePrefix("10.32.0.0/16"), Why: "w1's route", Bare: true}},
			"10.200.0.0/16", "10.33.0.0/24", ""},
		// A running cluster's pod bridge and pod routes are inside its
		// podCIDR: init on its hosts finds that range free.
		{"a running cluster's own pod networks", []Network{{Prefix: netip.MustParsePrefix("10.200.0.0/24"), Why: "w1's cni0", Own: true},
			{Prefix: netip.MustParsePrefix("10.200.1.0/24"), Why: "w1's pod route", Own: true}},
			"10.200.0.0/16", "10.32.0.0/24", "the default: no host"},
		{"a cluster's own network still keeps the services out", []Network{{Prefix: netip.MustParsePrefix("10.32.0.0/24"), Why: "w1's cni0", Own: true}},
			"10.200.0.0/16", "10.32.1.0/24", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, svc, err := PickRanges(c.avoid)
			if c.svc == "" {
				// The pod range takes all of 192.168/16: no /24 is left
				// for the services.
				if err == nil || !strings.Contains(usererr.HintOf(err), "by hand") {
					t.Fatalf("pod %v svc %v err %v, want no room", pod, svc, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pod.Prefix.String() != c.pod || svc.Prefix.String() != c.svc || !strings.Contains(pod.Why, c.why) {
				t.Errorf("pod %s (%s), svc %s (%s)", pod.Prefix, pod.Why, svc.Prefix, svc.Why)
			}
			for _, n := range c.avoid {
				if n.Bare && (n.Prefix == svc.Prefix || n.Prefix == pod.Prefix) {
					if !strings.Contains(svc.Why+pod.Why, n.Why+" is a route made for it (no gateway, no source address)") {
						t.Errorf("the bare route is not said: %s / %s", pod.Why, svc.Why)
					}
					continue
				}
				if n.Own && pod.Prefix.Contains(n.Prefix.Addr()) && !n.Prefix.Overlaps(svc.Prefix) {
					continue // the cluster's own pod network, inside its podCIDR
				}
				if n.Prefix.Overlaps(pod.Prefix) || n.Prefix.Overlaps(svc.Prefix) {
					t.Errorf("%s overlaps a chosen range", n.Prefix)
				}
			}
			if pod.Prefix.Overlaps(svc.Prefix) {
				t.Error("pod and service ranges overlap")
			}
		})
	}
}

func TestCandidatesCoverEverySpaceOnce(t *testing.T) {
	seen := map[netip.Prefix]bool{}
	first := ""
	for p := range candidates(netip.MustParsePrefix("10.200.0.0/16")) {
		if first == "" {
			first = p.String()
		}
		if seen[p] {
			t.Fatalf("%s twice", p)
		}
		seen[p] = true
	}
	// 256 /16s in 10/8 but the default, 16 in 172.16/12, 1 in 192.168/16.
	if len(seen) != 255+16+1 || first != "10.201.0.0/16" || seen[netip.MustParsePrefix("10.200.0.0/16")] {
		t.Errorf("%d candidates, first %s", len(seen), first)
	}
}

func TestArch(t *testing.T) {
	for _, c := range []struct {
		archs []string
		want  string
		mixed bool
	}{
		{[]string{"amd64", "amd64"}, "amd64", false},
		{[]string{"arm64"}, "arm64", false},
		{[]string{"arm64", "amd64", "amd64"}, "amd64", true},
		{[]string{"arm64", "amd64"}, "arm64", true}, // a tie: the first host's
		{[]string{"", "arm64"}, "arm64", false},     // armv7l: no binaries, not a vote
		{[]string{""}, "amd64", false},
	} {
		if got, mixed := Arch(c.archs); got != c.want || mixed != c.mixed {
			t.Errorf("%v: %s %v, want %s %v", c.archs, got, mixed, c.want, c.mixed)
		}
	}
}

func TestParseTargets(t *testing.T) {
	ts, err := ParseTargets([]string{"root@10.0.0.11", " pi@10.0.0.13:2222", "node.lan", "[fd00::5]:22", "fd00::6", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Spec: "root@10.0.0.11", User: "root", Host: "10.0.0.11"},
		{Spec: "pi@10.0.0.13:2222", User: "pi", Host: "10.0.0.13", Port: 2222},
		{Spec: "node.lan", Host: "node.lan"},
		{Spec: "[fd00::5]:22", Host: "fd00::5", Port: 22},
		{Spec: "fd00::6", Host: "fd00::6"},
	}
	if len(ts) != len(want) {
		t.Fatalf("%+v", ts)
	}
	for i := range want {
		if ts[i] != want[i] {
			t.Errorf("%d: %+v, want %+v", i, ts[i], want[i])
		}
	}
	for _, bad := range [][]string{
		{"@10.0.0.1"}, {"Root$@10.0.0.1"}, {"10.0.0.1:0"}, {"10.0.0.1:x"}, {"fe80::1%eth0"},
		{"10.0.0.1", "root@10.0.0.1"}, {""}, {"root@"},
	} {
		if _, err := ParseTargets(bad); err == nil || usererr.CodeOf(err) != usererr.CodeUsage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

func TestClusterRoute(t *testing.T) {
	for line, want := range map[string]bool{
		"10.200.1.0/24 via 10.240.4.22 dev eth0 proto 70":                true,
		"10.200.0.0/24 dev cni0 proto kernel scope link src 10.200.0.1":  true,
		"10.240.4.0/24 dev eth0 proto kernel scope link src 10.240.4.21": false,
		"10.32.0.0/24 dev eth0": false,
		"10.70.0.0/24 via 10.0.0.1 dev eth0 proto static metric 70": false,
	} {
		if got := clusterRoute(line); got != want {
			t.Errorf("clusterRoute(%q) = %v", line, got)
		}
	}
}
