package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"herald/internal/testenv"
)

// designSynopsis returns the forms of the synopsis of docs/design.md's
// Command line section: the first code block under its heading, each line
// cut into its columns (every column starts with "starter ").
func designSynopsis(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	column := regexp.MustCompile(`\s{2,}starter\s`)
	var forms []string
	section, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Command line"
		case section && strings.HasPrefix(line, "```"):
			if inBlock {
				return forms
			}
			inBlock = true
		case inBlock && strings.TrimSpace(line) != "":
			cuts := column.FindAllStringIndex(line, -1)
			start := 0
			for _, c := range cuts {
				forms = append(forms, strings.TrimSpace(line[start:c[0]]))
				start = c[0]
			}
			forms = append(forms, strings.TrimSpace(line[start:]))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal("docs/design.md: no code block under ## Command line")
	return nil
}

// placeholder matches a synopsis placeholder: APP, WORKFLOW-ID, NAME|ID,
// PATH..., @FILE.
var placeholder = regexp.MustCompile(`^@?[A-Z][A-Z0-9-]*(\|[A-Z][A-Z0-9-]*)*(\.\.\.)?$`)

const synopsisEventID = "7c0e7c1e-6d3a-4b5e-9d53-2f0c1a9b8e11"

// synopsisPageToken is well formed for both listings: base64url for
// `deliveries`, and a cursor (time, subscription, event, filters) for
// `deliveries --log`.
const synopsisPageToken = "eyJ0IjoiMjAyNi0xMi0wMVQwMDowMDowMFoiLCJzIjoiYmlsbGluZzpjb250YWN0cy5wZXJzb24udXBkYXRlZEAxIiwiZSI6IjdjMGU3YzFlLTZkM2EtNGI1ZS05ZDUzLTJmMGMxYTliOGUxMSIsImYiOiIwMTIzNDU2Nzg5YWIifQ"

// flagSamples are the values put in for a placeholder after a flag (first
// "flag PLACEHOLDER", then the flag alone).
var flagSamples = map[string]string{
	"--runtime-role": "herald_runtime", "--actor": "alice", "--reason": "why", "--name": "ci",
	"--app": "contacts", "--type": "contacts.person.updated", "--version": "1", "--subject": "person-42",
	"--data JSON": `{"id":"42","name":"Ada"}`, "--data @FILE": "@person.json", "--id": synopsisEventID,
	"--status": "failed", "--subscription": "billing:contacts.person.updated@1", "--page-token": synopsisPageToken,
	"--event": synopsisEventID, "--since": "2h", "--until": "1h", "--target": "billing", "--action": "app.applied",
	"--limit": "10", "--out": "keys", "--keys": "keys",
	// a bool flag before the positional NAME|ID of tokens revoke
	"--operator NAME|ID": "ci",
}

// argSamples are the values put in for a positional placeholder (first
// "command PLACEHOLDER", then the placeholder alone).
var argSamples = map[string]string{
	"APP": "billing", "ROLE": "billing_publisher", "PATH...": "manifests", "NAME|ID": "ci",
	"WORKFLOW-ID":      "deliver:billing:contacts.person.updated@1:person-42",
	"subscriptions ID": "billing:contacts.person.updated@1", "events ID": synopsisEventID,
}

