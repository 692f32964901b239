package walkthrough_test

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"herald/internal/testenv"
)

// The kinds of fenced block docs/walkthrough.md may hold (its "Editing this
// page" section says the same for its editors).
const (
	// kindRun is an sh block: lines the test runs.
	kindRun = "run"
	// kindOutput is a text block right after a run block: what it prints.
	kindOutput = "output"
	// kindFile is a block with file=PATH: a file the test writes.
	kindFile = "file"
)

// block is one fenced block of the page.
type block struct {
	line int    // the line of its opening fence, for messages
	info string // the info string: language and attributes
	kind string
	// eventually: an output block whose run block runs again until it
	// prints the output.
	eventually bool
	// file is the path of a file block.
	file string
	// lang is the language of a file block.
	lang string
	// before is the page's text between the previous block and this one.
	before string
	text   string
}

// step is one thing the test does: write a file, or run a run block and
// compare what it prints with its output block, if the page shows one.
type step struct {
	file   *block
	run    *block
	output *block
}

// walkthroughPath is the page under test.
func walkthroughPath() string { return filepath.Join(testenv.RepoRoot(), "docs", "walkthrough.md") }

// readPage reads the fenced blocks of the page at p, and fails on a block
// the test would not run, write or compare.
func readPage(t *testing.T, p string) []block {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks []block
		cur    *block
		prose  strings.Builder
		body   strings.Builder
		n      int
	)
	sc := bufio.NewScanner(f)
	blank := true
	for sc.Scan() {
		n++
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimLeft(line, " "), "```")
		// Code the test would not see: a ~~~ fence, or an indented block
		// (four blanks after an empty line).
		if cur == nil && (strings.HasPrefix(strings.TrimLeft(line, " "), "~~~") ||
			blank && (strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")) && strings.TrimSpace(line) != "") {
			t.Fatalf("%s:%d: code outside a ``` block is neither run nor compared: fence it with ```sh, ```text or ```LANG file=PATH", filepath.Base(p), n)
		}
		blank = strings.TrimSpace(line) == ""
		switch {
		case cur == nil && fence:
			b, err := classify(strings.TrimSpace(strings.TrimLeft(line, " `")), n)
			if err != nil {
				t.Fatal(err)
			}
			b.before = prose.String()
			prose.Reset()
			cur = &b
		case cur == nil:
			prose.WriteString(line + "\n")
		case fence:
			cur.text = body.String()
			body.Reset()
			blocks = append(blocks, *cur)
			cur = nil
		default:
			body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: the block is never closed", p, cur.line)
	}
	return blocks
}

// classify reads a block's info string.
func classify(info string, line int) (block, error) {
	b := block{line: line, info: info}
	fields := strings.Fields(info)
	switch {
	case info == "sh":
		b.kind = kindRun
	case info == "text":
		b.kind = kindOutput
	case info == "text eventually":
		b.kind, b.eventually = kindOutput, true
	case len(fields) == 2 && strings.HasPrefix(fields[1], "file="):
		b.kind, b.lang, b.file = kindFile, fields[0], strings.TrimPrefix(fields[1], "file=")
		if b.file == "" || path.IsAbs(b.file) || strings.HasPrefix(path.Clean(b.file), "..") {
			return b, fmt.Errorf("walkthrough.md:%d: %q: file= wants a relative path inside the scratch folder", line, info)
		}
	default:
		return b, fmt.Errorf("walkthrough.md:%d: block %q is neither run (sh), compared (text, text eventually) nor written (LANG file=PATH): "+
			"every block of the page must be one of these (see its \"Editing this page\")", line, info)
	}
	return b, nil
}

// plan orders the blocks as the test uses them: files, and run blocks with
// the output block that follows each.
func plan(t *testing.T, blocks []block) []step {
	t.Helper()
	var steps []step
	for i := range blocks {
		b := &blocks[i]
		switch b.kind {
		case kindRun:
			steps = append(steps, step{run: b})
		case kindOutput:
			if len(steps) == 0 || steps[len(steps)-1].run == nil || steps[len(steps)-1].output != nil || blocks[i-1].kind != kindRun {
				t.Fatalf("walkthrough.md:%d: an output block must come right after an sh block", b.line)
			}
			steps[len(steps)-1].output = b
		case kindFile:
			if !strings.Contains(b.before, "`"+b.file+"`") {
				t.Fatalf("walkthrough.md:%d: the text just before the block must name its file `%s`", b.line, b.file)
			}
			steps = append(steps, step{file: b})
		}
	}
	return steps
}

// ellipsis in an output block matches any text.
const ellipsis = "…"

// spaces are runs of blanks; outputs are compared with each run as one
// space, so a column's width (a longer sequence number) does not matter.
var spaces = regexp.MustCompile(`[ \t]+`)

