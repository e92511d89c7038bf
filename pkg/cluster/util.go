package cluster

import (
	"github.com/hardway/hardway/pkg/etcd"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
)

// etcdctlCmd is how a user on a control-plane host talks to etcd, for hints.
const etcdctlCmd = "etcdctl --endpoints https://127.0.0.1:2379 --cacert " + units.EtcdCACert +
	" --cert " + units.EtcdClientCert + " --key " + units.EtcdClientKey

func diffMembers(ms []etcd.Member, c *Cluster) (stale []etcd.Member, missing []etcd.Wanted) {
	return etcd.Diff(ms, c.etcdWanted())
}

func (c *Cluster) staleErr(stale []etcd.Member) error { return etcd.StaleError(stale, etcdctlCmd) }

// hintOf is the error's hint, or def.
func hintOf(err error, def string) string {
	if h := usererr.HintOf(err); h != "" {
		return h
	}
	return def
}
