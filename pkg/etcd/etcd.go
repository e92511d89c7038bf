// Package etcd asks a running etcd cluster what hardway needs to know: its
// members, their health, the leader, alarms, and raw keys (to prove secrets
// are encrypted at rest). It uses the official client, and can dial through
// any tunnel (hardway passes the SSH connection), so no etcd port has to be
// reachable from the machine running hardway.
package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/hardway/hardway/pkg/usererr"
)

// DialFunc opens a connection to addr ("10.240.0.11:2379"), e.g. through SSH.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// Config says how to reach the cluster.
type Config struct {
	Endpoints   []string    // https://IP:2379, one per member
	TLS         *tls.Config // CA + a client certificate (apiserver-etcd-client)
	Dial        DialFunc    // nil: dial directly
	DialTimeout time.Duration
}

// Client is a connection to the cluster.
type Client struct {
	cfg Config
	c   *clientv3.Client
}

// New connects to the cluster. The connection is lazy: an unreachable
// cluster shows up as an error from the first call, not here.
func New(cfg Config) (*Client, error) {
	c, err := newClient(cfg, cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, c: c}, nil
}

func newClient(cfg Config, endpoints []string) (*clientv3.Client, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	var opts []grpc.DialOption
	if cfg.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.Dial))
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         cfg.TLS,
		DialTimeout: cfg.DialTimeout,
		DialOptions: opts,
		// The client logs every retry; hardway reports results, not chatter.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Member is one etcd cluster member.
type Member struct {
	ID         uint64
	Name       string // empty for a member added but not started yet
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// IDHex is the ID as etcdctl prints it, for `etcdctl member remove <id>`.
func (m Member) IDHex() string { return fmt.Sprintf("%x", m.ID) }

// Members lists the cluster's members, sorted by name.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	resp, err := c.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	var ms []Member
	for _, m := range resp.Members {
		ms = append(ms, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms, nil
}

// Status is what one endpoint says about itself.
type Status struct {
	Endpoint  string
	MemberID  uint64
	ClusterID uint64
	Leader    uint64 // member ID of the leader as this endpoint sees it; 0: none
	Version   string
	DBSize    int64
	// DBSizeInUse is the part of DBSize that holds data; the rest is free
	// pages that only a defragmentation gives back.
	DBSizeInUse int64
	RaftIndex   uint64
	RaftTerm    uint64
	IsLearner   bool
	Errors      []string
	// Revision is the key-value store's current revision (compact to it).
	Revision int64
	// DBSizeQuota is the member's --quota-backend-bytes as it reports it
	// (etcd 3.6+; 0 from older members): NOSPACE is raised when DBSize
	// reaches it.
	DBSizeQuota int64
}

// Status asks one endpoint (it must be one of the configured endpoints).
func (c *Client) Status(ctx context.Context, endpoint string) (Status, error) {
	resp, err := c.c.Status(ctx, endpoint)
	if err != nil {
		return Status{Endpoint: endpoint}, fmt.Errorf("etcd status %s: %w", endpoint, err)
	}
	return Status{Endpoint: endpoint, MemberID: resp.Header.MemberId, ClusterID: resp.Header.ClusterId,
		Leader: resp.Leader, Version: resp.Version, DBSize: resp.DbSize, DBSizeInUse: resp.DbSizeInUse,
		RaftIndex: resp.RaftIndex, RaftTerm: resp.RaftTerm, IsLearner: resp.IsLearner, Errors: resp.Errors,
		Revision: resp.Header.Revision, DBSizeQuota: resp.DbSizeQuota}, nil
}

// Health checks one endpoint the way `etcdctl endpoint health` does: a
// linearizable read through that member alone, which needs a leader and
// quorum. A permission error still proves the member answered.
func (c *Client) Health(ctx context.Context, endpoint string) error {
	one, err := newClient(c.cfg, []string{endpoint})
	if err != nil {
		return err
	}
	defer one.Close()
	_, err = one.Get(ctx, "health")
	if err == nil || strings.Contains(err.Error(), "permission denied") {
		return nil
	}
	return fmt.Errorf("etcd %s unhealthy: %w", endpoint, err)
}

// Alarms lists active alarms ("NOSPACE", "CORRUPT") as "member <id>: ALARM".
func (c *Client) Alarms(ctx context.Context) ([]string, error) {
	resp, err := c.c.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd alarm list: %w", err)
	}
	var out []string
	for _, a := range resp.Alarms {
		out = append(out, fmt.Sprintf("member %x: %s", a.MemberID, a.Alarm))
	}
	return out, nil
}

// RemoveMember removes a member by ID.
func (c *Client) RemoveMember(ctx context.Context, id uint64) error {
	if _, err := c.c.MemberRemove(ctx, id); err != nil {
		return fmt.Errorf("etcd member remove %x: %w", id, err)
	}
	return nil
}

// AddMember adds a member (to be started with --initial-cluster-state
// existing) and returns its ID.
func (c *Client) AddMember(ctx context.Context, peerURL string) (uint64, error) {
	resp, err := c.c.MemberAdd(ctx, []string{peerURL})
	if err != nil {
		return 0, fmt.Errorf("etcd member add %s: %w", peerURL, err)
	}
	return resp.Member.ID, nil
}

// Get reads the raw value of key, or nil when it does not exist.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := c.c.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// Put writes a raw key (used by tests).
func (c *Client) Put(ctx context.Context, key, value string) error {
	_, err := c.c.Put(ctx, key, value)
	return err
}

// Wanted is an inventory member: the name etcd knows it by and its peer URL.
type Wanted struct {
	Name    string
	PeerURL string
}

// Diff compares the live member list with the inventory. Stale members are
// in the cluster but not in the inventory — or carry an inventory name with
// another peer URL (the host was replaced). Missing are inventory members
// the cluster does not have.
func Diff(live []Member, want []Wanted) (stale []Member, missing []Wanted) {
	byName := map[string]Wanted{}
	for _, w := range want {
		byName[w.Name] = w
	}
	have := map[string]bool{}
	for _, m := range live {
		w, ok := byName[m.Name]
		if !ok || !contains(m.PeerURLs, w.PeerURL) {
			stale = append(stale, m)
			continue
		}
		have[m.Name] = true
	}
	for _, w := range want {
		if !have[w.Name] {
			missing = append(missing, w)
		}
	}
	return stale, missing
}

// StaleError explains stale members with the exact commands that fix them.
func StaleError(stale []Member, etcdctl string) error {
	var names, cmds []string
	for _, m := range stale {
		n := m.Name
		if n == "" {
			n = "(unstarted)"
		}
		names = append(names, fmt.Sprintf("%s (id %s, peer %s)", n, m.IDHex(), strings.Join(m.PeerURLs, ",")))
		cmds = append(cmds, fmt.Sprintf("%s member remove %s", etcdctl, m.IDHex()))
	}
	return usererr.New(fmt.Errorf("etcd has members that are not in the inventory: %s", strings.Join(names, "; ")),
		"remove them (on a healthy member), then run 'hardway up' again to add the replacement:\n"+strings.Join(cmds, "\n")+
			"\nor let hardway do it: hardway up --remove-stale-members")
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// IsUnavailable reports whether err means the cluster could not be reached
// or has no quorum (as opposed to a refused request).
func IsUnavailable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(fmt.Sprint(err), "Unavailable")
}
