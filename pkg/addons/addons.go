// Package addons renders the cluster add-ons hardway applies (CoreDNS) from
// templates/, compares them with what the apiserver has, and applies them
// with server-side apply.
//
// The manifests are YAML templates a user can read (templates/*.yaml.tmpl);
// the decisions (which image, which address, forward or not) are made here
// in Go, where tests see them.
package addons

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"text/template"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/templates"
)

// Object is one rendered manifest.
type Object struct {
	Kind, Namespace, Name string
	// JSON is what is applied; want is the same, decoded, for the compare.
	JSON []byte
	want map[string]any
}

// Ref is "Kind namespace/name" (or "Kind name" when cluster-scoped).
func (o Object) Ref() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// render executes templates/<name> and splits it into objects, in order.
func render(name string, data any) ([]byte, []Object, error) {
	t, err := template.New(name).ParseFS(templates.FS, name)
	if err != nil {
		return nil, nil, fmt.Errorf("template %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, nil, fmt.Errorf("template %s: %w", name, err)
	}
	var objs []Object
	for i, doc := range strings.Split(buf.String(), "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, nil, fmt.Errorf("template %s, document %d: %w", name, i+1, err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil || m == nil {
			return nil, nil, fmt.Errorf("template %s, document %d: not an object", name, i+1)
		}
		meta, _ := m["metadata"].(map[string]any)
		o := Object{JSON: j, want: m}
		o.Kind, _ = m["kind"].(string)
		o.Name, _ = meta["name"].(string)
		o.Namespace, _ = meta["namespace"].(string)
		if o.Kind == "" || o.Name == "" {
			return nil, nil, fmt.Errorf("template %s, document %d: no kind or name", name, i+1)
		}
		objs = append(objs, o)
	}
	return buf.Bytes(), objs, nil
}

// Diff says how the live objects differ from objs: one line per object that
// is missing or differs (at most three fields each). It only reads. A field
// the live object has and objs do not set (a default, another manager's)
// is no difference.
func Diff(ctx context.Context, cs kubernetes.Interface, objs []Object) ([]string, error) {
	var out []string
	for _, o := range objs {
		live, err := get(ctx, cs, o)
		if apierrors.IsNotFound(err) {
			out = append(out, o.Ref()+" missing")
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", o.Ref(), err)
		}
		b, err := json.Marshal(live)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		// Typed clients drop apiVersion and kind: the kind is the client.
		want := map[string]any{}
		for k, v := range o.want {
			if k != "apiVersion" && k != "kind" {
				want[k] = v
			}
		}
		d := subset("", want, m)
		sort.Strings(d)
		if len(d) > 3 {
			d = append(d[:3], fmt.Sprintf("%d more", len(d)-3))
		}
		if len(d) > 0 {
			out = append(out, o.Ref()+": "+strings.Join(d, "; "))
		}
	}
	return out, nil
}

// subset lists where live lacks or differs from want.
func subset(path string, want, live any) []string {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s is %s, want an object", orRoot(path), short(live))}
		}
		var out []string
		for k, v := range w {
			p := k
			if path != "" {
				p = path + "." + k
			}
			lv, ok := l[k]
			if !ok {
				out = append(out, p+" missing")
				continue
			}
			out = append(out, subset(p, v, lv)...)
		}
		return out
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return []string{fmt.Sprintf("%s is %s, want %s", orRoot(path), short(live), short(want))}
		}
		var out []string
		for i := range w {
			out = append(out, subset(fmt.Sprintf("%s[%d]", path, i), w[i], l[i])...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, live) {
			return []string{fmt.Sprintf("%s is %s, want %s", orRoot(path), short(live), short(want))}
		}
		return nil
	}
}

func orRoot(p string) string {
	if p == "" {
		return "the object"
	}
	return p
}

func short(v any) string {
	if v == nil {
		return "unset"
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// Apply server-side applies objs in order (field manager hardway, forcing
// ownership of the fields it sets: a `kubectl scale` of CoreDNS is put
// back). A Service whose clusterIP differs is deleted first: the address is
// immutable, and the kubelets point pods at the one objs name.
func Apply(ctx context.Context, cs kubernetes.Interface, objs []Object) error {
	force := true
	opts := metav1.PatchOptions{FieldManager: kube.FieldManager, Force: &force}
	for _, o := range objs {
		if o.Kind == "Service" {
			if err := recreateIfIPDiffers(ctx, cs, o); err != nil {
				return err
			}
		}
		var err error
		switch o.Kind {
		case "ServiceAccount":
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		case "ConfigMap":
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		case "Service":
			err = applyService(ctx, cs, o, opts)
		case "ClusterRole":
			_, err = cs.RbacV1().ClusterRoles().Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		case "ClusterRoleBinding":
			_, err = cs.RbacV1().ClusterRoleBindings().Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		case "Deployment":
			_, err = cs.AppsV1().Deployments(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		default:
			err = fmt.Errorf("hardway does not apply %s objects", o.Kind)
		}
		if err != nil {
			return fmt.Errorf("apply %s: %w", o.Ref(), err)
		}
	}
	return nil
}

// applyService applies a Service, retrying while its address is still held
// by a Service just deleted (the allocator frees it a moment later).
func applyService(ctx context.Context, cs kubernetes.Interface, o Object, opts metav1.PatchOptions) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return poll.Until(ctx, poll.Options{Interval: 500 * time.Millisecond, Max: 2 * time.Second}, func(ctx context.Context) error {
		_, err := cs.CoreV1().Services(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, o.JSON, opts)
		if err != nil && !strings.Contains(err.Error(), "already allocated") {
			return poll.Stop(err)
		}
		return err
	})
}

func recreateIfIPDiffers(ctx context.Context, cs kubernetes.Interface, o Object) error {
	spec, _ := o.want["spec"].(map[string]any)
	want, _ := spec["clusterIP"].(string)
	if want == "" {
		return nil
	}
	live, err := cs.CoreV1().Services(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", o.Ref(), err)
	}
	if live.Spec.ClusterIP == want {
		return nil
	}
	if err := cs.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s (clusterIP %s, not %s): %w", o.Ref(), live.Spec.ClusterIP, want, err)
	}
	return nil
}

// get reads the live object of o's kind.
func get(ctx context.Context, cs kubernetes.Interface, o Object) (any, error) {
	g := metav1.GetOptions{}
	switch o.Kind {
	case "ServiceAccount":
		return nilOnErr(cs.CoreV1().ServiceAccounts(o.Namespace).Get(ctx, o.Name, g))
	case "ConfigMap":
		return nilOnErr(cs.CoreV1().ConfigMaps(o.Namespace).Get(ctx, o.Name, g))
	case "Service":
		return nilOnErr(cs.CoreV1().Services(o.Namespace).Get(ctx, o.Name, g))
	case "ClusterRole":
		return nilOnErr(cs.RbacV1().ClusterRoles().Get(ctx, o.Name, g))
	case "ClusterRoleBinding":
		return nilOnErr(cs.RbacV1().ClusterRoleBindings().Get(ctx, o.Name, g))
	case "Deployment":
		return nilOnErr(cs.AppsV1().Deployments(o.Namespace).Get(ctx, o.Name, g))
	}
	return nil, fmt.Errorf("hardway does not read %s objects", o.Kind)
}

func nilOnErr[T any](v *T, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}
