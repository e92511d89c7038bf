package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/release"
)

// EtcdMemberStatus is what one member says about itself, for the daemon's
// metrics: `hardway verify` reports health as pass/fail, this adds who leads.
type EtcdMemberStatus struct {
	Name      string `json:"name"`      // the inventory host
	Reachable bool   `json:"reachable"` // answered a status request
	Leader    bool   `json:"leader"`    // the member the reachable members agree leads
	DBSize    int64  `json:"dbSize"`    // bytes
	// For 'hardway etcd status'.
	Endpoint    string   `json:"endpoint"`
	MemberID    string   `json:"memberID,omitempty"` // hex, as etcdctl prints it
	Version     string   `json:"version,omitempty"`
	DBSizeInUse int64    `json:"dbSizeInUse,omitempty"`
	DBSizeQuota int64    `json:"dbSizeQuota,omitempty"` // --quota-backend-bytes as the member reports it (etcd 3.6+)
	RaftIndex   uint64   `json:"raftIndex,omitempty"`
	RaftTerm    uint64   `json:"raftTerm,omitempty"`
	Alarms      []string `json:"alarms,omitempty"`
	Error       string   `json:"error,omitempty"`
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
		out[i].Name, out[i].Endpoint = h.Name, c.etcdEndpoint(h)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, c.etcdEndpoint(h))
		cancel()
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Reachable, out[i].DBSize, ids[i] = true, st.DBSize, st.MemberID
		out[i].MemberID, out[i].Version, out[i].DBSizeInUse = fmt.Sprintf("%x", st.MemberID), st.Version, st.DBSizeInUse
		out[i].RaftIndex, out[i].RaftTerm = st.RaftIndex, st.RaftTerm
		out[i].DBSizeQuota = st.DBSizeQuota
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
	// Alarms name the member by ID: "member <hex>: NOSPACE".
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	alarms, aerr := cli.Alarms(actx)
	cancel()
	for i := range out {
		out[i].Leader = leader != 0 && ids[i] == leader
		for _, a := range alarms {
			if ids[i] != 0 && strings.HasPrefix(a, fmt.Sprintf("member %x: ", ids[i])) {
				out[i].Alarms = append(out[i].Alarms, strings.TrimPrefix(a, fmt.Sprintf("member %x: ", ids[i])))
			}
		}
	}
	if aerr != nil && len(out) > 0 {
		for i := range out {
			if out[i].Reachable {
				out[i].Alarms = append(out[i].Alarms, "unknown: "+aerr.Error())
			}
		}
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
