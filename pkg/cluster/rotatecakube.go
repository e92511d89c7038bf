package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/addons"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/usererr"
)

// `hardway rotate ca --which kubernetes`: the cluster CA, after the
// Kubernetes documentation's "Manual Rotation of CA Certificates", with the
// same three phases as the other CAs and a few more waits, because the
// cluster CA is trusted far beyond the control plane:
//
//   - the trust bundle goes to the apiservers (--client-ca-file,
//     --kubelet-certificate-authority), the controller-managers
//     (--client-ca-file, --root-ca-file), the kubelets (clientCAFile) and
//     into every kubeconfig; the control plane restarts host by host behind
//     /readyz, the workers one at a time behind their Node's Ready;
//   - the controller-manager publishes --root-ca-file as the ConfigMap
//     kube-root-ca.crt in every namespace, and pods trust the API with it
//     (the projected service-account volume). The rotation waits until
//     every namespace holds the phase's bundle, then restarts the add-ons
//     hardway deploys (CoreDNS), whose client reads the file once at start,
//     so they trust both CAs before phase 2 changes the apiservers' serving
//     certificate, and the new one alone after phase 3;
//   - phase 2 reissues every leaf the CA signs: the apiservers' serving and
//     kubelet-client certificates, each kubelet's, kube-proxy's, the
//     controller-manager's and scheduler's, and admin.
//
// Service-account tokens are signed with the service-account key, not the
// CA: they keep working throughout.

// caTrustAnnotation marks an add-on's pod template with the digest of the
// bundle its pods were restarted for, so that a resumed rotation restarts
// them once per phase, not once per run.
const caTrustAnnotation = "hardway.io/ca-trust-bundle"

// rootCAConfigMap is what the controller-manager publishes in every
// namespace from --root-ca-file.
const rootCAConfigMap = "kube-root-ca.crt"

