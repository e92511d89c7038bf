// Command benchmark makes hardway-cis-1.12 from kube-bench's cis-1.12: the
// same checks, with the audits that name kubeadm's files pointed at
// hardway's, and two tests that also accept hardway's way of meeting them.
// Each change names its check and the exact text it replaces; a release
// whose text differs stops here, so a new kube-bench is read before it is
// trusted.
//
//	go run ./hack/cis/benchmark SRC_DIR DST_DIR
//
// SRC_DIR is kube-bench's cfg/cis-1.12; every file is copied, master.yaml
// edited.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// edit replaces old, which must occur exactly once in check id's block.
type edit struct {
	id, why  string
	old, new string
}

// Paths on the hosts, as pkg/units/paths.go has them.
const (
	adminKubeconfig = "/var/lib/kubernetes/admin.kubeconfig"
	schedulerConfig = "/etc/kubernetes/config/kube-scheduler.yaml"
	pkiDirs         = "/var/lib/kubernetes/ /etc/etcd/"
)

var edits = slices.Concat(
	adminConf("1.1.13", "permissions", "bitmask", "600"),
	adminConf("1.1.14", "ownership", "eq", "root:root"),
	[]edit{
		{id: "1.1.19", why: "hardway's certificates and keys", old: "find /etc/kubernetes/pki/ ", new: "find " + pkiDirs + " "},
		{id: "1.1.20", why: "hardway's certificates", old: "find /etc/kubernetes/pki/ ", new: "find " + pkiDirs + " "},
		{id: "1.1.21", why: "hardway's keys", old: "find /etc/kubernetes/pki/ ", new: "find " + pkiDirs + " "},
		// The scheduler runs with --config, which makes it ignore --profiling:
		// the setting that counts is the file's enableProfiling.
		{id: "1.4.1", why: "the scheduler's KubeSchedulerConfiguration",
			old: `        audit: "/bin/ps -ef | grep $schedulerbin | grep -v grep"
        tests:
          test_items:
            - flag: "--profiling"
              compare:
`,
			new: `        audit: "/bin/ps -ef | grep $schedulerbin | grep -v grep"
        # hardway: with --config the scheduler ignores --profiling; the file's enableProfiling counts.
        audit_config: "/bin/cat ` + schedulerConfig + `"
        tests:
          test_items:
            - flag: "--profiling"
              path: '{.enableProfiling}'
              compare:
`},
	},
)

// adminConf is the two edits of an admin-credential check (1.1.13 mode,
// 1.1.14 owner): its audit looks at hardway's admin kubeconfig, and its
// test also passes when there is none on the host
// (pki.adminKubeconfigOnHosts: false: there is no credential to protect).
func adminConf(id, flag, op, value string) []edit {
	test := `        tests:
          test_items:
            - flag: "` + flag + `"
              compare:
                op: ` + op + `
                value: "` + value + `"
`
	orAbsent := strings.Replace(test, "          test_items:\n", "          bin_op: or\n          test_items:\n", 1) +
		`            # hardway: no admin kubeconfig on the host (pki.adminKubeconfigOnHosts: false) passes.
            - flag: "` + flag + `"
              set: false
`
	return []edit{
		{id: id, why: "hardway's admin kubeconfig",
			old: "for adminconf in /etc/kubernetes/admin.conf /etc/kubernetes/super-admin.conf; do",
			new: "for adminconf in " + adminKubeconfig + "; do"},
		{id: id, why: "no admin kubeconfig on the host is no credential to protect", old: test, new: orAbsent},
	}
}

// apply makes the edits on master.yaml's text.
func apply(text string) (string, error) {
	for _, e := range edits {
		start, end, err := block(text, e.id)
		if err != nil {
			return "", err
		}
		b := text[start:end]
		if n := strings.Count(b, e.old); n != 1 {
			return "", fmt.Errorf("check %s (%s): the text to replace occurs %d times, not once (a new kube-bench? read its master.yaml):\n%s", e.id, e.why, n, e.old)
		}
		text = text[:start] + strings.Replace(b, e.old, e.new, 1) + text[end:]
	}
	return text, nil
}

// block is the byte range of check id: from its "- id:" line to the next
// check's (or the end).
func block(text, id string) (int, int, error) {
	marker := "\n      - id: " + id + "\n"
	start := strings.Index(text, marker)
	if start < 0 || strings.Count(text, marker) != 1 {
		return 0, 0, fmt.Errorf("check %s: not found once in master.yaml", id)
	}
	start++
	end := strings.Index(text[start+len(marker)-1:], "\n      - id: ")
	if end < 0 {
		return start, len(text), nil
	}
	return start, start + len(marker) - 1 + end + 1, nil
}

func run(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if e.Name() == "master.yaml" {
			s, err := apply(string(b))
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(src, e.Name()), err)
			}
			b = []byte(s)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: benchmark SRC_DIR DST_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}
