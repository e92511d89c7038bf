package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Scan calls fn with every key under prefix and its raw value, page keys
// per request, all read at the revision of the first page: a consistent
// snapshot however long the scan takes (an error if etcd compacts that
// revision meanwhile; scan again). Values may be secrets: callers must
// never print them.
func (c *Client) Scan(ctx context.Context, prefix string, page int64, fn func(key string, value []byte) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.c.Get(ctx, key, opts...)
		if err != nil {
			return fmt.Errorf("etcd range %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(string(kv.Key), kv.Value); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
