package daemon

import (
	"fmt"
	"strings"

	"github.com/hardway/hardway/pkg/verify"
)

// Key names one gauge: a check on a host ("" for cluster-wide facts).
type Key struct {
	Check string
	Host  string
}

func (k Key) String() string {
	if k.Host == "" {
		return k.Check
	}
	return k.Check + " " + k.Host
}

// Entry is the verdict of one key in one run: the worst status among the
// results that share the key (host/units has one result per component).
type Entry struct {
	Key
	Status  verify.Status
	Message string
	Hint    string
}

func rank(s verify.Status) int {
	switch s {
	case verify.Pass:
		return 0
	case verify.Warn:
		return 1
	default:
		return 2
	}
}

// Summarize folds results into one entry per key, in first-seen order. The
// message joins every result of the worst status; the hint is the first.
func Summarize(rs []verify.Result) []Entry {
	idx := map[Key]int{}
	var out []Entry
	for _, r := range rs {
		k := Key{r.Check, r.Host}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, Entry{Key: k, Status: r.Status, Message: r.Message, Hint: r.Hint})
			continue
		}
		e := &out[i]
		switch {
		case rank(r.Status) > rank(e.Status):
			e.Status, e.Message, e.Hint = r.Status, r.Message, r.Hint
		case r.Status == e.Status && r.Status != verify.Pass:
			e.Message += "; " + r.Message
			if e.Hint == "" {
				e.Hint = r.Hint
			}
		}
	}
	return out
}

// Transition is a key whose status changed since the last run that saw it.
type Transition struct {
	Entry
	From verify.Status // "" the first time the key is seen
}

// Line is the log line for t, one line so that journald keeps it whole.
func (t Transition) Line() string {
	var b strings.Builder
	from := string(t.From)
	if from == "" {
		from = "start"
	}
	fmt.Fprintf(&b, "%s: %s -> %s: %s", t.Key, from, t.Status, t.Message)
	if t.Status != verify.Pass && t.Hint != "" {
		fmt.Fprintf(&b, " (hint: %s)", t.Hint)
	}
	return strings.ReplaceAll(b.String(), "\n", " ")
}

// Tracker remembers the last status of every key. A key missing from a run
// (its host unreachable, say) keeps its last status, so that the run where
// it comes back logs the change against what was last known.
type Tracker struct {
	last map[Key]verify.Status
}

// Update records a run and returns what changed. Keys seen for the first
// time count as a change only when they do not pass: a daemon starting on a
// healthy cluster logs nothing per check.
func (t *Tracker) Update(es []Entry) []Transition {
	if t.last == nil {
		t.last = map[Key]verify.Status{}
	}
	var out []Transition
	for _, e := range es {
		prev, seen := t.last[e.Key]
		t.last[e.Key] = e.Status
		if (!seen && e.Status == verify.Pass) || (seen && prev == e.Status) {
			continue
		}
		out = append(out, Transition{Entry: e, From: prev})
	}
	return out
}
