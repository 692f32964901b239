// Package docs_test checks the figures the documentation quotes: each
// section of docs/performance.md, README.md and docs/reliability.md that
// quotes a measurement names the commit it was measured at, in one form —
// "measured at `abc1234`" (several: "measured at `abc1234` and `def5678`") —
// every commit so named is in the repository's history, and
// docs/performance.md stays short (older runs go to CHANGELOG.md's
// "Measurement history").
package docs_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, seen from this package's directory.
const root = ".."

// perfPage is the performance page, and perfPageLimit its size limit in
// bytes (15 KB, read as 15,000 bytes so that either reading of "KB" holds).
const (
	perfPage      = "docs/performance.md"
	perfPageLimit = 15_000
)

// figurePages are the pages whose sections with figures must each name the
// commit they were measured at.
var figurePages = []string{perfPage, "README.md", "docs/reliability.md"}

// commitPages are the pages whose commit mentions must exist: the figure
// pages and the changelog, which keeps the measurement history.
var commitPages = append(slices.Clone(figurePages), "CHANGELOG.md")

var (
	// measuredAt is the one form a commit of figures is named in.
	measuredAt = regexp.MustCompile("[Mm]easured\\s+at\\s+(`[0-9a-f]{7,40}`(?:(?:,|\\s+and|,\\s+and)\\s+`[0-9a-f]{7,40}`)*)")
	// commitInMention is one commit of such a mention.
	commitInMention = regexp.MustCompile("`([0-9a-f]{7,40})`")
	// figure is a measured quantity: a ratio (2.23×), a rate (40.7/s), a
	// latency (131 ms), a memory size (162 MB), a test run's outcome (PASS,
	// FAIL) or a count of passing runs (3 runs of 3, 7490 of 7490).
	figure = regexp.MustCompile(`\b\d+(?:[.,]\d+)*(?:×|/s\b|\s?ms\b|\s?MB\b)|\b(?:PASS|FAIL)\b|\b\d+ (?:runs? )?of \d+\b`)
	// inlineCode is a code span: settings and commands, not figures.
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// notMeasured are sections whose numbers are settings or bounds derived
// from them, not measurements, by page and heading.
var notMeasured = map[string][]string{
	"docs/reliability.md": {"### Wait bounds, derived from the settings"},
}

// section is the text under one heading, up to the next heading of any
// level, without fenced code blocks.
type section struct {
	heading string
	line    int // of the heading, 1-based
	text    string
}

// sections cuts a Markdown page at its headings. Text before the first
// heading is a section with an empty heading.
func sections(page []byte) []section {
	var out []section
	cur := section{line: 1}
	var text strings.Builder
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			cur.text = text.String()
			out = append(out, cur)
			cur, text = section{heading: line, line: n}, strings.Builder{}
		}
		text.WriteString(line)
		text.WriteByte('\n')
	}
	cur.text = text.String()
	return append(out, cur)
}

// commitsNamed returns the commits a text names in the measured-at form.
func commitsNamed(text string) []string {
	var shas []string
	for _, m := range measuredAt.FindAllStringSubmatch(text, -1) {
		for _, c := range commitInMention.FindAllStringSubmatch(m[1], -1) {
			shas = append(shas, c[1])
		}
	}
	return shas
}

// undated lists the sections of a page that quote figures without naming the
// commit they were measured at, each with its line and first figure;
// sections headed by one of exempt are left out.
func undated(page []byte, exempt []string) []string {
	var out []string
	for _, s := range sections(page) {
		if slices.Contains(exempt, s.heading) {
			continue
		}
		f := figure.FindString(inlineCode.ReplaceAllString(s.text, ""))
		if f == "" || len(commitsNamed(s.text)) > 0 {
			continue
		}
		out = append(out, fmt.Sprintf("line %d %q quotes %q", s.line, s.heading, f))
	}
	return out
}

func readPage(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

func TestPerformancePageIsShort(t *testing.T) {
	if n := len(readPage(t, perfPage)); n > perfPageLimit {
		t.Errorf("%s is %d bytes, over its limit of %d: keep the current figures, the method and how to reproduce; move older runs to CHANGELOG.md's \"Measurement history\"", perfPage, n, perfPageLimit)
	}
}

func TestFiguresNameTheirCommit(t *testing.T) {
	for _, name := range figurePages {
		page := readPage(t, name)
		for _, u := range undated(page, notMeasured[name]) {
			t.Errorf("%s: %s but names no commit: add \"measured at `<commit>`\"", name, u)
		}
		for _, h := range notMeasured[name] {
			if !slices.ContainsFunc(sections(page), func(s section) bool { return s.heading == h }) {
				t.Errorf("%s has no heading %q, which this test exempts as settings: update notMeasured", name, h)
			}
		}
	}
}

func TestNamedCommitsAreInHistory(t *testing.T) {
	git := gitIn(t, root)
	history := map[string]bool{}
	for _, full := range strings.Fields(git("rev-list", "HEAD")) {
		history[full] = true
	}
	shallow := strings.TrimSpace(git("rev-parse", "--is-shallow-repository")) == "true"
	named := 0
	for _, name := range commitPages {
		shas := commitsNamed(string(readPage(t, name)))
		named += len(shas)
		slices.Sort(shas)
		for _, sha := range slices.Compact(shas) {
			full, err := resolveCommit(root, sha)
			switch {
			case err != nil && shallow:
				t.Errorf("%s names commit %s: %v (a shallow clone lacks older commits: git fetch --unshallow)", name, sha, err)
			case err != nil:
				t.Errorf("%s names commit %s: %v", name, sha, err)
			case !history[full]:
				t.Errorf("%s names commit %s (%s), which is not in HEAD's history", name, sha, full)
			}
		}
	}
	if named == 0 {
		t.Fatalf("no \"measured at `<commit>`\" mention in %v: is the form still the one this test reads?", commitPages)
	}
}

// gitIn returns a runner of git commands in dir, skipping the test when dir
// is not in a git checkout at all (a source archive); a checkout without
// the git command fails it.
func gitIn(t *testing.T, dir string) func(args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, ".git")); statErr == nil {
			t.Fatalf("a git checkout, but no git command to read its history: %v", err)
		}
		t.Skip("not a git checkout, and no git command: the named commits cannot be checked")
	}
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil || !sameDir(strings.TrimSpace(string(top)), dir) {
		t.Skipf("%s is not a git checkout of its own: the named commits cannot be checked", dir)
	}
	return func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), gitErr(err))
		}
		return string(out)
	}
}

