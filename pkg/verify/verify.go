// Package verify runs named checks and reports each as pass, warn or fail
// with a one-line hint: a table for people, JSON for machines.
package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Status of one result.
type Status string

const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Result is one fact checked, on one host or for the whole cluster.
type Result struct {
	Check   string `json:"check"`          // "etcd/members"
	Host    string `json:"host,omitempty"` // "" for cluster-wide facts
	Status  Status `json:"status"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"` // how to fix it; empty on pass
}

// Check is a named fact-finder. Run returns one or more results; it never
// returns an error: a failure to find out is itself a Fail with a hint.
type Check struct {
	Name string
	Doc  string
	Run  func(ctx context.Context) []Result
}

// Report is the outcome of a verify run.
type Report struct {
	Results  []Result      `json:"results"`
	Duration time.Duration `json:"duration"`
	Pass     int           `json:"pass"`
	Warn     int           `json:"warn"`
	Fail     int           `json:"fail"`
}

// OK reports whether nothing failed (warnings are fine).
func (r *Report) OK() bool { return r.Fail == 0 }

// Run runs the checks, up to limit at once, each under its own timeout,
// and returns the results in check order.
func Run(ctx context.Context, checks []Check, limit int, timeout time.Duration) *Report {
	start := time.Now()
	if limit < 1 {
		limit = 1
	}
	out := make([][]Result, len(checks))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			rs := c.Run(cctx)
			if len(rs) == 0 {
				rs = []Result{{Status: Fail, Message: "the check returned nothing", Hint: "this is a bug in hardway"}}
			}
			for j := range rs {
				if rs[j].Check == "" {
					rs[j].Check = c.Name
				}
			}
			out[i] = rs
		}()
	}
	wg.Wait()
	r := &Report{Duration: time.Since(start)}
	for _, rs := range out {
		for _, x := range rs {
			r.Results = append(r.Results, x)
			switch x.Status {
			case Pass:
				r.Pass++
			case Warn:
				r.Warn++
			default:
				r.Fail++
			}
		}
	}
	return r
}

// Sorted returns the results with failures first, then warnings, keeping
// check order within each.
func (r *Report) Sorted() []Result {
	rs := append([]Result{}, r.Results...)
	rank := map[Status]int{Fail: 0, Warn: 1, Pass: 2}
	sort.SliceStable(rs, func(i, j int) bool { return rank[rs[i].Status] < rank[rs[j].Status] })
	return rs
}

// WriteTable writes the report for people: one line per result, hints
// under failures and warnings, a summary last.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tHOST\tDETAIL")
	for _, x := range r.Results {
		host := x.Host
		if host == "" {
			host = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.ToUpper(string(x.Status)), x.Check, host, x.Message)
		if x.Status != Pass && x.Hint != "" {
			fmt.Fprintf(tw, "\t\t\thint: %s\n", x.Hint)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d warnings, %d failed in %s\n", r.Pass, r.Warn, r.Fail, r.Duration.Round(time.Millisecond))
	return err
}

// WriteJSON writes the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Helpers for checks.

// OKf is a passing result.
func OKf(host, format string, args ...any) Result {
	return Result{Host: host, Status: Pass, Message: fmt.Sprintf(format, args...)}
}

// Failf is a failing result with a hint.
func Failf(host, hint, format string, args ...any) Result {
	return Result{Host: host, Status: Fail, Message: fmt.Sprintf(format, args...), Hint: hint}
}

// Warnf is a warning with a hint.
func Warnf(host, hint, format string, args ...any) Result {
	return Result{Host: host, Status: Warn, Message: fmt.Sprintf(format, args...), Hint: hint}
}
