package etcd

import (
	"context"
	"fmt"
	"io"
)

// SnapshotMeta is what the member said about the snapshot it sent.
type SnapshotMeta struct {
	Endpoint string
	Version  string // the storage version of the member that made it ("3.6.0")
	Revision int64  // the store revision in the first response's header (0: not sent)
	Size     int64  // bytes written, etcd's sha256 trailer included
}

// Snapshot streams a point-in-time snapshot of the member at endpoint to w,
// exactly as etcd sends it: the bbolt database followed by etcd's own
// sha256 of it (what `etcdctl snapshot save` writes and `etcdutl snapshot
// restore` checks). It goes over the client's dialer (SSH), so no port is
// opened; the caller checks the trailer.
func (c *Client) Snapshot(ctx context.Context, endpoint string, w io.Writer) (SnapshotMeta, error) {
	meta := SnapshotMeta{Endpoint: endpoint}
	one, err := newClient(c.cfg, []string{endpoint})
	if err != nil {
		return meta, err
	}
	defer one.Close()
	resp, err := one.SnapshotWithVersion(ctx)
	if err != nil {
		return meta, fmt.Errorf("etcd snapshot from %s: %w", endpoint, err)
	}
	defer resp.Snapshot.Close()
	meta.Version = resp.Version
	if resp.Header != nil {
		meta.Revision = resp.Header.Revision
	}
	meta.Size, err = io.Copy(w, resp.Snapshot)
	if err != nil {
		return meta, fmt.Errorf("etcd snapshot from %s: after %d bytes: %w", endpoint, meta.Size, err)
	}
	return meta, nil
}
