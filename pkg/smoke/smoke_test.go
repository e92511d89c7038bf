package smoke

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/verify"
)

func fakeEnv(cs *fake.Clientset, raw string) Env {
	return Env{Kube: cs, Provider: "secretbox", Domain: "cluster.local", PauseImage: "registry.k8s.io/pause:3.10.2",
		Workers: []inventory.Host{{Name: "w1", Address: "10.240.0.21"}},
		EtcdGet: func(context.Context, string) ([]byte, error) { return []byte(raw), nil }}
}

// A pod that never gets ready (no kubelet behind the fake): the deployment
// step fails with its hint, the steps that need the pod say they did not
// run, and the namespace is removed all the same.
func TestRunFailsAndCleansUp(t *testing.T) {
	cs := fake.NewClientset()
	var lines []string
	rep := Run(context.Background(), fakeEnv(cs, "k8s:enc:secretbox:v1:key1:\x00\x01opaque"), Options{Timeout: time.Second,
		Progress: func(r verify.Result) { lines = append(lines, string(r.Status)+" "+r.Check+" "+r.Message) }})
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"pass smoke/namespace namespace hardway-smoke created",
		"pass smoke/secret Secret hardway-smoke/hardway-smoke is stored in etcd as k8s:enc:secretbox:v1:key1:…",
		"fail smoke/deployment Deployment hardway-smoke/hardway-smoke not running after 1s",
		"fail smoke/dns not run: no pod is running",
		"pass smoke/cleanup namespace hardway-smoke deleted",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("results lack %q:\n%s", want, got)
		}
	}
	if rep.OK() || rep.Fail != 6 || len(rep.Results) != 9 {
		t.Errorf("report: %d pass %d fail, %d results", rep.Pass, rep.Fail, len(rep.Results))
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace left behind: %v", err)
	}
}

// A Secret stored in plain text fails, naming the fix; a namespace a
// killed run left is removed first; an interrupt still cleans up.
func TestRunPlainSecretLeftoverAndInterrupt(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}})
	ctx, cancel := context.WithCancel(context.Background())
	var res []verify.Result
	rep := Run(ctx, fakeEnv(cs, "k8s\x00plain hardway-smoke-"), Options{Timeout: time.Minute, Progress: func(r verify.Result) {
		res = append(res, r)
		if r.Check == "smoke/secret" {
			cancel() // ^C while the Deployment is waited for
		}
	}})
	if len(res) < 3 || res[0].Status != verify.Pass || res[1].Check != "smoke/secret" || res[1].Status != verify.Fail ||
		!strings.Contains(res[1].Message, "does not start with") && !strings.Contains(res[1].Message, "starts") {
		t.Fatalf("results: %+v", res)
	}
	if !strings.Contains(res[1].Hint, "encryption") {
		t.Errorf("secret hint: %q", res[1].Hint)
	}
	last := rep.Results[len(rep.Results)-1]
	if last.Check != "smoke/cleanup" || last.Status != verify.Pass || rep.Duration > 30*time.Second {
		t.Errorf("after an interrupt: %+v in %s", last, rep.Duration)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace left behind: %v", err)
	}
}

func TestImageHint(t *testing.T) {
	if h := imageHint("nginx:1.27", 8080, []string{"pod x on w1: ErrImageNeverPull: ..."}); !strings.Contains(h, "images:") {
		t.Errorf("missing image: %s", h)
	}
	if h := imageHint("busybox:1.37", 8080, []string{"pod x on w1: running, not ready (readiness probe)"}); !strings.Contains(h, "nothing listens on port 8080") {
		t.Errorf("no server: %s", h)
	}
}
