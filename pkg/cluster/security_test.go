package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/verify"
)

func TestAuditVerdict(t *testing.T) {
	for _, tc := range []struct {
		out    string
		status verify.Status
		msg    string
	}{
		{"1000\n2048 990\n", verify.Pass, "written 10s ago (2 KiB)"},
		{"1000\n2048 1003\n", verify.Pass, "written 0s ago"}, // the host's clock just behind the file's
		{"1000\nmissing\n", verify.Fail, "no audit log"},
		{"1000\n0 999\n", verify.Fail, "is empty"},
		{"10000\n2048 1000\n", verify.Fail, "last written 2h30m0s ago"},
		{"garbage", verify.Fail, "unexpected output"},
	} {
		r := auditVerdict("controller-1", tc.out)
		if r.Status != tc.status || !strings.Contains(r.Message, tc.msg) {
			t.Errorf("%q: %s %q, want %s %q", tc.out, r.Status, r.Message, tc.status, tc.msg)
		}
		if r.Status == verify.Fail && tc.status == verify.Fail && tc.msg != "unexpected output" && r.Hint == "" {
			t.Errorf("%q: no hint", tc.out)
		}
	}
}

// The Pod Security check's verdict follows what the apiserver answered to
// its dry run, and the dry run is one: nothing is stored.
func TestCheckPodSecurity(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "hardway-verify-privileged",
		errString(`violates PodSecurity "baseline:latest": privileged (container "probe" must not set securityContext.privileged=true)`))
	defer func(d time.Duration) { saWait = d }(saWait)
	saWait = 2 * time.Second
	for _, tc := range []struct {
		name    string
		level   string
		answer  error
		nsLabel string
		status  verify.Status
		msg     string
		noSA    bool
	}{
		{name: "a cluster just made, no default ServiceAccount yet", level: inventory.PodSecurityBaseline, noSA: true, status: verify.Warn, msg: "not checked: namespace default has no default ServiceAccount yet"},
		{"refused under baseline", inventory.PodSecurityBaseline, forbidden, "", verify.Pass, "refused (baseline)", false},
		{"admitted under baseline", inventory.PodSecurityBaseline, nil, "", verify.Fail, "admitted: Pod Security does not enforce baseline", false},
		{"admitted by the namespace's label", inventory.PodSecurityRestricted, nil, "privileged", verify.Warn, `enforces "privileged" by its own label`, false},
		{"privileged on purpose", inventory.PodSecurityPrivileged, nil, "", verify.Pass, "refuses nothing by default", false},
		{"another refusal", inventory.PodSecurityBaseline, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errString("quota")), "", verify.Fail, "dry-run create", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := withWorkers(t, 1)
			inv.PodSecurity.Enforce = tc.level
			c := New(inv, Options{})
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
			if tc.nsLabel != "" {
				ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": tc.nsLabel}
			}
			objs := []runtime.Object{ns}
			if !tc.noSA {
				objs = append(objs, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}})
			}
			api := fake.NewClientset(objs...)
			var dryRun []string
			api.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				dryRun = a.(k8stesting.CreateActionImpl).CreateOptions.DryRun
				return true, nil, tc.answer
			})
			c.newKube = func(inventory.Host) (kubernetes.Interface, error) { return api, nil }
			rs := c.checkPodSecurity(context.Background())
			if len(rs) != 1 || rs[0].Status != tc.status || !strings.Contains(rs[0].Message, tc.msg) || rs[0].Check != CheckPodSecurity {
				t.Fatalf("%+v, want %s %q", rs, tc.status, tc.msg)
			}
			if tc.noSA {
				if dryRun != nil {
					t.Errorf("the probe was sent before the ServiceAccount existed")
				}
				return
			}
			if len(dryRun) != 1 || dryRun[0] != metav1.DryRunAll {
				t.Errorf("the probe was not a dry run: %v", dryRun)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
