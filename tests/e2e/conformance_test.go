package e2e

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/lab"
)

// The upstream conformance suite (issue 26): e2e.test and ginkgo of the
// mirror's Kubernetes release (make conformance-build), run against a 3 + 2
// lab whose workers have the suite's images (make conformance-images: the
// lab cannot reach a registry).
//
// In `make test` (make e2e) it runs conformanceSubset, a fixed list across
// API machinery, network, node, apps, auth and the CLI that takes a few
// minutes, and then proves the subset can fail: with CoreDNS scaled to 0 its
// DNS spec does not pass, and the next `up` repairs the cluster.
// HARDWAY_CONFORMANCE=full (make conformance) runs the whole [Conformance]
// focus, [Serial] included, instead, and writes its results (the JUnit
// report, the e2e log and a summary) to HARDWAY_CONFORMANCE_RESULTS.

// conformanceSubset are the specs the subset runs, by their names in the
// suite's conformance.yaml (test/conformance/testdata).
var conformanceSubset = []string{
	"[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate configmap [Conformance]",
	"[sig-api-machinery] AggregatedDiscovery should support aggregated discovery interface for CRDs [Conformance]",
	"[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server using the current Aggregator [LinuxOnly] [Conformance]",
	"[sig-api-machinery] CustomResourceConversionWebhook [Privileged:ClusterAdmin] should be able to convert from CR v1 to CR v2 [Conformance]",
	"[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition creating/deleting custom resource definition objects works [Conformance]",
	"[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a secret. [Conformance]",
	"[sig-api-machinery] ValidatingAdmissionPolicy [Privileged:ClusterAdmin] should validate against a Deployment [Conformance]",
	"[sig-api-machinery] Watchers should be able to restart watching from the last resource version observed by the previous watch [Conformance]",
	"[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
	"[sig-apps] ReplicaSet should serve a basic image on each replica with a public image [Conformance]",
	"[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should have a working scale subresource [Conformance]",
	"[sig-auth] ServiceAccounts ServiceAccountIssuerDiscovery should support OIDC discovery of service account issuer [Conformance]",
	"[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any namespace [Conformance]",
	"[sig-auth] ServiceAccounts should mount an API token into pods [Conformance]",
	"[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
	"[sig-cli] Kubectl client Proxy server should support proxy with --port 0 [Conformance]",
	"[sig-cli] Kubectl client Update Demo should create and stop a replication controller [Conformance]",
	"[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
	"[sig-network] DNS should provide DNS for ExternalName services [Conformance]",
	"[sig-network] DNS should provide DNS for services [Conformance]",
	conformanceDNSSpec,
	"[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol [LinuxOnly] [Conformance]",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]",
	"[sig-network] Services should be able to create a functioning NodePort service [Conformance]",
	"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
	"[sig-node] ConfigMap should be consumable via environment variable [NodeConformance] [Conformance]",
	"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly [NodeConformance] [Conformance]",
	"[sig-node] Downward API should provide pod UID as env vars [NodeConformance] [Conformance]",
	"[sig-node] Ephemeral Containers [NodeConformance] will start an ephemeral container in an existing pod [Conformance]",
	"[sig-node] Lease lease API should be available [Conformance]",
	"[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
	"[sig-node] Pods should support remote command execution over websockets [NodeConformance] [Conformance]",
	"[sig-node] PreStop should call prestop when killing a pod [Conformance]",
	"[sig-node] Secrets should be consumable via the environment [NodeConformance] [Conformance]",
	"[sig-node] Sysctls [LinuxOnly] [NodeConformance] should support sysctls [Environment:NotInUserNS] [Conformance]",
	"[sig-storage] EmptyDir volumes should support (root,0644,default) [LinuxOnly] [NodeConformance] [Conformance]",
	"[sig-storage] Projected secret should be consumable from pods in volume [NodeConformance] [Conformance]",
}