// sameDir reports whether two paths name one directory.
func sameDir(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA != nil || errB != nil {
		return false
	}
	ra, errA = filepath.Abs(ra)
	rb, errB = filepath.Abs(rb)
	return errA == nil && errB == nil && ra == rb
}

// resolveCommit returns the full id of the commit an abbreviated id names.
func resolveCommit(dir, sha string) (string, error) {
	if err := exec.Command("git", "-C", dir, "cat-file", "-e", sha+"^{commit}").Run(); err != nil {
		return "", fmt.Errorf("no such commit: %w", gitErr(err))
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--verify", "--quiet", sha+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("resolve: %w", gitErr(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// gitErr adds git's own message to a failed command's error.
func gitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// TestFigureRules checks the rules above on small pages, so that a change to
// them cannot quietly stop them from finding anything.
func TestFigureRules(t *testing.T) {
	page := []byte("# Title\n\nIntro without figures.\n\n" +
		"## Dated\n\nMeasured at `abc1234`, `4567abc` and\n`def5678`: Herald 40.7/s, 0.80× the floor.\n\n" +
		"## Undated\n\n| run | result |\n|---|---|\n| 1 | PASS |\n\n" +
		"## Only a command\n\n```sh\ngo test -bench X -benchtime 100x # 55.4 ms\n```\n\n" +
		"## Prose\n\nIt passed 3 runs of 3, at commit 1234abc.\n\n" +
		"## Settings\n\n`HERALD_RETRY_SCHEDULE=200ms,500ms`\n\n" +
		"## Bounds\n\n| retry | 200 ms |\n")
	got := undated(page, []string{"## Bounds"})
	want := []string{
		`line 10 "## Undated" quotes "PASS"`,
		`line 22 "## Prose" quotes "3 runs of 3"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("undated sections:\n got %q\nwant %q", got, want)
	}
	if got, want := commitsNamed(string(page)), []string{"abc1234", "4567abc", "def5678"}; !slices.Equal(got, want) {
		t.Errorf("commits named: got %q, want %q", got, want)
	}
	for _, want := range []string{"dated", "only-a-command", "prose"} {
		if !anchors(page)[want] {
			t.Errorf("anchors: no %q in %v", want, anchors(page))
		}
	}
	if a := anchors([]byte("### `make chaos` on a fresh clone (2026-11-30, 15:32–15:57 UTC)\n")); !a["make-chaos-on-a-fresh-clone-2026-11-30-15321557-utc"] {
		t.Errorf("anchors of a heading with code and punctuation: %v", a)
	}
	for text, want := range map[string]string{
		"a ratio 2.23×":                  "2.23×",
		"latency p99 131 ms":             "131 ms",
		"rate 1,112/s":                   "1,112/s",
		"peak 162 MB":                    "162 MB",
		"counters 7490 of 7490":          "7490 of 7490",
		"shape 20 keys × 50, p99 ≤ 1 s":  "",
		"a 10 s hold, 1 MiB, 500 events": "",
		"columns p50 ms and p99 ms":      "",
	} {
		if got := figure.FindString(text); got != want {
			t.Errorf("figure in %q: got %q, want %q", text, got, want)
		}
	}
}

var (
	// mdLink is a Markdown link or image: its target, without a title.
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	// slugDrop is what GitHub leaves out of a heading's anchor.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// anchors returns the anchors of a page's headings, as GitHub makes them.
func anchors(page []byte) map[string]bool {
	out := map[string]bool{}
	for _, s := range sections(page) {
		if s.heading == "" {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(s.heading, "#"))
		out[strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}

// TestPerformanceLinksResolve checks the performance page's links (a chart,
// the changelog's history) and every page's links into it: each file
// exists, and each anchor is one of its target's headings.
func TestPerformanceLinksResolve(t *testing.T) {
	check := func(from, target string) {
		t.Helper()
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			return
		}
		file, anchor, _ := strings.Cut(target, "#")
		path := filepath.Join(filepath.Dir(from), file)
		if file == "" {
			path = from
		}
		page, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s links to %s: %v", from, target, err)
			return
		}
		if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(page)[anchor] {
			t.Errorf("%s links to %s: %s has no heading with the anchor %q", from, target, path, anchor)
		}
	}
	for _, m := range mdLink.FindAllStringSubmatch(string(readPage(t, perfPage)), -1) {
		check(perfPage, m[1])
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			file, _, _ := strings.Cut(m[1], "#")
			if filepath.Join(filepath.Dir(rel), file) == perfPage && rel != perfPage {
				check(rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
