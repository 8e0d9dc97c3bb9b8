package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// Every relative link of the README and of docs/*.md leads somewhere: its
// file (or directory) exists, and its #anchor, if any, is a heading of the
// Markdown file it names (as GitHub makes anchors of headings). A section
// moved or renamed without its links fails here, naming the link.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(repoRoot, "README.md")}, files...)
	n := 0
	for _, file := range files {
		rel, _ := filepath.Rel(repoRoot, file)
		rel = filepath.ToSlash(rel)
		for _, l := range mdLinks(readRepoFile(t, rel)) {
			target, anchor, _ := strings.Cut(l.dest, "#")
			if isExternalLink(target) {
				continue
			}
			n++
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: the link %q leads to no file (%s)", rel, l.line, l.dest, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: the link %q has an anchor into a file that is not Markdown", rel, l.line, l.dest)
				continue
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			if anchors := mdAnchors(string(b)); !anchors[anchor] {
				t.Errorf("%s:%d: the link %q names no heading of %s (its anchors: %s)", rel, l.line, l.dest, filepath.Base(path), strings.Join(sortedKeys(anchors), ", "))
			}
		}
	}
	require.NotZero(t, n, "no relative link found: has mdLinks stopped reading them?")
}

// The anchors and links the test reads are read as GitHub does.
func TestDocLinksParsing(t *testing.T) {
	doc := "# herald: design and public contract\n" +
		"## Production: PostgreSQL + a broker\n" +
		"## `herald dlq` and the **dead** letters\n" +
		"## Notes\n## Notes\n" +
		"```sh\n# not a heading\n[not](a-link.md)\n```\n" +
		"See [a](docs/a.md#x), ![b](img/b.png \"title\"), `[c](code.md)`, [d](https://example.com/d) and [e](#notes-1).\n"
	anchors := mdAnchors(doc)
	for _, a := range []string{"herald-design-and-public-contract", "production-postgresql--a-broker", "herald-dlq-and-the-dead-letters", "notes", "notes-1"} {
		require.True(t, anchors[a], "anchor %q in %v", a, sortedKeys(anchors))
	}
	require.False(t, anchors["not-a-heading"])
	var dests []string
	for _, l := range mdLinks(doc) {
		dests = append(dests, l.dest)
	}
	require.Equal(t, []string{"docs/a.md#x", "img/b.png", "https://example.com/d", "#notes-1"}, dests)
}

type mdLink struct {
	dest string
	line int
}

var mdLinkRe = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// mdLinks returns the inline links and images of a Markdown document,
// outside fenced code blocks and code spans.
func mdLinks(doc string) []mdLink {
	var out []mdLink
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = backticked.ReplaceAllString(line, "")
		for _, m := range mdLinkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{dest: m[1], line: i + 1})
		}
	}
	return out
}

// mdAnchors returns the anchors GitHub gives the headings of a Markdown
// document: the heading's text lower-cased, without its punctuation, its
// spaces made hyphens, and "-1", "-2", ... after a repeat.
func mdAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors[a+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func isExternalLink(dest string) bool {
	return strings.Contains(dest, "://") || strings.HasPrefix(dest, "mailto:")
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