// caAddon is a Deployment hardway deploys whose pods read the cluster CA at
// start.
type caAddon struct {
	Namespace, Name string
	// wait waits for its rollout, and says why not with a hint.
	wait func(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error
}

// caAddons are the add-ons a cluster CA rotation restarts: with workers,
// CoreDNS. (The bridge CNI runs no pods; the node-local apiserver load
// balancer is a host service that passes TLS through.)
func (r *CARotation) caAddons() []caAddon {
	if len(r.c.Inv.Workers) == 0 {
		return nil
	}
	return []caAddon{{addons.DNSNamespace, addons.DNSDeployment, addons.WaitCoreDNS}}
}

func (r *CARotation) kubernetesPhases() []Phase {
	bundle := r.target.Bundle
	rootCA := func(phase int, what string) plan.Step {
		return plan.Step{Name: r.stepName(phase, "kube-root-ca"),
			Doc: "wait until the ConfigMap " + rootCAConfigMap + " in every namespace holds the bundle (" + what + ")", Plan: r.planRootCA(phase)}
	}
	addonStep := func(phase int) plan.Step {
		return plan.Step{Name: r.stepName(phase, "addons"),
			Doc: "restart CoreDNS (rolling), whose pods read the CA once at start, and wait for it", Plan: r.planAddons(phase)}
	}
	workers := func(phase int) plan.Step {
		s := r.gated(phase, StepWorkers, r.c.planWorkers)
		s.Doc = "restart the kubelets and kube-proxies whose files changed, one worker at a time, each waiting for its Node to be Ready"
		return s
	}
	return []Phase{
		{pki.PhaseTrustBoth, pki.CAPhases[pki.PhaseTrustBoth], []plan.Step{
			{Name: "new-ca", Doc: "make the new CA; the trust bundle becomes old + new, and every kubeconfig trusts it", Plan: r.planNewCA},
			r.pushStep(pki.PhaseTrustBoth, "push the bundle ("+bundle+"), the new CA and the kubeconfigs to every host"),
			r.gated(pki.PhaseTrustBoth, StepControlPlane, r.c.planControlPlane),
			workers(pki.PhaseTrustBoth),
			rootCA(pki.PhaseTrustBoth, "old + new CA"),
			addonStep(pki.PhaseTrustBoth),
			r.recordStep(pki.PhaseTrustBoth),
		}},
		{pki.PhaseReissue, pki.CAPhases[pki.PhaseReissue], []plan.Step{
			{Name: "reissue", Doc: "reissue " + strings.Join(r.target.Leaves(), ", ") + " from the new CA, and the kubeconfigs that embed them", Plan: r.planReissue},
			r.pushStep(pki.PhaseReissue, "push the reissued certificates and kubeconfigs"),
			r.gated(pki.PhaseReissue, StepControlPlane, r.c.planControlPlane),
			workers(pki.PhaseReissue),
			r.recordStep(pki.PhaseReissue),
		}},
		{pki.PhaseDropOld, pki.CAPhases[pki.PhaseDropOld], []plan.Step{
			{Name: "drop-old", Doc: "the trust bundle becomes the new CA alone, in every kubeconfig too", Plan: r.planDropOld},
			r.pushStep(pki.PhaseDropOld, "push the bundle and the kubeconfigs"),
			r.gated(pki.PhaseDropOld, StepControlPlane, r.c.planControlPlane),
			workers(pki.PhaseDropOld),
			rootCA(pki.PhaseDropOld, "the new CA alone"),
			addonStep(pki.PhaseDropOld),
			r.recordStep(pki.PhaseDropOld),
		}},
	}
}

// rootCAWait bounds the wait for kube-root-ca.crt: the controller-managers
// restarted one after another, and the leader's lease must pass before the
// new leader republishes every namespace.
func (r *CARotation) rootCAWait() time.Duration { return max(r.c.opt.ServiceTimeout, 3*time.Minute) }

func (r *CARotation) planRootCA(phase int) func(context.Context, plan.Planned) ([]plan.Action, error) {
	return func(context.Context, plan.Planned) ([]plan.Action, error) {
		rot, _, err := r.current()
		if err != nil || rot.Done >= phase {
			return nil, err
		}
		want := rot.Bundle(phase)
		what := "old + new CA"
		if phase >= pki.PhaseDropOld {
			what = "the new CA alone"
		}
		return []plan.Action{{Kind: plan.Wait,
			Desc: fmt.Sprintf("wait until %s in every namespace holds the trust bundle (%s; at most %s)", rootCAConfigMap, what, r.rootCAWait()),
			Do:   func(ctx context.Context) error { return r.waitRootCA(ctx, phase, want) }}}, nil
	}
}

// waitRootCA polls the namespaces and their kube-root-ca.crt until each
// holds exactly the certificates of want.
func (r *CARotation) waitRootCA(ctx context.Context, phase int, want []byte) error {
	cs, err := r.c.kubeClient()
	if err != nil {
		return err
	}
	wantSet := pemSet(want)
	wctx, cancel := context.WithTimeout(ctx, r.rootCAWait())
	defer cancel()
	start := time.Now()
	var behind []string
	err = poll.Until(wctx, poll.Options{Attempt: 10 * time.Second}, func(ctx context.Context) error {
		nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		cms, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rootCAConfigMap})
		if err != nil {
			return err
		}
		have := map[string]string{}
		for _, cm := range cms.Items {
			have[cm.Namespace] = pemSet([]byte(cm.Data["ca.crt"]))
		}
		behind = behind[:0]
		for _, ns := range nss.Items {
			if ns.Status.Phase == "Terminating" {
				continue
			}
			if have[ns.Name] != wantSet {
				behind = append(behind, ns.Name)
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("%d namespace(s) not yet: %s", len(behind), shortNames(behind))
		}
		return nil
	})
	if err != nil {
		return usererr.New(fmt.Errorf("%s does not hold the trust bundle after %s: %w", rootCAConfigMap, time.Since(start).Round(time.Second), err),
			"the controller-manager leader publishes it from --root-ca-file: 'hardway verify' and 'journalctl -u kube-controller-manager' on the control-plane hosts say why; rerun the rotation to go on")
	}
	r.c.logf("[%s] %s holds the bundle in every namespace (%s)", pki.CAPhases[phase], rootCAConfigMap, time.Since(start).Round(100*time.Millisecond))
	return nil
}

