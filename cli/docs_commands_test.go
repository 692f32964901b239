package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"herald/internal/testenv"
	"herald/manifest"
)

// docPages are the pages whose command lines are checked: the README and
// every page of docs/ except performance.md (a record of runs, whose
// command lines are the bench's and checked by its own test).
func docPages(t *testing.T) []string {
	t.Helper()
	root := testenv.RepoRoot()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{filepath.Join(root, "README.md")}
	for _, p := range pages {
		if filepath.Base(p) != "performance.md" {
			out = append(out, p)
		}
	}
	return out
}

// docText is one page cut into the lines of its fenced code blocks (a line
// ending in a backslash joined with the next) and its prose (code blocks
// removed, lines joined, so an inline code span may wrap).
type docText struct {
	page  string
	block []string
	prose string
}

func readDoc(t *testing.T, path string) docText {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := docText{page: filepath.Base(path)}
	if filepath.Base(filepath.Dir(path)) == "docs" {
		d.page = "docs/" + d.page
	}
	var prose []string
	inBlock, cont := false, ""
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			prose = append(prose, line)
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		d.block = append(d.block, cont+line)
		cont = ""
	}
	d.prose = strings.Join(prose, " ")
	return d
}

// blockStarter finds a starter invocation on a line of a code block: the
// line starts with it, after environment assignments, `go run ./`, `$ `,
// or a `docker compose run` of the herald-starter service (or of another
// service with `--entrypoint starter`). The synopsis of design.md is left
// to its own test.
var blockStarter = regexp.MustCompile(`^\s*(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:go run \./|\./)?starter\s+(.*)$` +
	`|^\s*docker compose (?:run|exec)\b.*?(?:\bherald-starter|--entrypoint starter \S+)\s+(.*)$`)

