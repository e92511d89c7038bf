package apilb

import (
	"slices"
	"strings"
	"testing"
)

// An answer of Traefik v3.7's /api/tcp/services, with one backend down and
// one not checked yet.
const answer = `[{"loadBalancer":{"servers":[{"address":"10.240.4.11:6443"},{"address":"10.240.4.12:6443"},{"address":"10.240.4.13:6443"}],
"healthCheck":{"interval":"2s","timeout":"1s"},"serversTransport":"kube-apiserver"},"status":"enabled","usedBy":["kube-apiserver@file"],
"serverStatus":{"10.240.4.11:6443":"DOWN","10.240.4.12:6443":"UP"},"name":"kube-apiserver@file","provider":"file","type":"loadbalancer"},
{"name":"other@file","status":"enabled","loadBalancer":{"servers":[]}}]`

func TestBackends(t *testing.T) {
	got, err := Backends([]byte(answer), "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	want := []Backend{{"10.240.4.11:6443", Down}, {"10.240.4.12:6443", Up}, {"10.240.4.13:6443", Unknown}}
	if !slices.Equal(got, want) {
		t.Errorf("backends %v, want %v", got, want)
	}
	missing, extra := Diff(got, []string{"10.240.4.12:6443", "10.240.4.13:6443", "10.240.4.14:6443"})
	if !slices.Equal(missing, []string{"10.240.4.14:6443"}) || !slices.Equal(extra, []string{"10.240.4.11:6443"}) {
		t.Errorf("diff: missing %v extra %v", missing, extra)
	}
	if m, e := Diff(got, []string{"10.240.4.11:6443", "10.240.4.12:6443", "10.240.4.13:6443"}); m != nil || e != nil {
		t.Errorf("diff of equal sets: %v %v", m, e)
	}
}

func TestBackendsErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`<html>`, "not the API's answer"},
		{`[{"name":"other@file","status":"enabled"}]`, "no TCP service kube-apiserver@file (the API lists [other@file])"},
		{`[{"name":"kube-apiserver@file","status":"disabled","error":["the service \"kube-apiserver@file\" does not exist"]}]`, "is disabled"},
		{`[{"name":"kube-apiserver@file","status":"enabled"}]`, "has no load balancer"},
	} {
		if _, err := Backends([]byte(tc.body), "kube-apiserver"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}
