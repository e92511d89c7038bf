// Command doccheck checks the links of README.md and docs/*.md: every
// relative link must name a file that exists and, with a #anchor, a heading
// of that file (GitHub's anchor rule). It also keeps the README short.
//
//	go run ./hack/doccheck          # from the repository's top directory
//
// It prints one line per problem (file:line: link: why) and exits 1 when
// there is any. http(s):// and mailto: links are not checked: that needs the
// network, and a page that moves is not a broken build.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// maxReadmeLines keeps README.md a front page: the rest belongs in docs/.
const maxReadmeLines = 160

func main() {
	root := flag.String("root", ".", "the repository's top directory")
	flag.Parse()
	os.Exit(run(*root, os.Stdout, os.Stderr))
}

func run(root string, stdout, stderr io.Writer) int {
	problems, err := check(root)
	if err != nil {
		fmt.Fprintln(stderr, "doccheck:", err)
		return 1
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	if len(problems) > 0 {
		return 1
	}
	return 0
}

// problem is one broken link (or a README that grew too long).
type problem struct {
	file string // relative to the root, with forward slashes
	line int
	link string
	why  string
}

func (p problem) String() string {
	if p.link == "" {
		return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.why)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.file, p.line, p.link, p.why)
}

// check reads README.md and docs/*.md under root and returns every problem,
// sorted by file and line.
func check(root string) ([]problem, error) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}

	anchors := map[string]map[string]bool{} // cache: file (slash, relative) → its anchors
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchors[rel]; ok {
			return a, nil
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		a := headingAnchors(data)
		anchors[rel] = a
		return a, nil
	}

	var out []problem
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		if f == "README.md" {
			if n := countLines(data); n > maxReadmeLines {
				out = append(out, problem{file: f, line: n, why: fmt.Sprintf("README.md has %d lines, more than %d: move the detail to docs/", n, maxReadmeLines)})
			}
		}
		for _, l := range links(data) {
			why := checkLink(root, f, l.target, anchorsOf)
			if why != "" {
				out = append(out, problem{file: f, line: l.line, link: l.target, why: why})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].file != out[j].file {
			return out[i].file < out[j].file
		}
		return out[i].line < out[j].line
	})
	return out, nil
}

// checkLink says what is wrong with target as a link from file, or "".
func checkLink(root, file, target string, anchorsOf func(string) (map[string]bool, error)) string {
	lower := strings.ToLower(target)
	if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	rel := file // "#anchor" alone: this file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			rel = strings.TrimPrefix(path, "/") // GitHub: from the repository's top
		} else {
			rel = filepathJoinSlash(slashDir(file), path)
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "no such file " + rel
		}
		if fi.IsDir() {
			if frag != "" {
				return "an anchor on a directory"
			}
			return ""
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(strings.ToLower(rel), ".md") {
		return "" // anchors of other files (line numbers, code) are not headings
	}
	a, err := anchorsOf(rel)
	if err != nil {
		return "cannot read " + rel
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	if !a[strings.ToLower(frag)] {
		return fmt.Sprintf("no heading #%s in %s", frag, rel)
	}
	return ""
}

func slashDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}

// filepathJoinSlash joins and cleans with forward slashes whatever the OS.
func filepathJoinSlash(dir, p string) string {
	return filepath.ToSlash(filepath.Clean(filepath.Join(filepath.FromSlash(dir), filepath.FromSlash(p))))
}

func countLines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// link is one link target at its line.
type link struct {
	line   int
	target string
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(```+|~~~+)")
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	refDefRE  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*<?([^ \t>]+)>?`)
	codeRE    = regexp.MustCompile("`+[^`]*`+")
	// An inline link or image: [text](target "title"), text without
	// brackets inside (good enough for documentation).
	inlineRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)`)
	htmlIDRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// lines yields the lines outside fenced code blocks with their numbers.
func lines(data []byte, fn func(n int, s string)) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		s := sc.Text()
		if m := fenceRE.FindStringSubmatch(s); m != nil {
			mark := m[1][:1]
			switch {
			case fence == "":
				fence = strings.Repeat(mark, len(m[1]))
				continue
			case strings.HasPrefix(strings.TrimSpace(s), fence) && strings.Trim(strings.TrimSpace(s), mark) == "":
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		fn(n, s)
	}
}

// links returns the link targets outside code blocks and code spans.
func links(data []byte) []link {
	var out []link
	lines(data, func(n int, s string) {
		if m := refDefRE.FindStringSubmatch(s); m != nil {
			out = append(out, link{n, m[1]})
			return
		}
		s = codeRE.ReplaceAllString(s, "")
		for _, m := range inlineRE.FindAllStringSubmatch(s, -1) {
			if m[1] != "" {
				out = append(out, link{n, m[1]})
			}
		}
	})
	return out
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// file (and any <a name|id="..."> in it).
func headingAnchors(data []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines(data, func(_ int, s string) {
		for _, m := range htmlIDRE.FindAllStringSubmatch(s, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := headingRE.FindStringSubmatch(s)
		if m == nil {
			return
		}
		a := anchor(m[2])
		// GitHub numbers repeated headings: x, x-1, x-2, ...
		if k, dup := seen[a]; dup {
			seen[a] = k + 1
			a += "-" + strconv.Itoa(k+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	})
	return out
}

var linkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// anchor is GitHub's anchor for a heading's text: links become their text,
// then lower case, spaces to '-', and every other character that is not a
// letter, a digit, '-' or '_' dropped (backticks, dots, colons, parentheses).
func anchor(heading string) string {
	heading = linkTextRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
