package cluster

import (
	"context"
	"time"

	"github.com/hardway/hardway/pkg/release"
)

// EtcdMemberStatus is what one member says about itself, for the daemon's
// metrics: `hardway verify` reports health as pass/fail, this adds who leads.
type EtcdMemberStatus struct {
	Name      string // the inventory host
	Reachable bool   // answered a status request
	Leader    bool   // the member the reachable members agree leads
	DBSize    int64  // bytes
}

// EtcdStatus asks every control-plane member for its status, each under
// its own short timeout so one stopped member does not hold up the others.
func (c *Cluster) EtcdStatus(ctx context.Context) ([]EtcdMemberStatus, error) {
	cli, err := c.etcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	out := make([]EtcdMemberStatus, len(c.Inv.ControlPlane))
	ids := make([]uint64, len(out))
	votes := map[uint64]int{}
	for i, h := range c.Inv.ControlPlane {
		out[i].Name = h.Name
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, c.etcdEndpoint(h))
		cancel()
		if err != nil {
			continue
		}
		out[i].Reachable, out[i].DBSize, ids[i] = true, st.DBSize, st.MemberID
		if st.Leader != 0 {
			votes[st.Leader]++
		}
	}
	// A member cut off from the others may still name an old leader: the
	// leader is the one most members name.
	var leader uint64
	for id, n := range votes {
		if n > votes[leader] || (n == votes[leader] && id < leader) {
			leader = id
		}
	}
	for i := range out {
		out[i].Leader = leader != 0 && ids[i] == leader
	}
	return out, nil
}

// Prepare renders the manifests and resolves the release set from the
// cache up front, so that a daemon refuses an inventory that cannot render
// or whose binaries are not cached instead of failing every run.
func (c *Cluster) Prepare(ctx context.Context) error {
	if err := c.ensureRendered(ctx); err != nil {
		return err
	}
	c.renderMu.Lock()
	defer c.renderMu.Unlock()
	if c.set != nil {
		return nil
	}
	o := c.releaseOptions(true)
	o.Progress = nil
	set, err := release.Resolve(ctx, o)
	if err != nil {
		return err
	}
	c.set = set
	return nil
}
