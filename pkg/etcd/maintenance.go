package etcd

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Maintenance: the calls of 'hardway etcd defrag', 'compact' and 'disarm'.
// Each names the member it talks to, because etcd answers them per member
// (a defragmentation frees only that member's file; only the leader can
// hand over leadership).

// Defragment defragments the member at endpoint. The member answers no
// request while it rewrites its database file, so callers do one member at
// a time and wait for its health afterwards.
func (c *Client) Defragment(ctx context.Context, endpoint string) error {
	if _, err := c.c.Defragment(ctx, endpoint); err != nil {
		return fmt.Errorf("etcd defragment %s: %w", endpoint, err)
	}
	return nil
}

// MoveLeader asks the leader at leaderEndpoint to hand leadership to the
// member transferee. etcd refuses it from any member but the leader, so the
// request goes to that endpoint alone.
func (c *Client) MoveLeader(ctx context.Context, leaderEndpoint string, transferee uint64) error {
	one, err := newClient(c.cfg, []string{leaderEndpoint})
	if err != nil {
		return err
	}
	defer one.Close()
	if _, err := one.MoveLeader(ctx, transferee); err != nil {
		return fmt.Errorf("etcd move leader from %s to %x: %w", leaderEndpoint, transferee, err)
	}
	return nil
}

// Compact discards every key-value revision older than rev and waits until
// every member has applied it (physical), so that the freed pages show up
// as free space in each member's database for a defragmentation to return.
func (c *Client) Compact(ctx context.Context, rev int64) error {
	if _, err := c.c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("etcd compact to revision %d: %w", rev, err)
	}
	return nil
}

// Alarm is one raised alarm: the member that raised it and its kind
// ("NOSPACE", "CORRUPT").
type Alarm struct {
	MemberID uint64
	Kind     string
}

// DisarmNoSpace disarms every NOSPACE alarm and returns the ones it
// disarmed. Other alarms stay: a CORRUPT alarm means a member's data
// diverged, and disarming it would only hide that.
func (c *Client) DisarmNoSpace(ctx context.Context) ([]Alarm, error) {
	resp, err := c.c.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd alarm list: %w", err)
	}
	var out []Alarm
	for _, a := range resp.Alarms {
		if a.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if _, err := c.c.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			return out, fmt.Errorf("etcd alarm disarm (member %x, %s): %w", a.MemberID, a.Alarm, err)
		}
		out = append(out, Alarm{MemberID: a.MemberID, Kind: a.Alarm.String()})
	}
	return out, nil
}

// RaiseNoSpace raises a NOSPACE alarm for member id, as etcd does itself when
// the database reaches its quota: the cluster then takes reads and deletes
// but no writes until the alarm is disarmed. Tests use it to prove the
// diagnosis and the recovery on a real cluster without filling a quota.
func (c *Client) RaiseNoSpace(ctx context.Context, id uint64) error {
	conn := c.c.ActiveConnection()
	_, err := pb.NewMaintenanceClient(conn).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	if err != nil {
		return fmt.Errorf("etcd alarm activate NOSPACE (member %x): %w", id, err)
	}
	return nil
}
