package publish

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"herald/internal/testenv"
	"herald/manifest"
)

// designCheckCodes returns the rejection codes of the check table of
// docs/design.md#publishing, in the table's order.
func designCheckCodes(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\|.*\\| `([a-z_]+)` \\|$")
	var codes []string
	section := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Publishing"
		case section && strings.HasPrefix(line, "|"):
			if m := row.FindStringSubmatch(line); m != nil {
				codes = append(codes, m[1])
			}
		case section && len(codes) > 0:
			return codes // the first line after the table
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return codes
}

// TestCheckOrderMatchesDesign holds validateRequest to the order of the
// checks in docs/design.md#publishing: for each check and the next one, a
// request failing both is answered with the first one's code. (id_conflict,
// the last, needs the event log: it is checked at the insert, after every
// other check passed.)
func TestCheckOrderMatchesDesign(t *testing.T) {
	t.Parallel()
	const schema = `{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}`
	valid := `{"name":"Ada"}`
	tooLarge := `{"name":"` + strings.Repeat("x", DefaultMaxEventBytes) + `"}`
	// Each case fails two neighbouring checks of the table; want is the
	// code of the first. Checks are named by code, and by what fails for
	// the two checks that share one.
	cases := []struct {
		first, second string
		change        func(r *Request, in *checkInput)
	}{
		{CodeUnknownApp, CodeTypeNotOwned, func(r *Request, in *checkInput) {
			in.appKnown, r.Type = false, "billing.order.placed"
		}},
		{CodeTypeNotOwned, CodeEventNotDeclared, func(r *Request, in *checkInput) {
			r.Type, in.decl = "billing.order.placed", nil
		}},
		{CodeEventNotDeclared, CodeIDInvalid, func(r *Request, in *checkInput) {
			in.decl, r.ID = nil, "not-a-uuid"
		}},
		{CodeIDInvalid, CodeSubjectInvalid, func(r *Request, _ *checkInput) {
			r.ID, r.Subject = "not-a-uuid", ""
		}},
		{CodeSubjectInvalid, CodePayloadTooLarge + " (the data as given)", func(r *Request, _ *checkInput) {
			r.Subject, r.Data = "", json.RawMessage(tooLarge)
		}},
		// Size before JSON validity, on purpose: oversized data is not parsed.
		{CodePayloadTooLarge + " (the data as given)", CodeDataInvalid + " (not JSON)", func(r *Request, _ *checkInput) {
			r.Data = json.RawMessage(strings.Repeat("x", DefaultMaxEventBytes+1))
		}},
		{CodeDataInvalid + " (not JSON)", CodeValidationBudget, func(r *Request, in *checkInput) {
			r.Data, in.budget = json.RawMessage(`{"name":`), manifest.NewBudget(0)
		}},
		{CodeValidationBudget, CodeDataInvalid + " (the schema)", func(r *Request, in *checkInput) {
			r.Data, in.budget = json.RawMessage(`{"name":5}`), manifest.NewBudget(0)
		}},
		{CodeDataInvalid + " (the schema)", CodePayloadTooLarge + " (the encoded event)", func(r *Request, in *checkInput) {
			r.Data, in.maxEventBytes = json.RawMessage(`{"name":5,"pad":"`+strings.Repeat("x", 60)+`"}`), 100
		}},
	}
	want := []string{}
	for i, c := range cases {
		if i == 0 {
			want = append(want, c.first)
		}
		want = append(want, c.second)
		r, in := order(valid), limitsInput(t, schema)
		c.change(&r, &in)
		_, rej := validateRequest(r, in)
		code, _, _ := strings.Cut(c.first, " ")
		if rej == nil || rej.Code != code {
			t.Errorf("a request failing %s and %s: rejection %+v, want %s", c.first, c.second, rej, code)
		}
	}
	// The last check of validateRequest is reachable on its own.
	r, in := order(`{"name":"`+strings.Repeat("x", 60)+`"}`), limitsInput(t, schema)
	in.maxEventBytes = 100
	if _, rej := validateRequest(r, in); rej == nil || rej.Code != CodePayloadTooLarge || !strings.Contains(rej.Message, "encoded event") {
		t.Errorf("an encoded event over the limit: rejection %+v, want payload_too_large", rej)
	}
	// The table lists the same checks in the same order, id_conflict last.
	var codes []string
	for _, w := range append(want, CodeIDConflict) {
		code, _, _ := strings.Cut(w, " ")
		codes = append(codes, code)
	}
	if got := designCheckCodes(t); !slices.Equal(got, codes) {
		t.Errorf("docs/design.md#publishing lists the checks as\n  %v\nthe code runs them as\n  %v", got, codes)
	}
}
