package addons

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/usererr"
)

// The CoreDNS add-on's facts: names the kubelets, verify and smoke rely on.
const (
	// CoreDNSImage is the tested CoreDNS, used when neither dns.image nor
	// the inventory's images: name one (the mirror builds this one).
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.7"
	// coreDNSRepo recognises a CoreDNS image in images: by its repository.
	coreDNSRepo = "/coredns/coredns"

	DNSNamespace  = "kube-system"
	DNSDeployment = "coredns"
	DNSService    = "kube-dns" // the name every Kubernetes tool expects
	DNSLabel      = "k8s-app"  // the pods' label key...
	DNSLabelValue = "kube-dns" // ...and value, the Service's selector
	DNSReplicas   = 2          // one per worker where there are two
	DNSReadyPort  = 8181       // the ready plugin
	coreDNSTmpl   = "coredns.yaml.tmpl"
)

// CoreDNSConfig is what the template is rendered with.
type CoreDNSConfig struct {
	ClusterIP string   // the Service's address: inv.ClusterDNS(), the kubelets' clusterDNS
	Domain    string   // network.clusterDomain
	Image     string   // see ImageFor
	Upstream  []string // dns.upstream; empty: no forward
	Replicas  int
}

// Forward is the forward plugin's list of upstream resolvers.
func (c CoreDNSConfig) Forward() string { return strings.Join(c.Upstream, " ") }

// CoreDNSFor is the CoreDNS configuration for inv.
func CoreDNSFor(inv *inventory.Inventory) CoreDNSConfig {
	return CoreDNSConfig{ClusterIP: inv.ClusterDNS(), Domain: inv.Network.ClusterDomain, Image: ImageFor(inv),
		Upstream: inv.DNS.Upstream, Replicas: DNSReplicas}
}

// ImageFor picks the CoreDNS image: dns.image; else the CoreDNS image in
// images: (imported on every worker, so nothing is pulled); else the tested
// one from its registry.
func ImageFor(inv *inventory.Inventory) string {
	if inv.DNS.Image != "" {
		return inv.DNS.Image
	}
	for _, im := range inv.Images {
		repo := im.Name
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		if strings.HasSuffix(repo, coreDNSRepo) {
			return im.Name
		}
	}
	return CoreDNSImage
}

// CoreDNS renders the add-on's objects in apply order, and the YAML text
// (for `hardway render`).
func CoreDNS(cfg CoreDNSConfig) ([]byte, []Object, error) {
	if cfg.ClusterIP == "" {
		return nil, nil, errors.New("CoreDNS needs the cluster DNS address (network.serviceCIDR)")
	}
	return render(coreDNSTmpl, cfg)
}

// DeploymentReady says whether d rolled out: the newest generation seen,
// every replica updated and available.
func DeploymentReady(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.AvailableReplicas == want && d.Status.Replicas == want
}

// WaitCoreDNS waits until the CoreDNS Deployment rolled out. A timeout names
// each pod that is not ready, with why and a hint.
func WaitCoreDNS(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll.Until(ctx, poll.Options{Interval: time.Second, Max: 3 * time.Second, Attempt: 10 * time.Second}, func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(DNSNamespace).Get(ctx, DNSDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !DeploymentReady(d) {
			return fmt.Errorf("%d of %d replicas available", d.Status.AvailableReplicas, d.Status.Replicas)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	probs, hint := PodProblems(rctx, cs, DNSNamespace, DNSLabel+"="+DNSLabelValue)
	msg := fmt.Sprintf("CoreDNS is not ready after %s: %v", timeout, err)
	if len(probs) > 0 {
		msg += "; " + strings.Join(probs, "; ")
	}
	if hint == "" {
		hint = "see 'kubectl -n kube-system describe pods -l k8s-app=kube-dns'"
	}
	return usererr.New(errors.New(msg), hint)
}

// PodProblems names the pods matching selector that are not ready: node,
// phase or the container's waiting reason. The hint is for the first
// reason that has a known fix (an image no worker has, most often).
func PodProblems(ctx context.Context, cs kubernetes.Interface, ns, selector string) ([]string, string) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return []string{"pods: " + err.Error()}, ""
	}
	var out []string
	hint := ""
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for _, p := range pods.Items {
		if PodReady(&p) {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "no node"
		}
		why := string(p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue && c.Message != "" {
				why += ": " + c.Message
			}
		}
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				why = c.State.Waiting.Reason
				if m := c.State.Waiting.Message; m != "" {
					why += ": " + firstLine(m)
				}
				if h := reasonHint(c.State.Waiting.Reason, c.Image); hint == "" {
					hint = h
				}
			case c.State.Terminated != nil:
				why = "terminated: " + c.State.Terminated.Reason
			case !c.Ready:
				why = "running, not ready (readiness probe)"
			}
		}
		out = append(out, fmt.Sprintf("pod %s on %s: %s", p.Name, node, why))
	}
	return out, hint
}

func reasonHint(reason, image string) string {
	switch reason {
	case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
		return "no worker has " + image + " and none could pull it: list its tarball under images: (imported on every worker), " +
			"or set dns.image to an image a registry the workers reach serves"
	case "CrashLoopBackOff":
		return "see 'kubectl -n kube-system logs -l k8s-app=kube-dns'"
	case "ContainerCreating":
		return "see 'kubectl -n kube-system describe pods -l k8s-app=kube-dns' (the pod network or the CNI, usually)"
	}
	return ""
}

// PodReady is the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