// outputPattern compiles an output block: its lines in order, each whole,
// with … matching anything.
func outputPattern(text string) *regexp.Regexp {
	var lines []string
	for _, l := range outputLines(text) {
		parts := strings.Split(l, ellipsis)
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		lines = append(lines, strings.Join(parts, ".*"))
	}
	return regexp.MustCompile(`\A` + strings.Join(lines, `\n`) + `\z`)
}

// outputLines are the lines of an output, blanks collapsed and trailing
// empty lines dropped.
func outputLines(text string) []string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(spaces.ReplaceAllString(l, " "))
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// matches reports whether out is what the output block shows.
func matches(output block, out string) bool {
	return outputPattern(output.text).MatchString(strings.Join(outputLines(out), "\n"))
}

// TestWalkthroughPageBlocks: every block of the page is one the test runs,
// compares or writes; each output follows a command; each file is named in
// the text the reader follows; the page keeps its promise of a receiver in
// Go and one in another language; and what the page tells the reader to
// paste from make dev carries what the test gives its shell. Needs no
// services (make test-unit runs it).
func TestWalkthroughPageBlocks(t *testing.T) {
	blocks := readPage(t, walkthroughPath())
	plan(t, blocks)
	langs := map[string]bool{}
	for _, b := range blocks {
		if b.kind == kindFile {
			langs[b.lang] = true
		}
	}
	if !langs["go"] || !langs["js"] {
		t.Errorf("the page must write a receiver in Go and one in JavaScript (files of language go and js); it writes %v", langs)
	}
	wantDevExports(t)
	wantLinks(t, walkthroughPath())
}

// link is a relative markdown link: [text](path#anchor).
var link = regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)

// wantLinks checks that every relative link of the page at p names a file
// of the repository and, with an anchor, one of its headings.
func wantLinks(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range link.FindAllStringSubmatch(string(b), -1) {
		target := filepath.Join(filepath.Dir(p), filepath.FromSlash(m[1]))
		doc, err := os.ReadFile(target)
		if err != nil {
			t.Errorf("%s: the link %s names no file: %v", filepath.Base(p), m[0], err)
			continue
		}
		if m[2] != "" && !slices.Contains(headingAnchors(string(doc)), m[2][1:]) {
			t.Errorf("%s: the link %s names no heading of %s", filepath.Base(p), m[0], m[1])
		}
	}
}

// headingAnchors are the anchors GitHub gives the headings of a markdown
// document: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(doc string) []string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
}

// devExports are the variables the page relies on finding in the export
// line make dev prints: the test's shell gets them with its own values.
var devExports = []string{"HERALD_DATABASE_URL", "TEMPORAL_ADDRESS", "HERALD_SECRET_KEY", "HERALD_ALLOW_NETWORKS", "PATH"}

// wantDevExports checks that scripts/dev.sh still prints, under "In another
// terminal", an export line with every variable the page's reader needs.
func wantDevExports(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "scripts", "dev.sh"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "In another terminal:\n")
	line, _, _ := strings.Cut(after, "\n")
	if !ok || !strings.HasPrefix(strings.TrimSpace(line), "export ") {
		t.Fatalf("scripts/dev.sh no longer prints an export line under \"In another terminal:\", which docs/walkthrough.md tells the reader to paste")
	}
	for _, name := range devExports {
		if !regexp.MustCompile(`(^|\s)` + name + `=`).MatchString(line) {
			t.Errorf("make dev's export line (scripts/dev.sh) does not set %s, which docs/walkthrough.md relies on: %s", name, line)
		}
	}
}

// TestOutputPattern: the output comparison the page's text blocks rely on.
func TestOutputPattern(t *testing.T) {
	out := block{text: "accepted: event 0193 (seq …)\n… UTC  mailer  #…  delivered\n"}
	for _, c := range []struct {
		got  string
		want bool
	}{
		{"accepted: event 0193 (seq 7)\n2026-12-02 UTC mailer #7 delivered\n\n", true},
		{"accepted: event 0193 (seq 12)\n2026-12-02 UTC     mailer  #12   delivered", true},
		{"accepted: event 0193 (seq 7)\n2026-12-02 UTC mailer #7 failed", false},
		{"accepted: event 0193 (seq 7)", false},
		{"accepted: event 0193 (seq 7)\n2026-12-02 UTC mailer #7 delivered\nmore", false},
		{"warning: x\naccepted: event 0193 (seq 7)\n2026-12-02 UTC mailer #7 delivered", false},
	} {
		if got := matches(out, c.got); got != c.want {
			t.Errorf("matches(%q) = %v, want %v", c.got, got, c.want)
		}
	}
}
