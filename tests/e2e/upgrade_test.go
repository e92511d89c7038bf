package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hardway/hardway/internal/labtest"
	"github.com/hardway/hardway/internal/mirrortest"
	"github.com/hardway/hardway/pkg/lab"
)

// The upgrade suite: a 3 + 2 lab built on the minor before the mirror's
// default, with a workload whose PodDisruptionBudget allows one pod down,
// moved to the default by 'hardway upgrade apply' while pollers on both
// workers ask /readyz through the node-local load balancer, write a
// ConfigMap every second and read the Deployment's available replicas.
// The first apply is killed by its PID during the second worker; the next
// one finishes.

const upgradeWorkload = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers:
      - {name: hello, image: %s, imagePullPolicy: Never, ports: [{containerPort: 8080}], readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 3
  selector: {matchLabels: {app: web}}
`

// upgradePoller runs on a worker, through its load balancer (127.0.0.1:6443):
// /readyz every 150 ms (anonymous, as a load balancer's probe would), and
// every second a ConfigMap PUT and a read of the Deployment's available
// replicas with the admin certificate copied there for the test. One line
// per poll: "readyz <unix ms> <http code> <ms taken>", "cm <s> <code>",
// "avail <s> <n or ?>". Bounded: it ends by itself after 30 minutes.
const upgradePoller = `set -u
cert=/root/e2e-admin.crt key=/root/e2e-admin.key api=https://127.0.0.1:6443
cm=upgrade-poll-$(hostname)
end=$(( $(date +%s) + 1800 )); last=0; i=0
while [ "$(date +%s)" -lt "$end" ]; do
  t0=$(date +%s%3N)
  code=$(curl -sk --max-time 5 -o /tmp/readyz.out -w '%{http_code}' $api/readyz) || true
  [ "$code" = 200 ] && [ "$(cat /tmp/readyz.out)" != ok ] && code=200-not-ok
  echo "readyz $t0 $code $(( $(date +%s%3N) - t0 ))"
  now=$(date +%s)
  if [ "$now" != "$last" ]; then
    last=$now; i=$((i+1))
    c=$(curl -sk --max-time 5 --cert $cert --key $key -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
      --data "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"$cm\",\"namespace\":\"default\"},\"data\":{\"n\":\"$i\"}}" \
      $api/api/v1/namespaces/default/configmaps/$cm) || true
    echo "cm $now $c"
    a=$(curl -sk --max-time 5 --cert $cert --key $key $api/apis/apps/v1/namespaces/default/deployments/web | sed -n 's/.*"availableReplicas": *\([0-9]*\).*/\1/p' | head -1) || true
    echo "avail $now ${a:-?}"
  fi
  sleep 0.15
done
`

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type poller struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// startPoller runs upgradePoller on worker over the lab's SSH; the test
// ends the ssh process by its PID.
func (e *workersEnv) startPoller(t *testing.T, worker string) *poller {
	t.Helper()
	st := filepath.Join(filepath.Dir(e.inv), ".hardway/pki")
	for _, f := range []string{"admin.crt", "admin.key"} {
		data, err := os.ReadFile(filepath.Join(st, f))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ssh", "-F", e.res.SSHConfig, worker, "umask 077; cat > /root/e2e-"+f)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: copy %s: %v %s", worker, f, err, out)
		}
	}
	p := &poller{out: &syncBuffer{}}
	p.cmd = exec.Command("ssh", "-F", e.res.SSHConfig, worker, "bash -s")
	p.cmd.Stdin = strings.NewReader(upgradePoller)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *poller) stop() {
	if p.cmd.ProcessState == nil {
		syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
		p.cmd.Wait()
	}
}

// pollStats are what a poller saw.
type pollStats struct {
	readyzOK, readyzBad, cmOK, cmBad int
	// availBelow counts reads that saw fewer than 3 available (never
	// tolerated: that is the PDB broken), availFailed reads that got no
	// answer (an apiserver poll like the others).
	availBelow, availFailed int
	longest                 time.Duration
	fails                   []string
	failedAt                []time.Time
	minAvail                int
}

// broken says why the poller's record fails the scenario, or "".
func (s pollStats) broken() string {
	switch {
	case s.readyzBad > toleratedFails || s.cmBad > toleratedFails || s.availFailed > toleratedFails:
		return fmt.Sprintf("more than %d failed poll of a kind", toleratedFails)
	case s.availBelow > 0:
		return "fewer than 3 replicas available"
	case s.readyzOK < 100 || s.cmOK < 30:
		return "too few polls to tell"
	}
	return ""
}

func (p *poller) stats() pollStats {
	s := pollStats{minAvail: 1 << 30}
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		bad := func() {
			if len(s.fails) < 20 {
				s.fails = append(s.fails, sc.Text())
				// readyz lines carry Unix milliseconds, the others seconds.
				if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					if f[0] == "readyz" {
						s.failedAt = append(s.failedAt, time.UnixMilli(n))
					} else {
						s.failedAt = append(s.failedAt, time.Unix(n, 0))
					}
				}
			}
		}
		switch f[0] {
		case "readyz":
			if len(f) == 4 {
				if ms, err := strconv.Atoi(f[3]); err == nil {
					s.longest = max(s.longest, time.Duration(ms)*time.Millisecond)
				}
			}
			if f[2] == "200" {
				s.readyzOK++
			} else {
				s.readyzBad++
				bad()
			}
		case "cm":
			if f[2] == "200" {
				s.cmOK++
			} else {
				s.cmBad++
				bad()
			}
		case "avail":
			n, err := strconv.Atoi(f[2])
			switch {
			case err != nil:
				s.availFailed++
				bad()
			case n < 3:
				s.availBelow++
				bad()
			}
			if err == nil {
				s.minAvail = min(s.minAvail, n)
			}
		}
	}
	return s
}

// workerWorld is every pushed file's stat and digest and every worker
// unit's start time, on the workers.
func (e *workersEnv) workerWorld() map[string]string {
	e.t.Helper()
	w := map[string]string{}
	for _, h := range e.res.Workers {
		files, err := e.ssh(h.Name, pushedFiles)
		if err != nil || strings.Count(files, "\n") < 10 {
			e.t.Fatalf("%s: pushed files: %v\n%s", h.Name, err, files)
		}
		units, err := e.ssh(h.Name, `for u in containerd kubelet kube-proxy hardway-apiserver-lb; do echo "$u $(systemctl show -p ActiveState -p ActiveEnterTimestampMonotonic --value $u | tr '\n' ' ')"; done`)
		if err != nil {
			e.t.Fatalf("%s: units: %v %s", h.Name, err, units)
		}
		w[h.Name] = files + units
	}
	return w
}

// unchanged fails t unless every host's files and unit start times are
// as before; withLocal: the local directory (inventory, lock, state) too.
func (e *workersEnv) unchanged(t *testing.T, what string, cp world, workers map[string]string, withLocal bool) {
	t.Helper()
	now, nowWorkers := e.world(), e.workerWorld()
	for h, before := range cp.hosts {
		if now.hosts[h] != before {
			t.Errorf("%s changed %s:\n%s", what, h, diffLines(before, now.hosts[h]))
		}
	}
	for h, before := range workers {
		if after := nowWorkers[h]; after != before {
			t.Errorf("%s changed %s:\n%s", what, h, diffLines(before, after))
		}
	}
	if withLocal && fmt.Sprint(now.local) != fmt.Sprint(cp.local) {
		t.Errorf("%s changed the local directory (inventory, lock, state)", what)
	}
}

func TestUpgrade(t *testing.T) {
	sideBySide(t)
	labtest.RequireRoot(t)
	mirror := mirrortest.Dir()
	from, to := mirrortest.PreviousKubernetes(), mirrortest.Kubernetes
	for _, p := range []string{"kubernetes/release/" + from + "/bin/linux/amd64/kube-apiserver", "kubernetes/release/" + to + "/bin/linux/amd64/kubelet", "images/SHA256SUMS"} {
		if _, err := os.Stat(filepath.Join(mirror, p)); err != nil {
			t.Fatalf("the release mirror lacks %s: run 'make mirror' (%v)", p, err)
		}
	}
	dir := t.TempDir()
	l, res := labtest.Start(t, lab.Config{Dir: dir, Prefix: "hwu", Net: "10.240.6", Workers: 2, Mirror: mirror, ServeMirror: true, KubernetesVersion: from})
	e := &workersEnv{env: &env{t: t, inv: res.Inventory, cacheDir: filepath.Join(dir, "cache"), res: res, mirror: mirror, lab: l},
		kubectl: mirrortest.KubeBinary(t, "kubectl"), lab: l,
		kubeconfig: filepath.Join(filepath.Dir(res.Inventory), ".hardway/kubeconfigs/admin.kubeconfig")}
	bin := filepath.Join(dir, "hardway")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/hardway/hardway/cmd/hardway").CombinedOutput(); err != nil {
		t.Fatalf("build hardway: %v\n%s", err, out)
	}
	nodeVersions := func() string {
		return strings.TrimSpace(e.mustK("get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion} {end}`))
	}

	t.Run("cold up on the previous minor, then verify passes", func(t *testing.T) {
		e.t = t
		e.mustUp()
		if f := failures(e.verify()); len(f) > 0 {
			t.Fatalf("verify after up:\n  %s", strings.Join(f, "\n  "))
		}
		if got, want := nodeVersions(), "worker-1="+from+" worker-2="+from; got != want {
			t.Fatalf("nodes: %s, want %s", got, want)
		}
	})

	t.Run("a Deployment of 4 over both workers, a PDB of minAvailable 3, a Secret", func(t *testing.T) {
		e.t = t
		e.apply(fmt.Sprintf(upgradeWorkload, helloImage))
		e.mustK("rollout", "status", "deployment/web", "--timeout=180s")
		perNode := map[string]int{}
		for _, n := range strings.Fields(e.mustK("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.nodeName}")) {
			perNode[n]++
		}
		if perNode["worker-1"] == 0 || perNode["worker-2"] == 0 {
			t.Fatalf("the pods are not spread over both workers: %v", perNode)
		}
		e.mustK("create", "secret", "generic", "upgrade-keep", "--from-literal=k=before-the-upgrade")
		for _, w := range []string{"worker-1", "worker-2"} {
			e.mustK("create", "configmap", "upgrade-poll-"+w, "--from-literal=n=0")
		}
	})

	t.Run("a skipped minor, a kubelet newer than the apiservers and an etcd below the patch floor are refused, and no host changes", func(t *testing.T) {
		e.t = t
		cp, workers := e.world(), e.workerWorld()
		code, out, errs := e.hardway("upgrade", "plan", "--to", "1.37", "--offline")
		if code != 1 || !strings.Contains(out, "blocked: control-plane-one-minor") || !strings.Contains(out, "skips 1.36") ||
			!strings.Contains(out, "hardway upgrade apply --to 1.36") {
			t.Errorf("plan --to 1.37: exit %d\n%s\n%s", code, out, errs)
		}
		code, out, errs = e.hardway("upgrade", "apply", "--to", "1.37", "--offline", "--no-backup")
		if code != 1 || !strings.Contains(out, "skips 1.36") || !strings.Contains(errs, "nothing was changed") {
			t.Errorf("apply --to 1.37: exit %d\n%s\n%s", code, out, errs)
		}
		e.unchanged(t, "a refused skipped minor", cp, workers, false)

		// worker-2's kubelet binary replaced by the target's (renamed in:
		// the running kubelet keeps its own), then put back as it was.
		newer, err := os.ReadFile(filepath.Join(mirror, "kubernetes/release", to, "bin/linux/amd64/kubelet"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ssh", "-F", e.res.SSHConfig, "worker-2", "set -e; mv /usr/local/bin/kubelet /root/kubelet.keep; cat > /usr/local/bin/.kubelet.new; chmod 755 /usr/local/bin/.kubelet.new; mv /usr/local/bin/.kubelet.new /usr/local/bin/kubelet")
		cmd.Stdin = bytes.NewReader(newer)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("put the newer kubelet: %v %s", err, out)
		}
		code, out, errs = e.hardway("upgrade", "plan", "--to", "1.36", "--offline")
		if out2, err := e.ssh("worker-2", "mv -f /root/kubelet.keep /usr/local/bin/kubelet"); err != nil {
			t.Fatalf("put the kubelet back: %v %s", err, out2)
		}
		if code != 1 || !strings.Contains(out, "blocked: kubelet-kube-proxy: kubelet on worker-2 runs "+to+", newer than the oldest apiserver") {
			t.Errorf("plan with a newer kubelet: exit %d\n%s\n%s", code, out, errs)
		}
		e.unchanged(t, "a refused newer kubelet", cp, workers, false)

		// controller-2's etcd answering --version as a 3.5 below the floor
		// (a script renamed in for the plan's read; etcd keeps running its
		// own binary), then put back.
		if out, err := e.ssh("controller-2", `set -e; mv /usr/local/bin/etcd /root/etcd.keep; printf '#!/bin/sh\necho "etcd Version: 3.5.24"\n' > /usr/local/bin/.etcd.new; chmod 755 /usr/local/bin/.etcd.new; mv /usr/local/bin/.etcd.new /usr/local/bin/etcd`); err != nil {
			t.Fatalf("put the old etcd version: %v %s", err, out)
		}
		code, out, errs = e.hardway("upgrade", "plan", "--to", "1.36", "--offline")
		if out2, err := e.ssh("controller-2", "mv -f /root/etcd.keep /usr/local/bin/etcd"); err != nil {
			t.Fatalf("put etcd back: %v %s", err, out2)
		}
		if code != 1 || !strings.Contains(out, "blocked: etcd-patch-floor: etcd on controller-2 runs v3.5.24; moving to 3.6 needs v3.5.26 or later first") ||
			!strings.Contains(out, "set etcdVersion: v3.5.26") {
			t.Errorf("plan with an etcd below the floor: exit %d\n%s\n%s", code, out, errs)
		}
		e.unchanged(t, "a refused etcd below the floor", cp, workers, false)
	})

	t.Run("upgrade plan shows every component moving and passes", func(t *testing.T) {
		e.t = t
		code, out, errs := e.hardway("upgrade", "plan")
		if code != 0 || !strings.Contains(out, "the upgrade is possible") {
			t.Fatalf("plan: exit %d\n%s\n%s", code, out, errs)
		}
		for _, h := range []string{"controller-1", "controller-2", "controller-3"} {
			for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				if !regexp.MustCompile(h + `\s+` + c + `\s+` + regexp.QuoteMeta(from) + `\s+` + regexp.QuoteMeta(to) + `\s+upgrade`).MatchString(out) {
					t.Errorf("plan lacks %s %s %s → %s:\n%s", h, c, from, to, out)
				}
			}
		}
		for _, w := range []string{"worker-1", "worker-2"} {
			for _, c := range []string{"kubelet", "kube-proxy"} {
				if !regexp.MustCompile(w + `\s+` + c + `\s+` + regexp.QuoteMeta(from) + `\s+` + regexp.QuoteMeta(to) + `\s+upgrade`).MatchString(out) {
					t.Errorf("plan lacks %s %s %s → %s:\n%s", w, c, from, to, out)
				}
			}
		}
	})

	t.Run("upgrade apply --dry-run lists the phases and changes nothing", func(t *testing.T) {
		e.t = t
		cp, workers := e.world(), e.workerWorld()
		code, out, errs := e.hardway("upgrade", "apply", "--dry-run", "--cache-dir", e.cacheDir)
		if code != 0 {
			t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
		}
		for _, want := range []string{"kubernetesVersion: " + from + " → " + to, "take a backup", "phase 1/7: kube-apiserver " + from + " → " + to + " on controller-1",
			"phase 5/7: worker-1: cordon, drain, kubelet " + from + " → " + to, "phase 7/7: a whole up", "nothing was changed (--dry-run)"} {
			if !strings.Contains(out, want) {
				t.Errorf("dry run lacks %q:\n%s", want, out)
			}
		}
		e.unchanged(t, "upgrade apply --dry-run", cp, workers, true)
	})

	t.Run("upgrade apply killed by its PID during the second worker, then finished; every poll succeeds (but at most one of a kind per worker), never fewer than 3 available", func(t *testing.T) {
		e.t = t
		pollers := []*poller{e.startPoller(t, "worker-1"), e.startPoller(t, "worker-2")}
		time.Sleep(3 * time.Second) // a baseline before anything moves
		env := append(os.Environ(), "HARDWAY_BACKUP_PASSPHRASE=upgrade-e2e-passphrase")
		start := time.Now()
		run := exec.Command(bin, "upgrade", "apply", "--to", "1.36", "-i", e.inv, "--cache-dir", e.cacheDir)
		run.Env = env
		first := &syncBuffer{}
		run.Stdout, run.Stderr = first, first
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- run.Wait() }()
		killed := false
		deadline := time.Now().Add(25 * time.Minute)
	wait:
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				t.Fatalf("the first apply ended before worker-2 was drained: %v\n%s", err, first.String())
			default:
			}
			if strings.Contains(first.String(), "[upgrade] worker-2: drained") {
				if err := syscall.Kill(run.Process.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-exited
				killed = true
				break wait
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !killed {
			syscall.Kill(run.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Fatalf("worker-2 was not drained within 25 minutes:\n%s", first.String())
		}
		t.Logf("killed the first apply at %s", time.Since(start).Round(time.Second))
		if !strings.Contains(first.String(), "backup ") {
			t.Errorf("the first apply took no backup:\n%s", first.String())
		}
		// up refuses while the upgrade is half-way.
		if code, out, errs := e.hardway("up", "--dry-run"); code == 0 || !strings.Contains(errs+out, "is half-way") {
			t.Errorf("up during the upgrade: exit %d\n%s\n%s", code, out, errs)
		}
		if r := e.verify(); !strings.Contains(strings.Join(failures(r), "\n"), "half-way") {
			t.Errorf("verify does not report the half-way upgrade:\n  %s", strings.Join(failures(r), "\n  "))
		}
		// No passphrase: the run that goes on has its backup already.
		second := exec.Command(bin, "upgrade", "apply", "-i", e.inv, "--cache-dir", e.cacheDir)
		out2, err := second.CombinedOutput()
		if err != nil {
			t.Fatalf("the second apply: %v\n%s\nthe first:\n%s", err, out2, first.String())
		}
		took := time.Since(start)
		t.Logf("the first apply, killed:\n%s\nthe second:\n%s", first.String(), out2)
		for _, p := range pollers {
			p.stop()
		}
		if !strings.Contains(string(out2), "going on: an upgrade from "+from+" to "+to) || !strings.Contains(string(out2), "upgraded to "+to) ||
			strings.Contains(string(out2), "backup before the upgrade") {
			t.Errorf("the second apply:\n%s", out2)
		}
		// The figures: each phase's time from both runs' "done in" lines.
		var cpT, wT time.Duration
		for _, m := range regexp.MustCompile(`== phase "([^"]+)" done in (\S+)`).FindAllStringSubmatch(first.String()+string(out2), -1) {
			d, _ := time.ParseDuration(m[2])
			switch {
			case strings.HasPrefix(m[1], "worker "):
				wT += d
			case m[1] != "finish":
				cpT += d
			}
		}
		var longest time.Duration
		for i, p := range pollers {
			s := p.stats()
			longest = max(longest, s.longest)
			t.Logf("poller on worker-%d: /readyz %d ok, %d failed; ConfigMap writes %d ok, %d failed; fewest available %d (%d reads below 3, %d failed); longest /readyz %s",
				i+1, s.readyzOK, s.readyzBad, s.cmOK, s.cmBad, s.minAvail, s.availBelow, s.availFailed, s.longest)
			if len(s.fails) > 0 {
				t.Logf("poller on worker-%d, failed polls:\n  %s\netcd around them:\n%s", i+1, strings.Join(s.fails, "\n  "), e.etcdEvents(s.failedAt))
			}
			if why := s.broken(); why != "" {
				t.Errorf("poller on worker-%d saw the upgrade break: %s", i+1, why)
			}
		}
		t.Logf("FIGURE upgrade %s → %s of 3 controllers + 2 workers: %s in all (a killed run and the one that finished it); control plane %s, workers %s (drain included); longest /readyz poll through a worker's load balancer %s",
			from, to, took.Round(time.Second), cpT.Round(time.Second), wT.Round(time.Second), longest.Round(time.Millisecond))
	})

	t.Run("after the upgrade: every Node on the new kubelet, the Secret reads back, verify and smoke pass, up changes nothing", func(t *testing.T) {
		e.t = t
		if got, want := nodeVersions(), "worker-1="+to+" worker-2="+to; got != want {
			t.Errorf("nodes: %s, want %s", got, want)
		}
		if out := e.mustK("get", "nodes", "-o", "jsonpath={.items[*].spec.unschedulable}"); strings.TrimSpace(out) != "" {
			t.Errorf("a Node is still cordoned: %q", out)
		}
		if got := e.mustK("get", "secret", "upgrade-keep", "-o", "jsonpath={.data.k}"); got != "YmVmb3JlLXRoZS11cGdyYWRl" {
			t.Errorf("the Secret reads back %q", got)
		}
		code, out, errs := e.hardway("upgrade", "plan", "--to", to, "--offline")
		if code != 0 || strings.Contains(out, " upgrade\n") {
			t.Errorf("plan after the upgrade: exit %d\n%s\n%s", code, out, errs)
		}
		inv, err := os.ReadFile(e.inv)
		if err != nil || !strings.Contains(string(inv), "kubernetesVersion: "+to) {
			t.Errorf("the inventory does not say %s: %v\n%s", to, err, inv)
		}
		if lock, err := os.ReadFile(filepath.Join(filepath.Dir(e.inv), "hardway.lock")); err != nil || !strings.Contains(string(lock), to) {
			t.Errorf("hardway.lock does not pin %s: %v", to, err)
		}
		if f := failures(e.verify()); len(f) > 0 {
			t.Errorf("verify after the upgrade:\n  %s", strings.Join(f, "\n  "))
		}
		if code, out, errs := e.hardway("smoke"); code != 0 {
			t.Errorf("smoke after the upgrade: exit %d\n%s\n%s", code, out, errs)
		}
		if out := e.mustUp("--dry-run"); !strings.Contains(out, "no changes") {
			t.Errorf("up after the upgrade would change:\n%s", out)
		}
		backups, _ := filepath.Glob(filepath.Join(filepath.Dir(e.inv), "backups", "hardway-backup-*"))
		sort.Strings(backups)
		if len(backups) != 1 {
			t.Errorf("backups: %q, want the one taken before the upgrade", backups)
		}
	})
}
