package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/units"
)

// `hardway certs renew`: the steps of `up` with one step of its own. The
// renew step reissues the named leaves from the existing CAs; push then
// sends only their files (the certificate, its key and the kubeconfigs that
// embed it), and the etcd, control-plane and workers steps restart exactly
// the components that read them, one host at a time behind up's own gates:
// an etcd member only while every other member is healthy, then waiting for
// it; an apiserver waiting for its /readyz before the next host; a worker
// waiting for its Node to be Ready. No other drift is pushed: a renewal is
// not the moment for an upgrade nobody asked for.

// StepRenew is the name of the renew step.
const StepRenew = "renew"

// RenewSteps are the steps of `hardway certs renew` for the leaves in
// Options.Renew: up's, with the renew step in the place of pki. The rbac
// step stays: a kubelet client certificate an earlier hardway issued in
// system:masters is renewed without the group, and from then on only the
// binding naming its CN lets the apiserver reach the kubelets (it reads
// the binding and applies it only when it differs).
func (c *Cluster) RenewSteps() []plan.Step {
	var steps []plan.Step
	for _, s := range c.upSteps() {
		if s.Name == StepDNS || s.Name == StepHost {
			continue // add-ons and the hosts' own setup are not certificates: a renewal leaves them as they are
		}
		if s.Name == StepPKI {
			s = plan.Step{Name: StepRenew,
				Doc:  "reissue the named leaf certificates from the existing CAs; rewrite the kubeconfigs that embed them",
				Plan: c.planRenew}
		}
		steps = append(steps, s)
	}
	return c.guarded(steps)
}

// renewLeaves are the table entries of Options.Renew, in table order.
func (c *Cluster) renewLeaves() []pki.Entry {
	var out []pki.Entry
	for _, e := range pki.Entries(c.Inv) {
		if !e.IsCA() && slices.Contains(c.opt.Renew, e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// planRenew reads each leaf's expiry; the action reissues them all.
func (c *Cluster) planRenew(_ context.Context, _ plan.Planned) ([]plan.Action, error) {
	leaves := c.renewLeaves()
	if len(leaves) == 0 {
		return nil, nil
	}
	now := time.Now()
	byName := map[string]pki.CheckResult{}
	for _, r := range pki.Check(c.Inv, c.opt.State, now) {
		byName[r.Kind+"/"+r.Name] = r
	}
	var names, lines []string
	for _, e := range leaves {
		names = append(names, e.Name)
		r := byName[pki.KindCertificate+"/"+e.Name]
		line := e.Name + ": "
		if r.NotAfter.IsZero() {
			line += "none on disk yet"
		} else {
			line += fmt.Sprintf("expires %s (%s left)", r.NotAfter.Format(time.DateOnly), r.Residual)
		}
		if kcs := pki.KubeconfigsOf(c.Inv, e.Name); len(kcs) > 0 {
			line += "; rewrites kubeconfig " + strings.Join(kcs, ", ")
		}
		lines = append(lines, line)
	}
	return []plan.Action{{Kind: plan.Reissue,
		Desc: fmt.Sprintf("reissue %d certificate(s) in %s from the existing CAs: %s", len(leaves), c.opt.State, strings.Join(names, ", ")),
		Diff: strings.Join(lines, "\n"),
		Do: func(ctx context.Context) error {
			rs, err := pki.Renew(ctx, c.Inv, c.opt.State, leaves, time.Now())
			for _, r := range rs {
				c.logf("[%s] %s: serial %s -> %s, valid until %s", StepRenew, r.Name, dash(r.OldSerial), r.Serial, r.NotAfter.Format(time.DateOnly))
			}
			return err
		}}}, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// renewing reports whether a pushed file comes from a leaf being renewed:
// its certificate, its key, or a kubeconfig that embeds it.
func (c *Cluster) renewing(s *units.Source) bool {
	if s == nil {
		return false
	}
	switch s.Kind {
	case units.SourceCert, units.SourceKey:
		return slices.Contains(c.opt.Renew, s.Name)
	case units.SourceKubeconfig:
		for _, k := range pki.Kubeconfigs(c.Inv) {
			if k.Name == s.Name && slices.Contains(c.opt.Renew, k.Cert) {
				return true
			}
		}
	}
	return false
}

// renewMode says whether this run is `certs renew`.
func (c *Cluster) renewMode() bool { return len(c.opt.Renew) > 0 }
