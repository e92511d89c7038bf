package daemon

import (
	"strings"
	"testing"

	"github.com/hardway/hardway/pkg/usererr"
)

func TestCheckListen(t *testing.T) {
	for _, a := range []string{"127.0.0.1:9479", "127.0.0.53:1", "[::1]:9479", "localhost:9479", "[::ffff:127.0.0.1]:9"} {
		if err := CheckListen(a, false); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	for _, a := range []string{":9479", "0.0.0.0:9479", "[::]:9479", "10.240.0.11:9479", "metrics.example.org:9479", "[fe80::1%lo]:9479"} {
		err := CheckListen(a, false)
		if err == nil || usererr.CodeOf(err) != usererr.CodeUsage || !strings.Contains(usererr.HintOf(err), "--allow-remote-listen") {
			t.Errorf("%s: %v (hint %q)", a, err, usererr.HintOf(err))
		}
		if err := CheckListen(a, true); err != nil {
			t.Errorf("%s with the flag: %v", a, err)
		}
	}
	if err := CheckListen("9479", true); err == nil || usererr.CodeOf(err) != usererr.CodeUsage {
		t.Errorf("no port: %v", err)
	}
}
