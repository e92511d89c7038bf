package addons

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
)

func labInventory(t *testing.T, extra string) *inventory.Inventory {
	t.Helper()
	src := "controlPlane:\n  - {name: c1, address: 10.240.0.11}\nworkers:\n  - {name: w1, address: 10.240.0.21}\n" + extra
	inv, err := inventory.Parse("inv.yaml", "inv.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestCoreDNSRender(t *testing.T) {
	inv := labInventory(t, "network: {clusterDomain: home.arpa}\nimages:\n  - {name: registry.k8s.io/coredns/coredns:v1.99.0, url: 'file:///m/c.tar', sha256: "+strings.Repeat("ab", 32)+"}\n")
	text, objs, err := CoreDNS(CoreDNSFor(inv))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, o := range objs {
		refs = append(refs, o.Ref())
	}
	want := "ServiceAccount kube-system/coredns,ClusterRole system:coredns,ClusterRoleBinding system:coredns,ConfigMap kube-system/coredns,Service kube-system/kube-dns,Deployment kube-system/coredns"
	if strings.Join(refs, ",") != want {
		t.Errorf("objects %s, want %s", strings.Join(refs, ","), want)
	}
	s := string(text)
	for _, w := range []string{"kubernetes home.arpa in-addr.arpa ip6.arpa", "clusterIP: 10.32.0.10", "image: registry.k8s.io/coredns/coredns:v1.99.0",
		"imagePullPolicy: IfNotPresent", "path: /ready, port: 8181", "replicas: 2", "topologyKey: kubernetes.io/hostname", "    loop\n", "    reload\n", "cache 30"} {
		if !strings.Contains(s, w) {
			t.Errorf("rendered CoreDNS lacks %q", w)
		}
	}
	if strings.Contains(s, "forward") && !strings.Contains(s, "no forward") {
		t.Errorf("forward without dns.upstream:\n%s", s)
	}
	if strings.Contains(s, "{{") || strings.Contains(s, "<no value>") {
		t.Errorf("unrendered template:\n%s", s)
	}

	inv = labInventory(t, "dns: {upstream: [10.240.0.1, '10.240.0.2:5353']}\n")
	text, _, err = CoreDNS(CoreDNSFor(inv))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "forward . 10.240.0.1 10.240.0.2:5353 {") {
		t.Errorf("no forward to the upstream:\n%s", text)
	}
	if got := ImageFor(inv); got != CoreDNSImage {
		t.Errorf("image without images: %s", got)
	}
	inv = labInventory(t, "dns: {image: 'r.example/dns:v2'}\n")
	if got := ImageFor(inv); got != "r.example/dns:v2" {
		t.Errorf("dns.image not used: %s", got)
	}
}

// Apply creates everything, Diff then finds nothing; a scale to 0 and a
// Service on another address are found and put back.
func TestCoreDNSApplyDiff(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	_, objs, err := CoreDNS(CoreDNSFor(labInventory(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Diff(ctx, cs, objs)
	if err != nil || len(d) != len(objs) || !strings.HasSuffix(d[0], " missing") {
		t.Fatalf("diff on an empty cluster: %v %q", err, d)
	}
	if err := Apply(ctx, cs, objs); err != nil {
		t.Fatal(err)
	}
	if d, err := Diff(ctx, cs, objs); err != nil || len(d) != 0 {
		t.Fatalf("diff after apply: %v %q", err, d)
	}

	dep, _ := cs.AppsV1().Deployments(DNSNamespace).Get(ctx, DNSDeployment, metav1.GetOptions{})
	zero := int32(0)
	dep.Spec.Replicas = &zero
	cs.AppsV1().Deployments(DNSNamespace).Update(ctx, dep, metav1.UpdateOptions{})
	cs.CoreV1().Services(DNSNamespace).Delete(ctx, DNSService, metav1.DeleteOptions{})
	cs.CoreV1().Services(DNSNamespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: DNSService, Namespace: DNSNamespace},
		Spec: corev1.ServiceSpec{ClusterIP: "10.32.0.99"}}, metav1.CreateOptions{})
	d, err = Diff(ctx, cs, objs)
	all := strings.Join(d, "\n")
	if err != nil || !strings.Contains(all, "Deployment kube-system/coredns: spec.replicas is 0, want 2") ||
		!strings.Contains(all, `spec.clusterIP is "10.32.0.99", want "10.32.0.10"`) {
		t.Fatalf("diff after scale and move: %v\n%s", err, all)
	}
	if err := Apply(ctx, cs, objs); err != nil {
		t.Fatal(err)
	}
	if d, err := Diff(ctx, cs, objs); err != nil || len(d) != 0 {
		t.Fatalf("diff after the second apply: %v %q", err, d)
	}
	svc, _ := cs.CoreV1().Services(DNSNamespace).Get(ctx, DNSService, metav1.GetOptions{})
	if svc.Spec.ClusterIP != "10.32.0.10" {
		t.Errorf("Service on %s", svc.Spec.ClusterIP)
	}
}

func TestSubset(t *testing.T) {
	want := map[string]any{"a": map[string]any{"b": 1.0, "c": []any{"x"}}}
	live := map[string]any{"a": map[string]any{"b": 1.0, "c": []any{"x"}, "extra": true}, "status": "ok"}
	if d := subset("", want, live); len(d) != 0 {
		t.Errorf("extra live fields count as differences: %q", d)
	}
	live = map[string]any{"a": map[string]any{"b": 2.0, "c": []any{"x", "y"}}}
	if d := strings.Join(subset("", want, live), ";"); !strings.Contains(d, "a.b is 2, want 1") || !strings.Contains(d, `a.c is ["x","y"], want ["x"]`) {
		t.Errorf("differences: %s", d)
	}
}