// conformanceDNSSpec is the subset's spec that needs CoreDNS.
const conformanceDNSSpec = "[sig-network] DNS should provide DNS for the cluster [Conformance]"

// focusOf is a ginkgo focus that matches exactly the named specs.
func focusOf(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return strings.Join(q, "|")
}

// conformanceRun is one run of the suite.
type conformanceRun struct {
	focus, skip string
	procs       int
	timeout     time.Duration // the suite's own bound (ginkgo --timeout)
	results     string        // junit.xml, e2e.log, summary.json go here
}

// conformanceSummary is what a run's JUnit report says.
type conformanceSummary struct {
	Passed, Failed, Skipped int
	FailedSpecs             []string // "name (status): first line of the failure"
	Took                    time.Duration
	JUnit, Log              string
}

func (s conformanceSummary) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped in %s (JUnit %s, log %s)",
		s.Passed, s.Failed, s.Skipped, s.Took.Round(time.Second), s.JUnit, s.Log)
}

// conformanceBinaries are e2e.test and ginkgo from the mirror, checked
// against the digests beside them (a stale or half-written build fails here,
// not in the middle of a run).
func conformanceBinaries(t *testing.T, mirror string) (e2eTest, ginkgo string) {
	t.Helper()
	dir := filepath.Join(mirror, "kubernetes-test", mirrortest.Kubernetes, "linux", "amd64")
	for _, b := range []string{"e2e.test", "ginkgo"} {
		p := filepath.Join(dir, b)
		want, err := os.ReadFile(p + ".sha256")
		if err != nil {
			t.Fatalf("no %s: run 'make conformance-build' (%v)", p, err)
		}
		if got := fileSHA256(t, p); got != strings.TrimSpace(string(want)) {
			t.Fatalf("%s does not match %s.sha256: run 'make conformance-build'", p, p)
		}
	}
	return filepath.Join(dir, "e2e.test"), filepath.Join(dir, "ginkgo")
}

// conformanceImages are the suite's images in the mirror, by the name each
// tarball carries (its manifest.json's RepoTags), as inventory entries.
func conformanceImages(t *testing.T, mirror string) string {
	t.Helper()
	dir := filepath.Join(mirror, "conformance-images")
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatalf("no conformance images: run 'make conformance-images' (%v)", err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(sums)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		for _, tag := range repoTags(t, filepath.Join(dir, f[1])) {
			fmt.Fprintf(&b, "  - name: %s\n    url: file://%s\n    sha256: %s\n", tag, filepath.Join(dir, f[1]), f[0])
		}
	}
	if b.Len() == 0 {
		t.Fatalf("%s lists no images: run 'make conformance-images'", filepath.Join(dir, "SHA256SUMS"))
	}
	return b.String()
}

// repoTags are the names a docker-archive tarball gives its image.
func repoTags(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no manifest.json (%v)", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil || len(m) == 0 {
			t.Fatalf("%s: manifest.json: %v", path, err)
		}
		return m[0].RepoTags
	}
}

