package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func secretsClient(n int) *fake.Clientset {
	var objs []runtime.Object
	for i := range n {
		objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%3), Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte("v")}})
	}
	return fake.NewClientset(objs...)
}

func updates(cs *fake.Clientset) map[string]int {
	m := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "secrets" {
			s := a.(k8stesting.UpdateAction).GetObject().(*corev1.Secret)
			m[s.Namespace+"/"+s.Name]++
		}
	}
	return m
}

func TestRewriteSecretsWritesEachBackUnchanged(t *testing.T) {
	cs := secretsClient(7)
	n, err := RewriteSecrets(context.Background(), cs, nil)
	if err != nil || n != 7 {
		t.Fatalf("rewrote %d: %v", n, err)
	}
	if u := updates(cs); len(u) != 7 {
		t.Fatalf("updates: %v", u)
	}
	s, _ := cs.CoreV1().Secrets("ns1").Get(context.Background(), "s1", metav1.GetOptions{})
	if string(s.Data["k"]) != "v" {
		t.Errorf("content changed: %v", s.Data)
	}
}

func TestRewriteSecretsRetriesConflictsAndSkipsDeleted(t *testing.T) {
	cs := secretsClient(4)
	conflicts := 0
	cs.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.UpdateAction).GetObject().(*corev1.Secret)
		switch s.Name {
		case "s1":
			if conflicts < 2 {
				conflicts++
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, s.Name, fmt.Errorf("the object has been modified"))
			}
		case "s2":
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, s.Name)
		}
		return false, nil, nil
	})
	n, err := RewriteSecrets(context.Background(), cs, nil)
	if err != nil || n != 4 {
		t.Fatalf("rewrote %d: %v", n, err)
	}
	if u := updates(cs); u["ns1/s1"] != 3 {
		t.Errorf("s1 updated %d times, want 3 (two conflicts, then success): %v", u["ns1/s1"], u)
	}
	gets := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 2 {
		t.Errorf("%d gets after conflicts, want 2", gets)
	}
}

func TestRewriteSecretsGivesUpOnEndlessConflicts(t *testing.T) {
	cs := secretsClient(2)
	cs.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, "x", fmt.Errorf("modified"))
	})
	_, err := RewriteSecrets(context.Background(), cs, nil)
	if err == nil || !strings.Contains(err.Error(), "changed under every one of 5 updates") {
		t.Fatalf("err %v", err)
	}
}

func TestRewriteSecretsFollowsPages(t *testing.T) {
	cs := secretsClient(0)
	pages := map[string]*corev1.SecretList{
		"":   {ListMeta: metav1.ListMeta{Continue: "p2"}, Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "one"}}}},
		"p2": {Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "two"}}, {ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "three"}}}},
	}
	var limits []int64
	cs.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		limits = append(limits, o.Limit)
		return true, pages[o.Continue], nil
	})
	cs.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.UpdateAction).GetObject(), nil
	})
	var seen []int
	n, err := RewriteSecrets(context.Background(), cs, func(n int) { seen = append(seen, n) })
	if err != nil || n != 3 || fmt.Sprint(seen) != "[1 3]" || fmt.Sprint(limits) != fmt.Sprintf("[%d %d]", SecretsPage, SecretsPage) {
		t.Fatalf("n %d err %v progress %v limits %v", n, err, seen, limits)
	}
}

func TestParseEncryptionConfigHash(t *testing.T) {
	metrics := `# HELP apiserver_encryption_config_controller_last_config_info [ALPHA] Information about the last applied encryption configuration with hash as label, split by apiserver identity.
# TYPE apiserver_encryption_config_controller_last_config_info gauge
apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="sha256:9f1c",hash="sha256:ab12cd"} 1
apiserver_request_total{code="200"} 4
`
	if h, ok := ParseEncryptionConfigHash([]byte(metrics)); !ok || h != "sha256:ab12cd" {
		t.Errorf("got %q %v", h, ok)
	}
	if _, ok := ParseEncryptionConfigHash([]byte("apiserver_request_total 1\n")); ok {
		t.Error("found a hash where there is none")
	}
}
