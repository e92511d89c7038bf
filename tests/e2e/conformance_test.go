package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/lab"
)

// The upstream conformance suite (issue 26): e2e.test and ginkgo of the
// mirror's Kubernetes release (make conformance-build), run against a 3 + 2
// lab whose workers pull the suite's images (make conformance-images: made
// here, for the lab reaches no registry) from a registry mirror on the lab's
// bridge (hack/registry), set as the inventory's registries:.
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
	// attempts > 1 runs a failed spec again, up to that many times in all
	// (ginkgo --flake-attempts); the run names each spec that needed it.
	attempts int
}

// conformanceSummary is what a run's JUnit report says.
type conformanceSummary struct {
	Passed, Failed, Skipped int
	FailedSpecs             []string // "name (status): first line of the failure"
	Flaky                   []string // specs that passed only on a later attempt (conformanceRun.attempts)
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

// conformanceImages are the suite's image tarballs in the mirror.
func conformanceImages(t *testing.T, mirror string) []string {
	t.Helper()
	dir := filepath.Join(mirror, "conformance-images")
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatalf("no conformance images: run 'make conformance-images' (%v)", err)
	}
	var files []string
	sc := bufio.NewScanner(strings.NewReader(string(sums)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 {
			if got := fileSHA256(t, filepath.Join(dir, f[1])); got != f[0] {
				t.Fatalf("%s does not match SHA256SUMS: run 'make conformance-images'", filepath.Join(dir, f[1]))
			}
			files = append(files, filepath.Join(dir, f[1]))
		}
	}
	if len(files) == 0 {
		t.Fatalf("%s lists no images: run 'make conformance-images'", filepath.Join(dir, "SHA256SUMS"))
	}
	return files
}

// startRegistry serves the tarballs' images on addr with hack/registry (the
// lab's registry mirror) until the test ends. The suite's images come from
// it through the workers' registries: setting, as from a pull-through cache
// on a real network; a pod with imagePullPolicy: Always pulls them again.
func startRegistry(t *testing.T, addr string, tarballs []string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "registry")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/hardway/hardway/hack/registry").CombinedOutput(); err != nil {
		t.Fatalf("build hack/registry: %v\n%s", err, out)
	}
	pidfile := filepath.Join(dir, "registry.pid")
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-listen", addr, "-pidfile", pidfile}, tarballs...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); log.Close() }()
	t.Cleanup(func() {
		// Its own PID: the process this test started.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// The pidfile is written once every image is served.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(pidfile); err == nil {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("hack/registry exited (%v):\n%s", err, tailFile(log.Name(), 20))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("hack/registry did not serve its images within 2 minutes:\n%s", tailFile(log.Name(), 20))
		}
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
	if r.attempts > 1 {
		args = append(args, "--flake-attempts", fmt.Sprint(r.attempts))
	}
	// The suite's own flags: no cloud provider, the admin kubeconfig, the
	// mirror's kubectl for the sig-cli specs; --ginkgo.no-color for a
	// readable log.
	args = append(args, e2eTest, "--", "--provider=skeleton", "--kubeconfig="+kubeconfig, "--kubectl-path="+kubectl, "--ginkgo.no-color")
	cmd := exec.CommandContext(ctx, ginkgo, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = r.results
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	start := time.Now()
	runErr := cmd.Run()
	s.Took = time.Since(start)
	if err := s.readJUnit(); err != nil {
		t.Fatalf("the run left no readable JUnit report (%v; ginkgo: %v); the end of %s:\n%s", err, runErr, s.Log, tailFile(s.Log, 40))
	}
	s.Flaky = flakySpecs(s.Log)
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(r.results, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s, runErr
}

// flakySpecs are the lines of a ginkgo log that mark a spec passed only on
// a later attempt ("[FLAKEY TEST - TOOK 2 ATTEMPTS TO PASS]"), with the
// spec's name that ginkgo prints on the next line.
func flakySpecs(logPath string) []string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	var out []string
	for i, l := range lines {
		if j := strings.Index(l, "[FLAKEY TEST"); j >= 0 {
			name := ""
			if i+1 < len(lines) {
				name = strings.TrimSpace(lines[i+1])
			}
			out = append(out, strings.TrimSpace(l[j:])+" "+name)
		}
	}
	return out
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

// ginkgoSuiteNodes begin the names of the report's entries that are the
// suite's own setup and reporting, not specs.
var ginkgoSuiteNodes = []string{"[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]", "[BeforeSuite]", "[AfterSuite]", "[ReportBeforeSuite]", "[ReportAfterSuite]"}

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
			suiteNode := slices.ContainsFunc(ginkgoSuiteNodes, func(p string) bool { return strings.HasPrefix(c.Name, p) })
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

// fileSHA256 streams path through sha256 (the tarballs are hundreds of MB).
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestConformance(t *testing.T) {
	sideBySide(t)
	labtest.RequireRoot(t)
	mirror := mirrortest.Dir()
	e2eTest, ginkgo := conformanceBinaries(t, mirror)
	images := conformanceImages(t, mirror)
	full := os.Getenv("HARDWAY_CONFORMANCE") == "full"

	dir := t.TempDir()
	l, res := labtest.Start(t, lab.Config{Dir: dir, Prefix: "hwf", Net: "10.240.18", Workers: 2, Mirror: mirror, ServeMirror: true})
	// The suite's images are on a registry mirror on the lab's bridge, for
	// registry.k8s.io: the workers pull what the specs run, as a cluster
	// behind a pull-through cache does.
	reg := res.Bridge + ":5000"
	startRegistry(t, reg, images)
	inv, err := os.ReadFile(res.Inventory)
	if err != nil {
		t.Fatal(err)
	}
	mirrorOf := fmt.Sprintf("registries:\n  - name: registry.k8s.io\n    mirrors:\n      - url: http://%s\n", reg)
	if err := os.WriteFile(res.Inventory, append(inv, mirrorOf...), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &workersEnv{env: &env{t: t, inv: res.Inventory, cacheDir: filepath.Join(dir, "cache"), res: res, mirror: mirror, lab: l},
		kubectl: mirrortest.KubeBinary(t, "kubectl"), lab: l,
		kubeconfig: filepath.Join(filepath.Dir(res.Inventory), ".hardway/kubeconfigs/admin.kubeconfig")}

	t.Run("cold up with a registry mirror for registry.k8s.io, then verify passes", func(t *testing.T) {
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
		// A second attempt for a failed spec: on 2 cores, beside another
		// lab's suite, a spec's fixed 30 s wait ran out once (the CRD
		// deletion spec; 37 of 37 passed alone right after). A spec that
		// fails for a reason fails twice; one that needed the second is
		// named here.
		r := conformanceRun{focus: focusOf(conformanceSubset), procs: 2, timeout: 15 * time.Minute, results: filepath.Join(dir, "subset"), attempts: 2}
		s, err := r.run(t.Context(), t, e2eTest, ginkgo, e.kubeconfig, e.kubectl)
		t.Logf("FIGURE conformance subset (%d specs) on the 3 + 2 lab: %s", len(conformanceSubset), s)
		for _, f := range s.Flaky {
			t.Logf("passed on a second attempt: %s", f)
		}
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

// TestReadJUnit: the summary counts specs by status, leaves the suite's own
// nodes out of passed and skipped, and counts a failed one of them.
func TestReadJUnit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junit.xml")
	x := `<testsuites><testsuite>
<testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
<testcase name="[It] a" status="passed"></testcase>
<testcase name="[It] b" status="skipped"></testcase>
<testcase name="[It] c" status="failed"><failure message="boom&#xA;more"></failure></testcase>
<testcase name="[It] d" status="interrupted"></testcase>
<testcase name="[ReportAfterSuite] x" status="failed"><failure message="report"></failure></testcase>
</testsuite></testsuites>`
	if err := os.WriteFile(p, []byte(x), 0o644); err != nil {
		t.Fatal(err)
	}
	s := conformanceSummary{JUnit: p}
	if err := s.readJUnit(); err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Skipped != 1 || s.Failed != 3 {
		t.Errorf("passed %d skipped %d failed %d, want 1 1 3", s.Passed, s.Skipped, s.Failed)
	}
	if len(s.FailedSpecs) != 3 || s.FailedSpecs[0] != "[It] c (failed): boom" {
		t.Errorf("failed specs: %q", s.FailedSpecs)
	}
}

// flakySpecs finds ginkgo's mark of a spec that passed on a later attempt,
// with the spec's name from the next line; a log without one has none.
func TestFlakySpecs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "e2e.log")
	log := "------------------------------\n" +
		"↺ [FLAKEY TEST - TOOK 2 ATTEMPTS TO PASS] [31.2 seconds]\n" +
		"[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition creating/deleting custom resource definition objects works [Conformance]\n" +
		"k8s.io/kubernetes/test/e2e/apimachinery/custom_resource_definition.go:58\n" +
		"------------------------------\n•••\n"
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := flakySpecs(p)
	if len(got) != 1 || !strings.HasPrefix(got[0], "[FLAKEY TEST - TOOK 2 ATTEMPTS TO PASS]") || !strings.Contains(got[0], "creating/deleting custom resource definition objects works") {
		t.Fatalf("%q", got)
	}
	if err := os.WriteFile(p, []byte("•••\nRan 37 of 7579 Specs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := flakySpecs(p); len(got) != 0 {
		t.Fatalf("no flaky spec: %q", got)
	}
}
