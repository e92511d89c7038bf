package cli

import (
	"fmt"

	"github.com/hardway/hardway/pkg/usererr"
)

func errNotYet(cmd string) error {
	return usererr.Errorf("this build of hardway does not have '"+cmd+"' yet", "%s: not implemented", cmd)
}

var _ = fmt.Sprint
