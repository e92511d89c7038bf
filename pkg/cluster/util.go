package cluster

import (
	"github.com/hardway/hardway/pkg/usererr"
)

// hintOf is the error's hint, or def.
func hintOf(err error, def string) string {
	if h := usererr.HintOf(err); h != "" {
		return h
	}
	return def
}
