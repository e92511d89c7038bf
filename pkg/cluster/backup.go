package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hardway/hardway/pkg/backup"
	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/usererr"
)

// snapshotter is the etcd client's streaming snapshot (*etcd.Client has it;
// the unit tests' fake need not).
type snapshotter interface {
	Snapshot(ctx context.Context, endpoint string, w io.Writer) (etcd.SnapshotMeta, error)
}

// Snapshot implements backup.Source: it finds the current leader and
// streams its snapshot to w through the SSH connection to that host (the
// etcd client's dialer), so no port is opened. The leader, because its
// data is the newest a quorum agreed on.
func (c *Cluster) Snapshot(ctx context.Context, w io.Writer) (backup.SnapshotInfo, error) {
	cli, err := c.etcd()
	if err != nil {
		return backup.SnapshotInfo{}, err
	}
	defer cli.Close()
	leader, err := c.etcdLeader(ctx, cli)
	if err != nil {
		return backup.SnapshotInfo{}, err
	}
	s, ok := cli.(snapshotter)
	if !ok {
		return backup.SnapshotInfo{}, errors.New("this etcd client cannot take snapshots")
	}
	ep := c.etcdEndpoint(leader)
	meta, err := s.Snapshot(ctx, ep, w)
	if err != nil {
		return backup.SnapshotInfo{}, usererr.New(err, "'hardway etcd status' and 'hardway verify' show whether "+leader.Name+" is healthy")
	}
	return backup.SnapshotInfo{Member: leader.Name, Endpoint: ep, EtcdVersion: meta.Version, Revision: meta.Revision}, nil
}

// etcdLeader is the control-plane host whose member leads, as the newest
// raft term among the members' answers says.
func (c *Cluster) etcdLeader(ctx context.Context, cli etcdAPI) (inventory.Host, error) {
	var best inventory.Host
	var bestTerm uint64
	var errs []error
	for _, h := range c.Inv.ControlPlane {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, c.etcdEndpoint(h))
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Leader != 0 && st.Leader == st.MemberID && st.RaftTerm >= bestTerm {
			best, bestTerm = h, st.RaftTerm
		}
	}
	if best.Name == "" {
		return best, usererr.New(fmt.Errorf("no etcd member says it leads: %w", errors.Join(errs...)),
			"a snapshot needs a healthy cluster with a leader: 'hardway verify' says what is wrong")
	}
	return best, nil
}
