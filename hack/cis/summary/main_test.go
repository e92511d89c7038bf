package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures are kube-bench v0.16.0's --json output (hardway-cis-1.12, with
// --skip 1.2.1 for an INFO) on a machine that is no hardway host, cut to a few
// checks a section, their counts redone, and actual_value and reason emptied:
// the statuses are that machine's, the shape is kube-bench's.
func TestLines(t *testing.T) {
	paths := []string{filepath.Join("testdata", "controller-1.json"), filepath.Join("testdata", "worker-1.json")}
	for _, tc := range []struct {
		fail bool
		want string
	}{
		{false, `controller-1 cis-1.12: 1 master PASS 2 FAIL 4 WARN 1 INFO 1 | 2 etcd PASS 4 FAIL 0 WARN 0 INFO 0 | 3 controlplane PASS 1 FAIL 0 WARN 4 INFO 0 | 5 policies PASS 0 FAIL 0 WARN 8 INFO 0 | total PASS 7 FAIL 4 WARN 13 INFO 1
worker-1 cis-1.12: 4 node PASS 2 FAIL 4 WARN 2 INFO 0 | total PASS 2 FAIL 4 WARN 2 INFO 0
`},
		{true, `controller-1 1.1.1 scored Ensure that the API server pod specification file permissions are set to 600 or more restrictive (Automated)
controller-1 1.1.2 scored Ensure that the API server pod specification file ownership is set to root:root (Automated)
controller-1 1.1.3 scored Ensure that the controller manager pod specification file permissions are set to 600 or more restrictive (Automated)
controller-1 1.1.4 scored Ensure that the controller manager pod specification file ownership is set to root:root (Automated)
worker-1 4.1.1 scored Ensure that the kubelet service file permissions are set to 600 or more restrictive (Automated)
worker-1 4.2.1 scored Ensure that the --anonymous-auth argument is set to false (Automated)
worker-1 4.2.2 scored Ensure that the --authorization-mode argument is not set to AlwaysAllow (Automated)
worker-1 4.2.3 scored Ensure that the --client-ca-file argument is set as appropriate (Automated)
`},
	} {
		var b bytes.Buffer
		if err := run(&b, paths, tc.fail); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("fail=%v:\n got %s\nwant %s", tc.fail, b.String(), tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "worker-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty object", `{}`, "no sections"},
		{"no-totals output", `[{"id":"4"}]`, "cannot unmarshal array"},
		{"cut short", string(good[:len(good)/2]), "unexpected EOF"},
		// kube-bench counted one more FAIL than there are checks that failed.
		{"section count", strings.Replace(string(good), `"total_fail": 4,`, `"total_fail": 5,`, 1), "section 4 node: the checks say PASS 2 FAIL 4 WARN 2 INFO 0, kube-bench's totals PASS 2 FAIL 5 WARN 2 INFO 0"},
		{"totals", replaceLast(string(good), `"total_pass": 2,`, `"total_pass": 3,`), "the sections add up to PASS 2 FAIL 4 WARN 2 INFO 0, kube-bench's Totals say PASS 3"},
		{"status", strings.Replace(string(good), `"status": "PASS"`, `"status": "SKIP"`, 1), `check 4.1.2: status "SKIP"`},
	} {
		_, err := Load(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
}

// replaceLast replaces the last old in s: the Totals come after the sections.
func replaceLast(s, old, new string) string {
	i := strings.LastIndex(s, old)
	if i < 0 {
		return s
	}
	return s[:i] + new + s[i+len(old):]
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{
		"/var/tmp/hardway/cis-results/20261203-1800/hwf-cp-1.json": "hwf-cp-1",
		"controller-1.json": "controller-1",
		"worker-1":          "worker-1",
	} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}
