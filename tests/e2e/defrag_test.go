package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/verify"
)

// Issue 11's etcd maintenance on the running lab: 'hardway etcd defrag'
// keeps an apiserver ready and the etcd quorum at every poll and really
// shrinks the fragmented members; verify names the NOSPACE sequence for a
// real NOSPACE alarm, and that sequence clears it. Depends only on the
// first subtest (the cold up); leaves every verify check passing.
func (e *env) defragScenarios(t *testing.T) {
	t.Run("etcd defrag keeps an apiserver ready and the quorum, and shrinks the fragmented members", func(t *testing.T) {
		e.t = t
		e.defragUnderPolling(t)
	})
	t.Run("etcd NOSPACE: verify names compact, defrag, disarm and the quota; that sequence clears it", func(t *testing.T) {
		e.t = t
		e.noSpaceRecovery(t)
	})
}

// labClients are the test's own clients: the admin's kubeconfig aimed at
// controller-1's apiserver (the server the lab's admin kubeconfig names
// while the inventory has no apiServerEndpoint, and an address its
// certificate always covers), and etcd with the apiserver's client
// certificate, both straight over the lab bridge.
func (e *env) labClients(t *testing.T) (kubernetes.Interface, *etcd.Client, []string) {
	t.Helper()
	st := state.Dir(filepath.Join(filepath.Dir(e.inv), ".hardway"))
	cs, _, err := kube.Client(st.Kubeconfig("admin"), "https://"+net.JoinHostPort(e.res.Hosts[0].Address, "6443"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// etcd's server certificates are signed by what its trust bundle
	// holds: the etcd CA in a cluster made since etcd got one, the cluster
	// CA in an older one.
	trust := st.Cert(pki.EtcdTrustBundle)
	if _, err := os.Stat(trust); err != nil {
		trust = st.Cert("ca")
	}
	pool, err := readPool(trust)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(st.Cert("apiserver-etcd-client"), st.Key("apiserver-etcd-client"))
	if err != nil {
		t.Fatal(err)
	}
	var eps []string
	for _, h := range e.res.Hosts {
		eps = append(eps, "https://"+net.JoinHostPort(h.Address, "2379"))
	}
	cli, err := etcd.New(etcd.Config{Endpoints: eps, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cs, cli, eps
}

type defragJSON struct {
	DryRun  bool `json:"dryRun"`
	Members []struct {
		Name        string `json:"name"`
		Leader      bool   `json:"leader"`
		DBSize      int64  `json:"dbSize"`
		Free        int64  `json:"free"`
		Defrag      bool   `json:"defrag"`
		Reason      string `json:"reason"`
		DBSizeAfter int64  `json:"dbSizeAfter"`
	} `json:"members"`
	Actions []struct {
		Host string `json:"host"`
		Kind string `json:"kind"`
		Desc string `json:"desc"`
	} `json:"actions"`
}

func (e *env) defragJSON(t *testing.T, args ...string) defragJSON {
	t.Helper()
	code, out, errs := e.hardway(append([]string{"etcd", "defrag", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("etcd defrag %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	t.Logf("etcd defrag %v:\n%s", args, errs)
	var r defragJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return r
}

func (e *env) defragUnderPolling(t *testing.T) {
	cs, cli, eps := e.labClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Fragmentation, bounded: 24 ConfigMaps of 512 KiB written and deleted
	// (12 MiB), then the history compacted, so their pages are free in
	// every member's file.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hardway-defrag"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	blob := strings.Repeat("d", 512<<10)
	for i := range 24 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("frag-%d", i)}, Data: map[string]string{"blob": blob}}
		if _, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CoreV1().ConfigMaps(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.hardway("etcd", "compact"); code != 0 || !strings.Contains(out, "compacted etcd to revision") {
		t.Fatalf("etcd compact: exit %d\n%s\n%s", code, out, errs)
	}
	// Each member frees the pages in a commit after its compaction (the
	// apiservers' lease renewals write every few seconds).
	deadline := time.Now().Add(time.Minute)
	for {
		short := 0
		for _, ep := range eps {
			st, err := cli.Status(ctx, ep)
			if err != nil || st.DBSize-st.DBSizeInUse < 8<<20 {
				short++
			}
		}
		if short == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d member(s) have less than 8 MiB free a minute after the compaction", short)
		}
		time.Sleep(time.Second)
	}

	// The dry run plans every member, the leader last after the move, and
	// changes nothing: no file shrinks.
	dry := e.defragJSON(t, "--dry-run")
	var leader string
	for _, m := range dry.Members {
		if !m.Defrag || m.Free < 8<<20 {
			t.Errorf("dry run: %+v", m)
		}
		if m.Leader {
			leader = m.Name
		}
	}
	n := len(dry.Actions)
	if !dry.DryRun || n != 4 || dry.Actions[n-2].Desc != "move etcd leadership from "+leader+" to a healthy follower" || dry.Actions[n-1].Host != leader {
		t.Fatalf("dry run plan: %+v", dry.Actions)
	}
	for _, m := range dry.Members {
		for i, ep := range eps {
			if e.res.Hosts[i].Name != m.Name {
				continue
			}
			if st, err := cli.Status(ctx, ep); err != nil || st.DBSize < m.DBSize {
				t.Errorf("%s after the dry run: %d bytes (was %d), %v", m.Name, st.DBSize, m.DBSize, err)
			}
		}
	}

	// The poller: every 150 ms, /readyz of controller-1's apiserver (2 s
	// limit) and the status of every etcd member (1 s limit each), for as
	// long as the defragmentation runs (at most 5 minutes).
	var polls, notReady, noQuorum atomic.Int32
	var worst atomic.Int64
	var failMu sync.Mutex
	var fails []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		end := time.Now().Add(5 * time.Minute)
		for time.Now().Before(end) {
			select {
			case <-stop:
				return
			default:
			}
			polls.Add(1)
			start := time.Now()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, rerr := kube.Readyz(rctx, cs)
			cancel()
			worst.Store(max(worst.Load(), int64(time.Since(start))))
			var answered atomic.Int32
			var swg sync.WaitGroup
			for _, ep := range eps {
				swg.Add(1)
				go func() {
					defer swg.Done()
					sctx, cancel := context.WithTimeout(ctx, time.Second)
					defer cancel()
					if _, err := cli.Status(sctx, ep); err == nil {
						answered.Add(1)
					}
				}()
			}
			swg.Wait()
			if rerr != nil {
				notReady.Add(1)
				failMu.Lock()
				fails = append(fails, fmt.Sprintf("%s readyz: %v", time.Now().Format("15:04:05.000"), rerr))
				failMu.Unlock()
			}
			if int(answered.Load()) < len(eps)/2+1 {
				noQuorum.Add(1)
				failMu.Lock()
				fails = append(fails, fmt.Sprintf("%s only %d members answered", time.Now().Format("15:04:05.000"), answered.Load()))
				failMu.Unlock()
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	res := e.defragJSON(t)
	close(stop)
	wg.Wait()
	t.Logf("%d polls during the defragmentation; slowest /readyz %s", polls.Load(), time.Duration(worst.Load()).Round(time.Millisecond))
	if notReady.Load() > 0 || noQuorum.Load() > 0 || polls.Load() < 5 {
		t.Errorf("%d polls: %d without a ready apiserver, %d without an etcd majority:\n%s", polls.Load(), notReady.Load(), noQuorum.Load(), strings.Join(fails, "\n"))
	}
	// Every member defragmented, the leader last after the move, and each
	// file smaller by at least most of what was free.
	var descs []string
	for _, a := range res.Actions {
		descs = append(descs, a.Host+": "+a.Desc)
	}
	if len(res.Actions) != 4 || res.Actions[2].Desc != "move etcd leadership from "+leader+" to a healthy follower" || res.Actions[3].Host != leader {
		t.Errorf("actions:\n%s", strings.Join(descs, "\n"))
	}
	for _, m := range res.Members {
		if !m.Defrag || m.DBSizeAfter == 0 || m.DBSizeAfter > m.DBSize-m.Free/2 {
			t.Errorf("%s: %d bytes, %d free, after %d", m.Name, m.DBSize, m.Free, m.DBSizeAfter)
		}
		if m.Leader {
			leader = m.Name
		}
	}
	for i, ep := range eps {
		if e.res.Hosts[i].Name != leader {
			continue
		}
		if st, err := cli.Status(ctx, ep); err != nil || st.Leader == st.MemberID {
			t.Errorf("%s still leads after the defragmentation: %+v %v", leader, st, err)
		}
	}

	// Right after, nothing is worth a defragmentation: every member skipped.
	again := e.defragJSON(t, "--dry-run")
	for _, m := range again.Members {
		if m.Defrag || !strings.Contains(m.Reason, "under the") {
			t.Errorf("after the defragmentation: %+v", m)
		}
	}
	if len(again.Actions) != 0 {
		t.Errorf("planned again: %+v", again.Actions)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if f := failures(e.verify()); len(f) > 0 {
		t.Fatalf("verify after the defragmentation:\n  %s", strings.Join(f, "\n  "))
	}
}

// A real NOSPACE alarm, raised through etcd's alarm API as etcd raises it
// when a file reaches the quota (filling the 2 GiB quota is neither cheap
// nor bounded): the cluster really refuses writes. verify names the
// sequence; the sequence, run as named, clears it. The alarm lasts about
// 20 s; a controller that loses its lease meanwhile is restarted by systemd.
func (e *env) noSpaceRecovery(t *testing.T) {
	cs, cli, eps := e.labClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := cli.Status(ctx, eps[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.RaiseNoSpace(ctx, st.MemberID); err != nil {
		t.Fatal(err)
	}
	disarmed := false
	defer func() {
		if !disarmed { // leave no alarm behind for the next subtests
			cli.DisarmNoSpace(context.Background())
		}
	}()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nospace-probe", Namespace: "default"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "space exceeded") {
		t.Fatalf("a write under NOSPACE: %v", err)
	}
	var alarm *verify.Result
	for _, r := range e.verify().Results {
		if r.Check == "etcd/alarms" {
			alarm = &r
		}
	}
	if alarm == nil || alarm.Status != verify.Fail || !strings.Contains(alarm.Message, "NOSPACE raised by "+e.res.Hosts[1].Name) ||
		!strings.Contains(alarm.Message, "2.0 GiB (--quota-backend-bytes") {
		t.Fatalf("etcd/alarms: %+v", alarm)
	}
	// The hint's sequence, in order, each step run as printed.
	at := 0
	for _, step := range []string{"1) 'hardway etcd compact -i ", "2) 'hardway etcd defrag -i ", " --all'", "3) 'hardway etcd disarm -i ",
		"alarm disarm'", "4) check the quota: 'hardway etcd status -i ", "--quota-backend-bytes"} {
		i := strings.Index(alarm.Hint[at:], step)
		if i < 0 {
			t.Fatalf("hint lacks %q (in order):\n%s", step, alarm.Hint)
		}
		at += i + len(step)
	}
	for _, args := range [][]string{{"etcd", "compact"}, {"etcd", "defrag", "--all"}, {"etcd", "disarm"}} {
		code, out, errs := e.hardway(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errs)
		}
		t.Logf("%v:\n%s", args, out)
		if args[1] == "disarm" {
			disarmed = true
			if !strings.Contains(out, "disarmed NOSPACE of "+e.res.Hosts[1].Name) {
				t.Errorf("disarm: %s", out)
			}
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write after the recovery: %v", err)
	}
	cs.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{})
	// Controllers that lost their lease during the alarm come back.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		f := failures(e.verify())
		if len(f) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verify after the recovery:\n  %s", strings.Join(f, "\n  "))
		}
		time.Sleep(3 * time.Second)
	}
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}
