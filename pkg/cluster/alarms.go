package cluster

import (
	"fmt"
	"strings"

	"github.com/hardway/hardway/pkg/verify"
)

// alarmResult is the etcd/alarms check: none, or each alarm with the exact
// way out. NOSPACE has one documented sequence (compact, defragment every
// member, disarm, then check the quota), in that order: a disarm before
// the defragmentation raises the alarm again at the next write, because
// the quota counts the database file, which only a defragmentation shrinks.
func (c *Cluster) alarmResult(alarms []string, err error, ms []memberState) verify.Result {
	r := verify.Result{Check: CheckEtcdAlarms}
	if err != nil {
		r.Status, r.Message, r.Hint = verify.Fail, "alarm list: "+err.Error(), "quorum may be lost: see the etcd/health results"
		return r
	}
	if len(alarms) == 0 {
		r.Status, r.Message = verify.Pass, "none"
		return r
	}
	names := map[string]string{}
	var quota, largest int64
	for _, m := range ms {
		names[fmt.Sprintf("%x", m.st.MemberID)] = m.h.Name
		quota = max(quota, m.st.DBSizeQuota)
		largest = max(largest, m.st.DBSize)
	}
	var noSpace, corrupt, other []string
	for _, a := range alarms {
		// "member <hex>: NOSPACE"
		id, kind, _ := strings.Cut(strings.TrimPrefix(a, "member "), ": ")
		who := "member " + id
		if n := names[id]; n != "" {
			who = fmt.Sprintf("%s (member %s)", n, id)
		}
		switch kind {
		case "NOSPACE":
			noSpace = append(noSpace, who)
		case "CORRUPT":
			corrupt = append(corrupt, who)
		default:
			other = append(other, who+": "+kind)
		}
	}
	var msgs, hints []string
	inv := ""
	if c.Inv.Path != "" {
		inv = " -i " + c.Inv.Path
	}
	if len(noSpace) > 0 {
		q := "etcd's default 2 GiB (hardway sets no --quota-backend-bytes)"
		near := int64(2 << 30)
		if quota > 0 {
			near = quota
			q = fmt.Sprintf("%s (--quota-backend-bytes; hardway sets none, so etcd's default)", Bytes(quota))
		}
		msgs = append(msgs, fmt.Sprintf("NOSPACE raised by %s: a database file reached the quota, %s; the largest file is %s. etcd takes reads and deletes, no writes: the apiservers cannot store anything",
			strings.Join(noSpace, ", "), q, Bytes(largest)))
		hints = append(hints, "in this order: "+
			"1) 'hardway etcd compact"+inv+"' (compacts to the current revision: old versions become free pages); "+
			"2) 'hardway etcd defrag"+inv+" --all' (every member, one at a time, the leader last: shrinks each file); "+
			"3) 'hardway etcd disarm"+inv+"', or on a control-plane host: '"+etcdctlCmd+" alarm disarm'; "+
			"4) check the quota: 'hardway etcd status"+inv+"' — if IN USE stays near "+Bytes(near)+
			" the data really fills it: find what grew ('kubectl get --raw /metrics | grep apiserver_storage_size_bytes') and delete it, or raise --quota-backend-bytes on every member (at most 8 GiB)")
	}
	if len(corrupt) > 0 {
		msgs = append(msgs, "CORRUPT raised by "+strings.Join(corrupt, ", ")+": members' data differ")
		hints = append(hints, "never disarm CORRUPT: stop etcd on the member whose data differs, remove it ('"+etcdctlCmd+
			" member remove <id>'), wipe its /var/lib/etcd and run 'hardway up --remove-stale-members' to rejoin it from the others")
	}
	if len(other) > 0 {
		msgs = append(msgs, "alarms "+strings.Join(other, ", "))
		hints = append(hints, "see 'journalctl -u etcd' on the member")
	}
	r.Status, r.Message, r.Hint = verify.Fail, strings.Join(msgs, "; "), strings.Join(hints, "; ")
	return r
}