// run runs ginkgo with e2e.test against kubeconfig, the e2e log to
// results/e2e.log, and reads the JUnit report. The error is ginkgo's exit
// (a failed spec exits 1); the summary is read either way.
func (r conformanceRun) run(ctx context.Context, t *testing.T, e2eTest, ginkgo, kubeconfig, kubectl string) (conformanceSummary, error) {
	t.Helper()
	if err := os.MkdirAll(r.results, 0o755); err != nil {
		t.Fatal(err)
	}
	s := conformanceSummary{JUnit: filepath.Join(r.results, "junit.xml"), Log: filepath.Join(r.results, "e2e.log")}
	log, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	args := []string{"--procs", fmt.Sprint(r.procs), "--timeout", r.timeout.String(), "--no-color",
		"--output-dir", r.results, "--junit-report", "junit.xml", "--focus", r.focus}
	if r.skip != "" {
		args = append(args, "--skip", r.skip)
	}
	// The suite's own flags: no cloud provider, the admin kubeconfig, the
	// mirror's kubectl for the sig-cli specs; --ginkgo.no-color for a
	// readable log.
	args = append(args, e2eTest, "--", "--provider=skeleton", "--kubeconfig="+kubeconfig, "--kubectl-path="+kubectl, "--ginkgo.no-color")
	cmd := exec.CommandContext(ctx, ginkgo, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = r.results
	// The suite's pods pull nothing: the images are on the workers already,
	// under their upstream names.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	start := time.Now()
	runErr := cmd.Run()
	s.Took = time.Since(start)
	if err := s.readJUnit(); err != nil {
		t.Fatalf("the run left no readable JUnit report (%v; ginkgo: %v); the end of %s:\n%s", err, runErr, s.Log, tailFile(s.Log, 40))
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(r.results, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s, runErr
}

// junitSuites is the part of ginkgo's JUnit report the summary needs.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit counts the report's specs by status. The suite's own nodes
// (SynchronizedBeforeSuite, ReportAfterSuite and the like) are not specs,
// but a failed one is a failure: nothing after it ran.
func (s *conformanceSummary) readJUnit() error {
	b, err := os.ReadFile(s.JUnit)
	if err != nil {
		return err
	}
	var r junitSuites
	if err := xml.Unmarshal(b, &r); err != nil {
		return err
	}
	for _, su := range r.Suites {
		for _, c := range su.Cases {
			suiteNode := strings.HasPrefix(c.Name, "[SynchronizedBeforeSuite]") || strings.HasPrefix(c.Name, "[SynchronizedAfterSuite]") ||
				strings.HasPrefix(c.Name, "[BeforeSuite]") || strings.HasPrefix(c.Name, "[AfterSuite]") || strings.HasPrefix(c.Name, "[ReportAfterSuite]") ||
				strings.HasPrefix(c.Name, "[ReportBeforeSuite]")
			switch c.Status {
			case "passed":
				if !suiteNode {
					s.Passed++
				}
			case "skipped", "pending":
				if !suiteNode {
					s.Skipped++
				}
			default: // failed, interrupted, timedout, panicked, aborted
				s.Failed++
				msg := ""
				if c.Failure != nil {
					msg = c.Failure.Message
				} else if c.Error != nil {
					msg = c.Error.Message
				}
				msg, _, _ = strings.Cut(strings.TrimSpace(msg), "\n")
				s.FailedSpecs = append(s.FailedSpecs, fmt.Sprintf("%s (%s): %.300s", c.Name, c.Status, msg))
			}
		}
	}
	return nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", path).Output()
	if err != nil {
		t.Fatalf("sha256sum %s: %v", path, err)
	}
	return strings.Fields(string(out))[0]
}

func TestConformance(t *testing.T) {
	sideBySide(t)
	labtest.RequireRoot(t)
	mirror := mirrortest.Dir()
	e2eTest, ginkgo := conformanceBinaries(t, mirror)
	images := conformanceImages(t, mirror)
	full := os.Getenv("HARDWAY_CONFORMANCE") == "full"

	dir := t.TempDir()
	l, res := labtest.Start(t, lab.Config{Dir: dir, Prefix: "hwf", Net: "10.240.7", Workers: 2, Mirror: mirror, ServeMirror: true})
	// The suite's images join the lab's own (the inventory ends with its
	// images: list).
	inv, err := os.ReadFile(res.Inventory)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(inv), "\n") || !strings.Contains(string(inv), "\nimages:\n") {
		t.Fatalf("the lab's inventory has no images: list to add to:\n%s", inv)
	}
	if err := os.WriteFile(res.Inventory, append(inv, images...), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &workersEnv{env: &env{t: t, inv: res.Inventory, cacheDir: filepath.Join(dir, "cache"), res: res, mirror: mirror, lab: l},
		kubectl: mirrortest.KubeBinary(t, "kubectl"), lab: l,
		kubeconfig: filepath.Join(filepath.Dir(res.Inventory), ".hardway/kubeconfigs/admin.kubeconfig")}

	t.Run("cold up with the suite's images, then verify passes", func(t *testing.T) {
		e.t = t
		e.mustUp()
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
	})

	if full {
		results := os.Getenv("HARDWAY_CONFORMANCE_RESULTS")
		if results == "" {
			results = filepath.Join(filepath.Dir(mirror), "conformance-results", time.Now().UTC().Format("2006-01-02T150405Z"))
		}
		t.Run("the whole [Conformance] focus passes", func(t *testing.T) {
			e.t = t
			r := conformanceRun{focus: `\[Conformance\]`, procs: 4, timeout: 3 * time.Hour, results: results}
			s, err := r.run(t.Context(), t, e2eTest, ginkgo, e.kubeconfig, e.kubectl)
			t.Logf("FIGURE conformance %s, whole [Conformance] focus on the 3 + 2 lab: %s", mirrortest.Kubernetes, s)
			if err != nil || s.Failed > 0 || s.Passed == 0 {
				t.Errorf("ginkgo: %v; failed:\n  %s", err, strings.Join(s.FailedSpecs, "\n  "))
			}
		})
		return
	}

	t.Run("the conformance subset passes", func(t *testing.T) {
		e.t = t
		r := conformanceRun{focus: focusOf(conformanceSubset), procs: 2, timeout: 15 * time.Minute, results: filepath.Join(dir, "subset")}
		s, err := r.run(t.Context(), t, e2eTest, ginkgo, e.kubeconfig, e.kubectl)
		t.Logf("FIGURE conformance subset (%d specs) on the 3 + 2 lab: %s", len(conformanceSubset), s)
		if err != nil || s.Failed > 0 || s.Passed != len(conformanceSubset) {
			t.Errorf("ginkgo: %v; %d of %d passed; failed:\n  %s\nthe end of the log:\n%s", err, s.Passed, len(conformanceSubset),
				strings.Join(s.FailedSpecs, "\n  "), tailFile(s.Log, 60))
		}
	})

	t.Run("with CoreDNS scaled to 0 the subset's DNS spec fails; up scales it back and it passes", func(t *testing.T) {
		e.t = t
		e.mustK("-n", "kube-system", "scale", "deployment/coredns", "--replicas=0")
		e.mustK("-n", "kube-system", "wait", "--for=delete", "pod", "-l", "k8s-app=kube-dns", "--timeout=120s")
		// The spec polls its probe pod's answers for 10 minutes; 2m30s is
		// well past what it takes on a healthy lab (the subset's run).
		r := conformanceRun{focus: focusOf([]string{conformanceDNSSpec}), procs: 1, timeout: 150 * time.Second, results: filepath.Join(dir, "broken")}
		s, err := r.run(t.Context(), t, e2eTest, ginkgo, e.kubeconfig, e.kubectl)
		t.Logf("with CoreDNS at 0: %s; ginkgo: %v", s, err)
		if err == nil || s.Failed == 0 || s.Passed > 0 || !slices.ContainsFunc(s.FailedSpecs, func(f string) bool { return strings.Contains(f, "DNS should provide DNS for the cluster") }) {
			t.Errorf("the DNS spec did not fail with CoreDNS at 0: ginkgo %v, %d passed, failed: %v", err, s.Passed, s.FailedSpecs)
		}
		e.mustUp()
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
		r = conformanceRun{focus: focusOf([]string{conformanceDNSSpec}), procs: 1, timeout: 5 * time.Minute, results: filepath.Join(dir, "repaired")}
		if s, err := r.run(t.Context(), t, e2eTest, ginkgo, e.kubeconfig, e.kubectl); err != nil || s.Passed != 1 {
			t.Errorf("after up: ginkgo %v, %s, failed: %v", err, s, s.FailedSpecs)
		}
	})
}