// shellWords splits a command line as a POSIX shell does for plain words
// and single- or double-quoted strings, and drops a trailing # comment.
func shellWords(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		inTok bool
		quote rune
	)
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inTok = r, true
		case r == ' ' || r == '\t':
			if inTok {
				words = append(words, cur.String())
				cur.Reset()
				inTok = false
			}
		case r == '#' && !inTok:
			return words, nil
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if inTok {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestDocumentedCommandLinesParse runs every starter command line in the
// code blocks of README.md and docs/*.md through starter's own parser, with
// sample values for placeholders: each must get as far as acting, never be
// refused as a malformed request (an unknown command or flag, a missing or
// surplus argument, flags that do not go together).
func TestDocumentedCommandLinesParse(t *testing.T) {
	t.Parallel()
	synopsis := map[string]bool{}
	for _, f := range designSynopsis(t) {
		synopsis[f] = true
	}
	n := 0
	for _, path := range docPages(t) {
		d := readDoc(t, path)
		for _, line := range d.block {
			m := blockStarter.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if first, _, _ := strings.Cut(strings.TrimSpace(line), "  "); d.page == "docs/design.md" && synopsis[first] {
				continue // TestDesignSynopsisParses
			}
			rest := m[1] + m[2]
			var lines [][]string
			if strings.ContainsAny(rest, "[|") && !strings.ContainsAny(rest, `'"`) {
				form, _, _ := strings.Cut(rest, " #")
				expanded, err := expandForm("starter " + strings.TrimSpace(form))
				if err != nil {
					t.Errorf("%s: %q: %v", d.page, line, err)
					continue
				}
				lines = expanded
			} else {
				words, err := shellWords(rest)
				for i, w := range words {
					if strings.HasPrefix(w, "$") && i > 0 && strings.HasPrefix(words[i-1], "--") {
						words[i] = "X" // a shell variable: the flag's sample value
					}
				}
				if err == nil {
					words = append([]string{""}, words...) // fillSamples looks one word back
					err = fillSamples(words)
					words = words[1:]
				}
				if err != nil {
					t.Errorf("%s: %q: %v", d.page, line, err)
					continue
				}
				lines = [][]string{words}
			}
			for _, args := range lines {
				n++
				if out, err := parseOnly(args); !errors.Is(err, errParsedOnly) {
					t.Errorf("%s: %q: starter %s is refused: %v\n%s", d.page, line, strings.Join(args, " "), err, out)
				}
			}
		}
	}
	if n < 40 {
		t.Errorf("found %d command lines in the docs' code blocks; the scan lost some", n)
	}
}

// inlineStarter is an inline code span that names a starter command.
var inlineStarter = regexp.MustCompile("`(?:[^`]*?[ /])?starter ([a-z][^`]*)`")

// inlineBare is an inline code span that may be a starter command without
// the program's name (`redeliver --all-failed`, `subscriptions show`): a word
// and then a lower-case word or a flag; it is checked when its first word is
// one of starter's commands.
var inlineBare = regexp.MustCompile("`([a-z][a-z-]*(?:\\|[a-z-]+)* (?:--?[a-z]|[a-z])[^`]*)`")

// template is a Prometheus template's placeholder ({{ $labels.app }}).
var template = regexp.MustCompile(`\{\{[^}]*\}\}`)

// synopsisWords splits a form of the code's synopsis into its words,
// brackets and parentheses dropped.
func synopsisWords(form string) []string {
	return strings.Fields(strings.NewReplacer("[", " ", "]", " ", "(", " ", ")", " ").Replace(form))
}

// matchesWord reports whether a documented word fits the synopsis word w: the
// same word or one of its alternatives (each, for a|b), or any value for a
// placeholder.
func matchesWord(doc, w string) bool {
	if placeholder.MatchString(w) {
		return true
	}
	alts := strings.Split(w, "|")
	for _, d := range strings.Split(doc, "|") {
		if !slices.Contains(alts, d) {
			return false
		}
	}
	return true
}

// TestDocumentedCommandNamesExist checks every inline mention of a starter
// command in README.md and docs/*.md (`starter apps token revoke`,
// `starter redeliver --event ID`) against starter's command table: each
// command and subcommand exists, and each flag is one the command takes.
// Inline mentions are often partial, so they are checked word by word
// rather than parsed whole.
func TestDocumentedCommandNamesExist(t *testing.T) {
	t.Parallel()
	n := 0
	// The alert rules' runbook annotations name commands too.
	pages := append(docPages(t), filepath.Join(testenv.RepoRoot(), "deploy", "prometheus", "alerts.yml"))
	for _, path := range pages {
		d := readDoc(t, path)
		spans := inlineStarter.FindAllStringSubmatch(d.prose, -1)
		for _, m := range inlineBare.FindAllStringSubmatch(d.prose, -1) {
			if _, ok := lookupCommand(strings.Split(strings.Fields(m[1])[0], "|")[0]); ok {
				spans = append(spans, m)
			}
		}
		for _, m := range spans {
			n++
			span := template.ReplaceAllString(m[1], "X")
			words := strings.Fields(strings.NewReplacer("[", " ", "]", " ", "(", " ", ")", " ", "…", " ", "...", " ").Replace(span))
			for _, name := range strings.Split(words[0], "|") {
				c, ok := lookupCommand(name)
				if !ok {
					t.Errorf("%s: `starter %s`: starter has no command %s", d.page, span, name)
					continue
				}
				checkInline(t, d.page, span, c, words[1:])
			}
		}
	}
	if n < 100 {
		t.Errorf("found %d inline mentions of starter commands; the scan lost some", n)
	}
}

// checkInline checks the words after a command's name: the leading
// positional words must follow one of the command's synopsis forms, and every
// flag must be one of the command's flags.
func checkInline(t *testing.T, page, span string, c command, words []string) {
	t.Helper()
	var pos []string
	for _, w := range words {
		if strings.HasPrefix(w, "-") {
			break
		}
		pos = append(pos, w)
	}
	flags := map[string]bool{"--json": true, "--actor": true, "--help": true}
	fits := false
	for _, form := range c.synopsis {
		fw := synopsisWords(form)[1:]
		for _, w := range fw {
			for _, alt := range strings.Split(w, "|") {
				if strings.HasPrefix(alt, "--") {
					flags[alt] = true
				}
			}
		}
		if len(pos) == 0 {
			fits = true
			continue
		}
		ok := len(pos) <= len(fw)
		for i := 0; ok && i < len(pos); i++ {
			ok = !strings.HasPrefix(fw[i], "-") && matchesWord(pos[i], fw[i])
		}
		fits = fits || ok
	}
	if !fits {
		t.Errorf("%s: `starter %s`: %q fits no form of starter %s (%s)", page, span, strings.Join(pos, " "), c.name,
			strings.Join(c.synopsis, "; "))
	}
	for _, w := range words {
		if strings.HasPrefix(w, "--") {
			f, _, _ := strings.Cut(w, "=")
			if !flags[f] {
				t.Errorf("%s: `starter %s`: starter %s takes no flag %s", page, span, c.name, f)
			}
		}
	}
}

// exampleSchemas compiles the data schemas of the example manifests the
// docs publish to (examples/manifests, which make dev applies, and
// deploy/manifests, the compose stack's), by type@version.
func exampleSchemas(t *testing.T) map[string][]*jsonschema.Schema {
	t.Helper()
	out := map[string][]*jsonschema.Schema{}
	for _, dir := range []string{"examples/manifests", "deploy/manifests"} {
		ms, err := manifest.Load(filepath.Join(testenv.RepoRoot(), dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			for _, e := range m.Events {
				sch, err := manifest.CompileSchema(e.DataSchema)
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("%s.%s@%d", m.App, e.Name, e.Version)
				out[key] = append(out[key], sch)
			}
		}
	}
	return out
}

// TestDocumentedPublishDataFitsTheExamples: a `starter publish` line of the
// docs that publishes a type the example manifests declare gives data their
// schema accepts, so the line works as written after `apps apply` of them.
func TestDocumentedPublishDataFitsTheExamples(t *testing.T) {
	t.Parallel()
	schemas := exampleSchemas(t)
	n := 0
	for _, path := range docPages(t) {
		d := readDoc(t, path)
		for _, line := range d.block {
			m := blockStarter.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			words, err := shellWords(m[1] + m[2])
			if err != nil || len(words) == 0 || words[0] != "publish" {
				continue
			}
			flags := map[string]string{}
			for i := 1; i+1 < len(words); i++ {
				if strings.HasPrefix(words[i], "--") {
					flags[words[i]] = words[i+1]
				}
			}
			data, ok := flags["--data"]
			if !ok || strings.HasPrefix(data, "@") {
				continue
			}
			for _, sch := range schemas[flags["--type"]+"@"+flags["--version"]] {
				n++
				errs, err := manifest.ValidateDataWithin(sch, json.RawMessage(data), nil)
				if err != nil || len(errs) > 0 {
					t.Errorf("%s: %q: the example manifests refuse this data: %v %v", d.page, line, errs, err)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no documented starter publish line publishes to the example manifests; the scan lost them")
	}
}
