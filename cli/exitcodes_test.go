package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"herald/internal/testenv"
)

// exitCodeRow is one row of the exit-code table of docs/design.md.
type exitCodeRow struct {
	code     int
	constant string
}

// designExitCodes reads the table after the exit-codes marker of
// docs/design.md.
func designExitCodes(t *testing.T) []exitCodeRow {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []exitCodeRow
	marked := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- exit-codes:"):
			marked = true
		case marked && strings.HasPrefix(line, "| "):
			cols := strings.Split(strings.Trim(line, "|"), "|")
			if len(cols) != 3 {
				t.Fatalf("docs/design.md exit codes: a row with %d columns, want 3: %s", len(cols), line)
			}
			code, err := strconv.Atoi(strings.TrimSpace(cols[0]))
			if err != nil {
				if strings.TrimSpace(cols[0]) == "code" {
					continue // the header
				}
				t.Fatalf("docs/design.md exit codes: %q is not a code", cols[0])
			}
			rows = append(rows, exitCodeRow{code: code, constant: strings.Trim(strings.TrimSpace(cols[1]), "`")})
		case marked && len(rows) > 0 && !strings.HasPrefix(line, "|"):
			return rows
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md: no exit-code table after <!-- exit-codes: ... -->")
	}
	return rows
}

// TestExitCodesTableIsTheCodes holds the exit-code table of
// docs/design.md#command-line to starter's constants, both ways.
func TestExitCodesTableIsTheCodes(t *testing.T) {
	t.Parallel()
	constants := map[string]int{"ExitOK": ExitOK, "ExitError": ExitError, "ExitInvalid": ExitInvalid}
	seen := map[string]bool{}
	for _, r := range designExitCodes(t) {
		v, ok := constants[r.constant]
		switch {
		case !ok:
			t.Errorf("docs/design.md documents exit code %d as %s, which is no constant of cli", r.code, r.constant)
		case v != r.code:
			t.Errorf("docs/design.md documents %s as %d; the code says %d", r.constant, r.code, v)
		}
		seen[r.constant] = true
	}
	for name := range constants {
		if !seen[name] {
			t.Errorf("cli.%s is not in the exit-code table of docs/design.md", name)
		}
	}
}

// TestExitCodesAreWhatStarterExitsWith: each row's meaning is what Run
// returns: a malformed request and an unknown command exit ExitInvalid, an
// unreachable database ExitError, help ExitOK.
func TestExitCodesAreWhatStarterExitsWith(t *testing.T) {
	t.Parallel()
	unreachable := func(k string) string {
		if k == "HERALD_DATABASE_URL" {
			return "postgres://herald@127.0.0.1:1/herald?connect_timeout=2&sslmode=disable"
		}
		return ""
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"help"}, ExitOK},
		{[]string{"no-such-command"}, ExitInvalid},
		{[]string{"catalog", "--verbose"}, ExitInvalid},
		{[]string{"redeliver", "--subscription", "billing:contacts.person.updated@1", "--subject", "k", "--all"}, ExitInvalid},
		{[]string{"catalog"}, ExitError},
	} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20e9)
		got := Run(ctx, c.args, strings.NewReader(""), &out, &out, unreachable)
		cancel()
		if got != c.want {
			t.Errorf("starter %s exited %d, want %d\n%s", strings.Join(c.args, " "), got, c.want, out.String())
		}
	}
	if exitCode(errors.New("connection refused")) != ExitError || exitCode(invalidf("unknown id")) != ExitInvalid ||
		exitCode(nil) != ExitOK {
		t.Error("exitCode does not map errors to the documented codes")
	}
}