// expandForm turns one synopsis form ("starter cmd ...") into the command
// lines it stands for: each alternative (a|b as a word, x | y in a group
// or after the command's name), with and without each optional [...] part,
// placeholders replaced by sample values.
func expandForm(form string) ([][]string, error) {
	if strings.Contains(form, "  ") {
		return nil, errors.New("two spaces inside a form: each column of a line starts with starter")
	}
	for _, r := range []string{"[", "]", "(", ")"} {
		form = strings.ReplaceAll(form, r, " "+r+" ")
	}
	toks := strings.Fields(form)
	if len(toks) < 2 || toks[0] != "starter" {
		return nil, errors.New(`a form starts with "starter COMMAND"`)
	}
	pos := 2
	rest, err := expandSeq(toks, &pos, "")
	if err != nil {
		return nil, err
	}
	var lines [][]string
	for _, name := range strings.Split(toks[1], "|") {
		for _, r := range rest {
			line := append([]string{name}, r...)
			if err := fillSamples(line); err != nil {
				return nil, err
			}
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// expandSeq expands toks from *pos up to closer ("" for the end): a
// sequence with " | " between its alternatives.
func expandSeq(toks []string, pos *int, closer string) ([][]string, error) {
	var alts [][]string
	cur := [][]string{{}}
	for *pos < len(toks) {
		tok := toks[*pos]
		*pos++
		switch {
		case tok == closer:
			return append(alts, cur...), nil
		case tok == "]" || tok == ")":
			return nil, fmt.Errorf("unexpected %s", tok)
		case tok == "|":
			alts = append(alts, cur...)
			cur = [][]string{{}}
		case tok == "[" || tok == "(":
			end := map[string]string{"[": "]", "(": ")"}[tok]
			inner, err := expandSeq(toks, pos, end)
			if err != nil {
				return nil, err
			}
			if tok == "[" {
				inner = append([][]string{{}}, inner...)
			}
			cur = product(cur, inner)
		case strings.Contains(tok, "|") && !placeholder.MatchString(tok):
			var words [][]string
			for _, w := range strings.Split(tok, "|") {
				words = append(words, []string{w})
			}
			cur = product(cur, words)
		default:
			cur = product(cur, [][]string{{tok}})
		}
	}
	if closer != "" {
		return nil, fmt.Errorf("missing %s", closer)
	}
	return append(alts, cur...), nil
}

// product appends each of b to each of a.
func product(a, b [][]string) [][]string {
	var out [][]string
	for _, x := range a {
		for _, y := range b {
			out = append(out, append(append([]string{}, x...), y...))
		}
	}
	return out
}

// fillSamples replaces the placeholders of a command line with sample
// values.
func fillSamples(line []string) error {
	for i, tok := range line {
		if !placeholder.MatchString(tok) {
			continue
		}
		var v string
		var ok bool
		if prev := line[i-1]; strings.HasPrefix(prev, "--") {
			if v, ok = flagSamples[prev+" "+tok]; !ok {
				v, ok = flagSamples[prev]
			}
		} else if v, ok = argSamples[line[0]+" "+tok]; !ok {
			v, ok = argSamples[tok]
		}
		if !ok {
			return fmt.Errorf("no sample value for %s in %q (add one to the test)", tok, strings.Join(line, " "))
		}
		line[i] = v
	}
	return nil
}

// parseOnly runs a command line of starter up to its first action.
func parseOnly(args []string) (string, error) {
	var out bytes.Buffer
	inv := &invocation{ctx: context.Background(), stdin: strings.NewReader(""), stdout: &out, stderr: &out,
		getenv: env{}.getenv, parseOnly: true}
	err := inv.run(args)
	return out.String(), err
}

// TestDesignSynopsisParses runs every command line of the synopsis of
// docs/design.md#command-line through starter's parser: each must get as
// far as acting (connecting, reading a file), never be refused as a
// malformed request. Every command of starter must appear in it.
func TestDesignSynopsisParses(t *testing.T) {
	t.Parallel()
	forms := designSynopsis(t)
	documented := map[string]bool{}
	n := 0
	for _, form := range forms {
		lines, err := expandForm(form)
		if err != nil {
			t.Errorf("docs/design.md synopsis %q: %v", form, err)
			continue
		}
		for _, line := range lines {
			n++
			documented[line[0]] = true
			if out, err := parseOnly(line); !errors.Is(err, errParsedOnly) {
				t.Errorf("docs/design.md synopsis %q: starter %s is refused: %v\n%s", form, strings.Join(line, " "), err, out)
			}
		}
	}
	for _, c := range commands {
		if !documented[c.name] {
			t.Errorf("starter %s is not in the synopsis of docs/design.md", c.name)
		}
	}
	if n < 40 {
		t.Errorf("the synopsis expanded to %d command lines; the parse of docs/design.md lost some", n)
	}
}

// TestParseOnlyRefusesWhatTheCLIRefuses: the parse-only run of the synopsis
// test is not vacuous: a malformed line is refused before acting.
func TestParseOnlyRefusesWhatTheCLIRefuses(t *testing.T) {
	t.Parallel()
	for _, line := range [][]string{
		{"redeliver", "--subscription", "billing:contacts.person.updated@1", "--subject", "k", "--all"},
		{"cancel", "--subscription", "billing:contacts.person.updated@1", "--subject", "k", "--event", synopsisEventID, "--all"},
		{"redeliver", "--subscription", "billing:contacts.person.updated@1", "--event", synopsisEventID, "--app", "contacts"},
		{"apps", "token", "revoke", "billing"},
		{"catalog", "--verbose"},
	} {
		if _, err := parseOnly(line); err == nil || errors.Is(err, errParsedOnly) || exitCode(err) != ExitInvalid {
			t.Errorf("starter %s: %v, want a refusal (exit 2) before acting", strings.Join(line, " "), err)
		}
	}
	lines, err := expandForm("starter pause|resume APP [--reason R | --all] (--subject K | --event ID)")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(lines))
	for i, l := range lines {
		got[i] = strings.Join(l, " ")
	}
	if len(got) != 12 || got[0] != "pause billing --subject person-42" || got[1] != "pause billing --event "+synopsisEventID ||
		got[2] != "pause billing --reason why --subject person-42" || got[11] != "resume billing --all --event "+synopsisEventID {
		t.Errorf("expandForm = %q", got)
	}
	if _, err := expandForm("starter catalog X"); err == nil || !strings.Contains(err.Error(), "no sample value for X") {
		t.Errorf("expandForm with an unknown placeholder: %v, want an error", err)
	}
}
