package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write lays out files (slash paths → content) under a new temporary root.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const target = "# Target\n\n## Backup and restore (`hardway backup`, `hardway restore`)\n\n## Why `up` is fast: one round trip\n\n## Repeated\n\n## Repeated\n\n### Upgrading v1.35 → v1.36\n"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		readme string
		extra  map[string]string
		want   []string // the problem lines, in order; none: passes
	}{
		{name: "good links", readme: "# hardway\n\nSee [the target](docs/target.md), [a section](docs/target.md#target) and [here](#hardway).\n"},
		{name: "a directory and an external link", readme: "[docs](docs/) [go](https://go.dev/doc) [mail](mailto:a@example.org) [plain](http://example.org/x.md#nothing)\n"},
		{name: "missing file", readme: "# hardway\n\n[gone](docs/gone.md)\n",
			want: []string{"README.md:3: docs/gone.md: no such file docs/gone.md"}},
		{name: "missing file, with an anchor", readme: "[gone](docs/gone.md#x)\n",
			want: []string{"README.md:1: docs/gone.md#x: no such file docs/gone.md"}},
		{name: "missing anchor", readme: "\n[x](docs/target.md#no-such-heading)\n",
			want: []string{"README.md:2: docs/target.md#no-such-heading: no heading #no-such-heading in docs/target.md"}},
		{name: "missing anchor in the same file", readme: "# hardway\n[x](#nothing)\n",
			want: []string{"README.md:2: #nothing: no heading #nothing in README.md"}},
		{name: "backticks, parentheses and commas dropped", readme: "[b](docs/target.md#backup-and-restore-hardway-backup-hardway-restore)\n"},
		{name: "a colon dropped, spaces kept as dashes", readme: "[u](docs/target.md#why-up-is-fast-one-round-trip)\n"},
		{name: "dots and an arrow dropped", readme: "[u](docs/target.md#upgrading-v135--v136)\n"},
		{name: "repeated headings numbered", readme: "[a](docs/target.md#repeated) [b](docs/target.md#repeated-1)\n"},
		{name: "anchors are case-insensitive", readme: "[a](docs/target.md#Target)\n"},
		{name: "a link between docs pages", readme: "# r\n", extra: map[string]string{
			"docs/other.md": "# Other\n\n[back](../README.md#r) [t](target.md#repeated) [bad](target.md#nope)\n"},
			want: []string{"docs/other.md:3: target.md#nope: no heading #nope in docs/target.md"}},
		{name: "links in code are not links", readme: "```sh\n[x](nowhere.md)\n```\n\n`[y](nowhere.md)`\n\n~~~\n[z](nowhere.md)\n~~~\n"},
		{name: "headings in code are not headings", readme: "```\n# fake\n```\n[x](#fake)\n",
			want: []string{"README.md:4: #fake: no heading #fake in README.md"}},
		{name: "a reference definition", readme: "[t][ref]\n\n[ref]: docs/missing.md\n",
			want: []string{"README.md:3: docs/missing.md: no such file docs/missing.md"}},
		{name: "outside the repository", readme: "[up](../elsewhere.md)\n",
			want: []string{"README.md:1: ../elsewhere.md: points outside the repository"}},
		{name: "an anchor in a file that is not Markdown", readme: "[m](Makefile#L10)\n", extra: map[string]string{"Makefile": "all:\n"}},
		{name: "a README too long", readme: strings.Repeat("line\n", 161),
			want: []string{"README.md:161: README.md has 161 lines, more than 160: move the detail to docs/"}},
		{name: "a README of exactly 160 lines", readme: strings.Repeat("line\n", 160)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"README.md": tc.readme, "docs/target.md": target}
			for k, v := range tc.extra {
				files[k] = v
			}
			root := write(t, files)
			ps, err := check(root)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"The lab: hosts on your machine":                           "the-lab-hosts-on-your-machine",
		"Backup and restore (`hardway backup`, `hardway restore`)": "backup-and-restore-hardway-backup-hardway-restore",
		"`hardway smoke`":                          "hardway-smoke",
		"Keep verifying: `hardway daemon`":         "keep-verifying-hardway-daemon",
		"pod_subnets and so-on":                    "pod_subnets-and-so-on",
		"Cluster DNS: CoreDNS":                     "cluster-dns-coredns",
		"Security by default — CIS":                "security-by-default--cis",
		"A [linked](https://example.org) heading":  "a-linked-heading",
		"Rotating a CA (`rotate ca --which etcd`)": "rotating-a-ca-rotate-ca---which-etcd",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestRunExitCode(t *testing.T) {
	root := write(t, map[string]string{"README.md": "[x](docs/none.md)\n"})
	var out, errb bytes.Buffer
	if code := run(root, &out, &errb); code != 1 || !strings.Contains(out.String(), "README.md:1: docs/none.md") {
		t.Errorf("run = %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	root = write(t, map[string]string{"README.md": "# ok\n"})
	out.Reset()
	if code := run(root, &out, &errb); code != 0 || out.Len() != 0 {
		t.Errorf("run = %d, stdout %q", code, out.String())
	}
	// No README at all is an error, not a pass.
	if code := run(t.TempDir(), &out, &errb); code != 1 {
		t.Errorf("run without a README = %d, want 1", code)
	}
}
