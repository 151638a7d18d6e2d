// Package doclinks checks the project's documentation: every relative Markdown link in README.md, docs/*.md and
// docs/dev/*.md names a file that exists and, with an #anchor, a heading of that file (GitHub's heading ids).
package doclinks

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	schemeRE  = regexp.MustCompile(`^[a-z]+:`)
)

// prose returns the lines of a Markdown file outside fenced code blocks.
func prose(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	fence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if !fence {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// slug is GitHub's id of a heading: lower case, characters other than letters, digits, '_', '-' and ' ' dropped,
// spaces to '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the heading ids of a Markdown file (a repeated id gets -1, -2, ...).
func anchors(path string) (map[string]bool, error) {
	lines, err := prose(path)
	if err != nil {
		return nil, err
	}
	out, seen := map[string]bool{}, map[string]int{}
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out, nil
}

// brokenLinks lists the broken relative links of the Markdown file path (relative to root).
func brokenLinks(root, path string) ([]string, error) {
	lines, err := prose(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, m := range linkRE.FindAllStringSubmatch(strings.Join(lines, "\n"), -1) {
		link := m[1]
		if schemeRE.MatchString(link) {
			continue
		}
		file, anchor, _ := strings.Cut(link, "#")
		target := path
		if file != "" {
			target = filepath.Clean(filepath.Join(filepath.Dir(path), file))
		}
		if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			bad = append(bad, fmt.Sprintf("%s: (%s): no file %s", path, link, target))
			continue
		}
		if anchor == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		ids, err := anchors(filepath.Join(root, target))
		if err != nil {
			return nil, err
		}
		if !ids[anchor] {
			bad = append(bad, fmt.Sprintf("%s: (%s): no heading #%s in %s", path, link, anchor, target))
		}
	}
	return bad, nil
}

func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "docs/dev/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, rel)
		}
	}
	if len(files) < 5 {
		t.Fatalf("found only %v: not the repository's docs", files)
	}
	for _, f := range files {
		bad, err := brokenLinks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Error(b)
		}
	}
}

// TestBrokenLinksFinds: the check reports a missing file and a missing heading, and passes a good link and a
// repeated heading's id.
func TestBrokenLinksFinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("b.md", "# Title\n## Install (Helm)\n## Notes\n## Notes\n```\n## not a heading\n```\n")
	write("a.md", "[ok](b.md#install-helm) [rep](b.md#notes-1) [web](https://x.io/y) [self](#top)\n"+
		"[gone](c.md) [noanchor](b.md#nowhere) [fenced](b.md#not-a-heading)\n# Top\n")
	bad, err := brokenLinks(dir, "a.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.md: (c.md): no file c.md", "a.md: (b.md#nowhere): no heading #nowhere in b.md",
		"a.md: (b.md#not-a-heading): no heading #not-a-heading in b.md"}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
