package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/verify"
)

// Names of the security checks.
const (
	CheckAuditLog    = "security/audit-log"
	CheckPodSecurity = "security/pod-security"
	CheckKubeletAuth = "security/kubelet-auth"
)

// auditStale is how long an apiserver may go without writing its audit
// log: the controller-managers and schedulers renew or try their leases
// every few seconds through every apiserver, which writes an event each.
const auditStale = 10 * time.Minute

// saWait bounds how long the Pod Security check waits for namespace
// default's ServiceAccount on a cluster just made (a var for tests).
var saWait = 20 * time.Second

// SecurityChecks are verify's checks of the settings the CIS benchmark
// cares most about, seen working: each apiserver writes its audit log, Pod
// Security refuses a privileged pod, each kubelet refuses anonymous
// requests and serves no read-only port.
func (c *Cluster) SecurityChecks() []verify.Check {
	// The audit log's check is the host check's (checkHost): its stat goes
	// in the host's one command.
	var checks []verify.Check
	checks = append(checks, verify.Check{Name: CheckPodSecurity, Doc: "a privileged pod in namespace default is refused by Pod Security (a server-side dry run)", Run: c.checkPodSecurity})
	for _, w := range c.Inv.Workers {
		checks = append(checks, verify.Check{Name: CheckKubeletAuth, Doc: "the kubelet answers an anonymous request with 401 and has no read-only port (10255)",
			Run: func(ctx context.Context) []verify.Result { return []verify.Result{c.checkKubeletAuth(ctx, w)} }})
	}
	return checks
}

// auditLogScript prints the host's clock and the audit log's size and
// mtime, or "missing".
const auditLogScript = "date +%s; stat -c '%s %Y' " + units.AuditLog + " 2>/dev/null || echo missing"

// auditVerdict judges "now\nsize mtime" (or "now\nmissing").
func auditVerdict(host, out string) verify.Result {
	fields := strings.Fields(out)
	restart := fmt.Sprintf("'hardway up' renders --audit-log-path and restarts the apiserver; see 'journalctl -u kube-apiserver' on %s", host)
	if len(fields) == 2 && fields[1] == "missing" {
		return verify.Failf(host, restart, "no audit log %s: the apiserver records no requests", units.AuditLog)
	}
	if len(fields) != 3 {
		return verify.Failf(host, "", "unexpected output %q", out)
	}
	now, err1 := strconv.ParseInt(fields[0], 10, 64)
	size, err2 := strconv.ParseInt(fields[1], 10, 64)
	mtime, err3 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return verify.Failf(host, "", "unexpected output %q", out)
	}
	age := time.Duration(now-mtime) * time.Second
	switch {
	case size == 0:
		return verify.Failf(host, restart, "%s is empty", units.AuditLog)
	case age > auditStale:
		return verify.Failf(host, fmt.Sprintf("is the disk full? see 'df %s' and 'journalctl -u kube-apiserver' on %s", units.AuditLogDir, host),
			"%s was last written %s ago, though every apiserver serves requests every few seconds", units.AuditLog, age.Round(time.Second))
	}
	return verify.OKf(host, "%s written %s ago (%d KiB)", units.AuditLog, max(age, 0).Round(time.Second), size/1024)
}

// privilegedProbe is the pod the Pod Security check offers the apiserver,
// in a dry run: nothing is stored.
func privilegedProbe(image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hardway-verify-privileged", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: image,
			SecurityContext: &corev1.SecurityContext{Privileged: new(true)}}}},
	}
}

