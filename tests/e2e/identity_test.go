package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/state"
)

// hostFileSums is the sha256 of every file hardway keeps its identity and
// configs in on host (a missing file simply is not listed).
func (e *env) hostFileSums(t *testing.T, host string) string {
	t.Helper()
	out, err := e.ssh(host, "find /var/lib/kubernetes /etc/etcd /etc/systemd/system -maxdepth 1 -type f | sort | xargs sha256sum")
	if err != nil {
		t.Fatalf("%s: sums: %v %s", host, err, out)
	}
	return out
}

// damagedIdentityScenarios: one controller's copy of an identity file is
// damaged (the tutorials' classic literal ${ENCRYPTION_KEY}, a truncated
// ca.crt, a deleted service-account.key). That is drift: up --dry-run names
// the repair and changes nothing, up repairs it with no flag, verify passes,
// a Secret written before reads back, and the other hosts' files and units
// are untouched. A valid CA of another cluster there is still refused.
func (e *env) damagedIdentityScenarios(t *testing.T) {
	const victim = "controller-2"
	others := func() []string {
		var hs []string
		for _, h := range e.res.Hosts {
			if h.Name != victim {
				hs = append(hs, h.Name)
			}
		}
		return hs
	}
	othersState := func(t *testing.T) map[string]string {
		m := map[string]string{}
		for _, h := range others() {
			m[h] = e.hostFileSums(t, h)
		}
		for k, v := range e.activeSince() {
			if !strings.HasPrefix(k, victim+"/") {
				m[k] = v
			}
		}
		return m
	}
	for i, tc := range []struct {
		name, path, damage, repair string
	}{
		{"a literal ${ENCRYPTION_KEY}", "/var/lib/kubernetes/encryption-config.yaml",
			`sed -i 's/secret: .*/secret: ${ENCRYPTION_KEY}/' /var/lib/kubernetes/encryption-config.yaml && (systemctl restart kube-apiserver || true)`,
			"[identity] controller-2: repair /var/lib/kubernetes/encryption-config.yaml: the host's copy is damaged (a key is not base64"},
		{"a truncated ca.crt", "/var/lib/kubernetes/ca.crt",
			`head -c 300 /var/lib/kubernetes/ca.crt > /tmp/ca.crt && cat /tmp/ca.crt > /var/lib/kubernetes/ca.crt && rm /tmp/ca.crt`,
			"[identity] controller-2: repair /var/lib/kubernetes/ca.crt: the host's copy is damaged (no PEM certificate"},
		{"a deleted service-account.key", "/var/lib/kubernetes/service-account.key",
			`rm /var/lib/kubernetes/service-account.key`,
			"[push] controller-2: repair /var/lib/kubernetes/service-account.key (0600, missing; from the state directory"},
	} {
		t.Run("a damaged identity file on one controller, "+tc.name+": up --dry-run names the repair, up repairs it, nothing else moves", func(t *testing.T) {
			e.t = t
			name := fmt.Sprintf("hardway-e2e-drift-%d", i)
			e.kubectl(t, "create", "secret", "generic", name, "--from-literal=answer=42")
			before := othersState(t)
			if out, err := e.ssh(victim, tc.damage); err != nil {
				t.Fatalf("damage: %v %s", err, out)
			}
			damaged := e.hostFileSums(t, victim)

			dry := e.mustUp("--dry-run")
			// A dry run says what it would do: "[step] would host: ...".
			if want := strings.Replace(tc.repair, "] "+victim+": ", "] would "+victim+": ", 1); !strings.Contains(dry, want) {
				t.Errorf("the dry run does not name the repair %q:\n%s", want, dry)
			}
			if got := e.hostFileSums(t, victim); got != damaged {
				t.Fatalf("the dry run changed %s:\nbefore %s\nafter  %s", victim, damaged, got)
			}

			out := e.mustUp()
			if !strings.Contains(out, tc.repair) {
				t.Errorf("up does not name the repair %q:\n%s", tc.repair, out)
			}
			// The broken apiserver took its host's leader-elected scheduler or
			// controller-manager with it (they exit on a lost lease, and
			// systemd starts them again after RestartSec): verify may see
			// one of them between the two, for a few seconds.
			deadline := time.Now().Add(time.Minute)
			for {
				f := failures(e.verify())
				if len(f) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("verify after the repair:\n  %s", strings.Join(f, "\n  "))
				}
				t.Logf("verify, retried in 5 s:\n  %s", strings.Join(f, "\n  "))
				time.Sleep(5 * time.Second)
			}
			if got := e.kubectl(t, "get", "secret", name, "-o", "jsonpath={.data.answer}"); got != "NDI=" {
				t.Errorf("the Secret from before: %q", got)
			}
			if after := othersState(t); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("other hosts changed:\nbefore %v\nafter  %v", before, after)
			}
			if out := e.mustUp("--dry-run"); !strings.Contains(out, "no changes") {
				t.Errorf("not converged after the repair:\n%s", out)
			}
		})
	}

	t.Run("a valid CA of another cluster on one controller is refused; nothing is written", func(t *testing.T) {
		e.t = t
		inv, err := inventory.Load(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		other := state.Dir(filepath.Join(t.TempDir(), "other"))
		if _, err := pki.Generate(t.Context(), inv, other, pki.Options{}); err != nil {
			t.Fatal(err)
		}
		ca, err := os.ReadFile(other.Cert(pki.CA))
		if err != nil {
			t.Fatal(err)
		}
		const p = "/var/lib/kubernetes/ca.crt"
		if out, err := e.ssh(victim, "cp "+p+" /root/ca.crt.e2e && echo "+base64.StdEncoding.EncodeToString(ca)+" | base64 -d > "+p); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		sums := map[string]string{}
		for _, h := range e.res.Hosts {
			sums[h.Name] = e.hostFileSums(t, h.Name)
		}
		since := e.activeSince()
		code, out, errs := e.hardway("up")
		if code == 0 || !strings.Contains(errs, "controller-2: "+p+": another certificate than pki/ca.crt") || !strings.Contains(errs, "nothing was written") {
			t.Fatalf("up with another cluster's CA: exit %d\n%s\n%s", code, out, errs)
		}
		for _, h := range e.res.Hosts {
			if got := e.hostFileSums(t, h.Name); got != sums[h.Name] {
				t.Errorf("%s changed:\nbefore %s\nafter  %s", h.Name, sums[h.Name], got)
			}
		}
		if after := e.activeSince(); fmt.Sprint(after) != fmt.Sprint(since) {
			t.Errorf("services restarted:\nbefore %v\nafter  %v", since, after)
		}
		// Put the cluster's own CA back, byte for byte: nothing to do then.
		if out, err := e.ssh(victim, "cat /root/ca.crt.e2e > "+p+" && rm /root/ca.crt.e2e"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if out := e.mustUp(); !strings.Contains(out, "no changes") {
			t.Errorf("up after the CA was put back:\n%s", out)
		}
	})
}