func shortNames(ns []string) string {
	if len(ns) > 5 {
		return strings.Join(ns[:5], ", ") + fmt.Sprintf(" and %d more", len(ns)-5)
	}
	return strings.Join(ns, ", ")
}

// pemSet is the sorted certificates of a PEM bundle, as one string: two
// bundles with the same certificates compare equal whatever their order
// or spacing.
func pemSet(b []byte) string {
	var ders []string
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			ders = append(ders, string(blk.Bytes))
		}
	}
	slices.Sort(ders)
	return strings.Join(ders, "\x00")
}

// bundleDigest names a bundle in the add-ons' annotation.
func bundleDigest(b []byte) string {
	sum := sha256.Sum256([]byte(pemSet(b)))
	return hex.EncodeToString(sum[:8])
}

// planAddons restarts each add-on whose pods were not yet restarted for the
// phase's bundle (the annotation says), and waits for its rollout.
func (r *CARotation) planAddons(phase int) func(context.Context, plan.Planned) ([]plan.Action, error) {
	return func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
		rot, _, err := r.current()
		if err != nil || rot.Done >= phase {
			return nil, err
		}
		digest := bundleDigest(rot.Bundle(phase))
		var actions []plan.Action
		for _, a := range r.caAddons() {
			ref := "Deployment " + a.Namespace + "/" + a.Name
			cs, err := r.c.kubeClient()
			if err != nil {
				return nil, err
			}
			d, err := cs.AppsV1().Deployments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue // not deployed (yet): its pods will read the bundle when they start
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", ref, err)
			}
			if d.Spec.Template.Annotations[caTrustAnnotation] != digest {
				patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
					"metadata": map[string]any{"annotations": map[string]string{caTrustAnnotation: digest}}}}})
				actions = append(actions, plan.Action{Kind: plan.Apply,
					Desc: fmt.Sprintf("restart %s (rolling) so that its pods read the bundle of phase %s (annotation %s=%s)", ref, pki.CAPhases[phase], caTrustAnnotation, digest),
					Do: func(ctx context.Context) error {
						cs, err := r.c.kubeClient()
						if err != nil {
							return err
						}
						_, err = cs.AppsV1().Deployments(a.Namespace).Patch(ctx, a.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "hardway-rotate-ca"})
						return err
					}})
			} else if addons.DeploymentReady(d) {
				continue
			}
			timeout := max(r.c.opt.ServiceTimeout, 3*time.Minute)
			actions = append(actions, plan.Action{Kind: plan.Wait, Desc: fmt.Sprintf("wait for %s to roll out (at most %s)", ref, timeout),
				Do: func(ctx context.Context) error {
					cs, err := r.c.kubeClient()
					if err != nil {
						return err
					}
					start := time.Now()
					if err := a.wait(ctx, cs, timeout); err != nil {
						return err
					}
					r.c.logf("[%s] %s rolled out (%s)", pki.CAPhases[phase], ref, time.Since(start).Round(100*time.Millisecond))
					return nil
				}})
		}
		return actions, nil
	}
}

// workersReady is the kubernetes rotation's extra preflight: every worker's
// Node is Ready, as each worker's restart waits for it to be again.
func (r *CARotation) workersReady(ctx context.Context) error {
	if len(r.c.Inv.Workers) == 0 {
		return nil
	}
	cs, err := r.c.kubeClient()
	if err != nil {
		return err
	}
	var bad []string
	for _, w := range r.c.Inv.Workers {
		n, err := kube.GetNode(ctx, cs, w.Name)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", w.Name, err))
		case n == nil:
			bad = append(bad, w.Name+": no Node")
		default:
			if ok, why := kube.NodeReady(n); !ok && r.c.cniBridge() {
				bad = append(bad, fmt.Sprintf("Node %s is not Ready (%s)", w.Name, why))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}
