package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/usererr"
)

// hintOf is the error's hint, or def.
func hintOf(err error, def string) string {
	if h := usererr.HintOf(err); h != "" {
		return h
	}
	return def
}

// hostsAtOnce bounds the per-host fan-outs of the steps and checks (one
// command per host on that host's own connection). It is no smaller than a
// large inventory: with 8, a 12-host cluster waited for two waves of every
// read, and each wave for its slowest host.
const hostsAtOnce = 64

// captured is a part of a host script that runs cmd and prints its exit
// status, its standard output and its standard error, each in a section of
// its own (@@name, @@name-stderr), for capturedResult: several commands whose
// outputs are read apart share one round trip, and a failing one still
// reports what it said. fd 3 is the script's standard output, so that only
// cmd's standard error is caught in e.
func captured(name, cmd string) string {
	return "echo '@@" + name + "'; { e=$( { o=$(" + cmd + "); r=$?; echo \"$r\"; printf '%s\\n' \"$o\"; } 2>&1 1>&3 ); } 3>&1; echo '@@" + name + "-stderr'; printf '%s\\n' \"$e\"\n"
}

// beforeCaptured is a script's output up to its first captured section.
func beforeCaptured(out string) string {
	if i := strings.Index(out, "\n@@"); i >= 0 {
		return out[:i+1]
	}
	if strings.HasPrefix(out, "@@") {
		return ""
	}
	return out
}

// errNotCaptured: the script's output has no such section (it did not run
// the command, or stopped before it).
var errNotCaptured = errors.New("no output (the script did not run it)")

// capturedResult is the standard output of the captured command name, or
// the error Run would have returned for it alone (an *remote.ExitError with
// its standard error).
func capturedResult(out, name, host, cmd string) ([]byte, error) {
	_, rest, ok := strings.Cut("\n"+out, "\n@@"+name+"\n")
	if !ok {
		return nil, fmt.Errorf("%s: %s: %w", host, cmd, errNotCaptured)
	}
	body, stderr, _ := strings.Cut(rest, "@@"+name+"-stderr\n")
	if i := strings.Index(stderr, "\n@@"); i >= 0 {
		stderr = stderr[:i+1]
	}
	code, stdout, _ := strings.Cut(body, "\n")
	rc, err := strconv.Atoi(strings.TrimSpace(code))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: unreadable exit status %q", host, cmd, code)
	}
	if rc != 0 {
		return nil, &remote.ExitError{Host: host, Cmd: cmd, Code: rc, Stderr: strings.TrimRight(stderr, "\n")}
	}
	return []byte(stdout), nil
}