func (c *Cluster) checkPodSecurity(ctx context.Context) []verify.Result {
	res := func(r verify.Result) []verify.Result { r.Check = CheckPodSecurity; return []verify.Result{r} }
	cs, err := c.kubeClient()
	if err != nil {
		return res(verify.Failf("", "", "%v", err))
	}
	level := c.Inv.PodSecurity.Enforce
	// The ServiceAccount admission, before Pod Security's, refuses every
	// pod of a namespace whose default ServiceAccount the controller-manager
	// has not made yet: seconds after a cluster's first up.
	sactx, cancel := context.WithTimeout(ctx, saWait)
	err = poll.Until(sactx, poll.Options{Attempt: 5 * time.Second}, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	cancel()
	if err != nil {
		return res(verify.Warnf("", "the controller-manager makes it; see 'hardway verify' again in a minute, or the controllers checks",
			"not checked: namespace default has no default ServiceAccount yet (%v)", err))
	}
	_, err = cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, privilegedProbe(units.PauseImage(c.Inv)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused := apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity")
	switch {
	case err != nil && !refused:
		return res(verify.Failf("", "the apiserver must be ready", "dry-run create of a privileged pod: %v", err))
	case refused && level != inventory.PodSecurityPrivileged:
		return res(verify.OKf("", "a privileged pod in default is refused (%s)", level))
	case refused:
		return res(verify.Warnf("", "'hardway up' renders the inventory's level and restarts the apiservers", "podSecurity.enforce is privileged, yet a privileged pod in default is refused: the apiservers run another admission config"))
	case level == inventory.PodSecurityPrivileged:
		return res(verify.OKf("", "podSecurity.enforce is privileged: Pod Security refuses nothing by default"))
	}
	// Admitted though the cluster default refuses it: the namespace's own
	// label, or apiservers without the admission config.
	ns, nerr := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	if nerr == nil {
		if l, ok := ns.Labels["pod-security.kubernetes.io/enforce"]; ok {
			return res(verify.Warnf("", "kubectl label ns default pod-security.kubernetes.io/enforce- (to use the cluster default)",
				"namespace default enforces %q by its own label, not the cluster's %s: a privileged pod is admitted there", l, level))
		}
	}
	return res(verify.Failf("", "'hardway up' renders --admission-control-config-file and restarts the apiservers",
		"a privileged pod in default is admitted: Pod Security does not enforce %s", level))
}

func (c *Cluster) checkKubeletAuth(ctx context.Context, w inventory.Host) verify.Result {
	r := c.kubeletAuth(ctx, w)
	r.Check, r.Host = CheckKubeletAuth, w.Name
	return r
}

// kubeletAuth asks the kubelet's API from the worker's own side (a tunnel
// through SSH), as any process there could: without credentials, and on
// the read-only port.
func (c *Cluster) kubeletAuth(ctx context.Context, w inventory.Host) verify.Result {
	pool, err := c.clusterTrust()
	if err != nil {
		return verify.Failf(w.Name, "run 'hardway certs generate'", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	url := "https://" + net.JoinHostPort(w.IP(), strconv.Itoa(units.KubeletPort)) + "/pods"
	code, _, err := c.getThrough(ctx, w.Name, url, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool})
	switch {
	case err != nil:
		return verify.Failf(w.Name, fmt.Sprintf("see 'journalctl -u kubelet' on %s", w.Name), "the kubelet's API %s: %v", url, err)
	case code != http.StatusUnauthorized:
		return verify.Failf(w.Name, "'hardway up' renders authentication.anonymous.enabled: false and restarts the kubelet",
			"an anonymous GET %s answers %d, not 401: the kubelet lets anyone in", url, code)
	}
	ro := net.JoinHostPort("127.0.0.1", strconv.Itoa(units.KubeletReadOnlyPort))
	if conn, err := c.dialFrom(ctx, w.Name, ro); err == nil {
		conn.Close()
		return verify.Failf(w.Name, "'hardway up' renders readOnlyPort: 0 and restarts the kubelet",
			"the kubelet's read-only port %d answers: pods and their specs to anyone, without authentication", units.KubeletReadOnlyPort)
	}
	return verify.OKf(w.Name, "an anonymous request gets 401; no read-only port %d", units.KubeletReadOnlyPort)
}
