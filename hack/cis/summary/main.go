// Command summary reads what kube-bench printed with --json, one file per
// host (hack/cis/run.sh names them <host>.json), and prints one line per host:
// the benchmark, then PASS / FAIL / WARN / INFO for each section kube-bench
// ran (1 master, 2 etcd, 3 controlplane, 4 node, 5 policies) and in total.
//
//	$ summary results/controller-1.json results/worker-1.json
//	controller-1 cis-1.12: 1 master PASS 28 FAIL 20 WARN 12 INFO 0 | 2 etcd PASS 7 FAIL 0 WARN 0 INFO 0 | 3 controlplane ... | 5 policies ... | total PASS 36 FAIL 20 WARN 50 INFO 0
//	worker-1 cis-1.12: 4 node PASS 8 FAIL 8 WARN 9 INFO 0 | total PASS 8 FAIL 8 WARN 9 INFO 0
//
// With -fail it prints the failed checks instead, one a line: host, check,
// scored or not, and the check's text.
//
// The counts are the checks' own statuses, and each section's must be what
// kube-bench says it counted: a file cut short, or from another tool, is an
// error, not a line of zeros. It is a development tool, not part of hardway.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	fail := flag.Bool("fail", false, "print the failed checks, not the counts")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: summary [-fail] HOST.json...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Args(), *fail); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}

// Report is kube-bench's JSON (check.OverallControls): its top-level keys
// have no json tags, hence the capitals.
type Report struct {
	Controls []Controls `json:"Controls"`
	Totals   Counts     `json:"Totals"`
}

// Controls is one section: one controls file of the benchmark (master.yaml, ...).
type Controls struct {
	ID       string  `json:"id"`
	Version  string  `json:"version"`
	Text     string  `json:"text"`
	NodeType string  `json:"node_type"`
	Groups   []Group `json:"tests"`
	Counts
}

type Group struct {
	Section string  `json:"section"`
	Desc    string  `json:"desc"`
	Checks  []Check `json:"results"`
}

type Check struct {
	ID     string `json:"test_number"`
	Text   string `json:"test_desc"`
	Status string `json:"status"`
	Scored bool   `json:"scored"`
}

type Counts struct {
	Pass int `json:"total_pass"`
	Fail int `json:"total_fail"`
	Warn int `json:"total_warn"`
	Info int `json:"total_info"`
}

func (c Counts) String() string {
	return fmt.Sprintf("PASS %d FAIL %d WARN %d INFO %d", c.Pass, c.Fail, c.Warn, c.Info)
}

func (c *Counts) add(o Counts) {
	c.Pass += o.Pass
	c.Fail += o.Fail
	c.Warn += o.Warn
	c.Info += o.Info
}

// count tallies the checks' statuses; kube-bench has no other.
func (c Controls) count() (Counts, error) {
	var n Counts
	for _, g := range c.Groups {
		for _, k := range g.Checks {
			switch k.Status {
			case "PASS":
				n.Pass++
			case "FAIL":
				n.Fail++
			case "WARN":
				n.Warn++
			case "INFO":
				n.Info++
			default:
				return n, fmt.Errorf("section %s, check %s: status %q is none of PASS, FAIL, WARN, INFO", c.ID, k.ID, k.Status)
			}
		}
	}
	return n, nil
}

// Load reads one host's report and checks its counts.
func Load(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, err
	}
	if len(rep.Controls) == 0 {
		return nil, errors.New("no sections: not kube-bench run --json output, or it ran no targets")
	}
	var total Counts
	for _, c := range rep.Controls {
		n, err := c.count()
		if err != nil {
			return nil, err
		}
		if n != c.Counts {
			return nil, fmt.Errorf("section %s %s: the checks say %s, kube-bench's totals %s", c.ID, c.NodeType, n, c.Counts)
		}
		total.add(n)
	}
	if total != rep.Totals {
		return nil, fmt.Errorf("the sections add up to %s, kube-bench's Totals say %s", total, rep.Totals)
	}
	return &rep, nil
}

// Line is the host's summary line.
func (rep *Report) Line(host string) string {
	var versions, parts []string
	for _, c := range rep.Controls {
		if !slices.Contains(versions, c.Version) {
			versions = append(versions, c.Version)
		}
		parts = append(parts, c.ID+" "+c.NodeType+" "+c.Counts.String())
	}
	parts = append(parts, "total "+rep.Totals.String())
	return host + " " + strings.Join(versions, ",") + ": " + strings.Join(parts, " | ")
}

// Failed are the host's failed checks, one a line.
func (rep *Report) Failed(host string) []string {
	var out []string
	for _, c := range rep.Controls {
		for _, g := range c.Groups {
			for _, k := range g.Checks {
				if k.Status != "FAIL" {
					continue
				}
				scored := "scored"
				if !k.Scored {
					scored = "not-scored"
				}
				out = append(out, host+" "+k.ID+" "+scored+" "+k.Text)
			}
		}
	}
	return out
}

// Host is the host a results file is named after (<host>.json).
func Host(path string) string { return strings.TrimSuffix(filepath.Base(path), ".json") }

func run(w io.Writer, paths []string, fail bool) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		rep, err := Load(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		lines := []string{rep.Line(Host(p))}
		if fail {
			lines = rep.Failed(Host(p))
		}
		for _, l := range lines {
			if _, err := fmt.Fprintln(w, l); err != nil {
				return err
			}
		}
	}
	return nil
}
