package cluster

import (
	"testing"

	"github.com/hardway/hardway/pkg/verify"
)

func TestLeaderResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		seen []leaderSeen
		want verify.Status
	}{
		{"all agree", []leaderSeen{{1, 4}, {1, 4}, {1, 4}}, verify.Pass},
		// controller-2, the leader, stopped between two answers: the
		// first answer still names it in term 4, the others the new one.
		{"election between answers", []leaderSeen{{2, 4}, {3, 5}, {3, 5}}, verify.Pass},
		{"two leaders in one term", []leaderSeen{{1, 4}, {2, 4}}, verify.Fail},
		{"no leader", []leaderSeen{{0, 4}, {0, 4}}, verify.Fail},
		{"nobody answered", nil, verify.Fail},
	} {
		if got := leaderResult(tc.seen); got.Status != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got.Status, got.Message, tc.want)
		}
	}
}
