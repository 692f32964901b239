package filter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// nested builds the filter of issue 26: depth comprehensions over a
// one-item list each, every level making the list of the level before
// bigger (step), then one operation on the last one (last).
func nested(depth int, step, last string) string {
	var b strings.Builder
	b.WriteString("[[1]].exists(l0, ")
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "["+step+"].exists(l%d, ", i-1, i-1, i)
	}
	fmt.Fprintf(&b, last, depth, depth)
	b.WriteString(strings.Repeat(")", depth+1))
	return b.String()
}

// TestHostileFiltersRefused: the filters of issue 26 item 1 are accepted by
// the CEL checker and stay under the cost limit, yet a list holding itself
// twice per level makes one `==` compare 2^depth elements (at depth 24
// about 2.4 s on the reference machine, doubling per level: days at 40),
// and a list doubled by `+` per level makes one `in` walk 2^depth items.
// Compile refuses both, saying why.
func TestHostileFiltersRefused(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"deep equality", nested(40, "[l%d, l%d]", "l%d == l%d"), "compares two values that may be lists or maps"},
		{"deep in", nested(40, "[l%d, l%d]", "l%d in [l%d]"), "compares two values that may be lists or maps"},
		{"doubled list", nested(40, "l%d + l%d", "2 in l%d + l%d"), "too costly"},
		{"literal loops", strings.Repeat("[1,2,3,4,5,6,7,8,9,10].exists(x, ", 6) + "true" + strings.Repeat(")", 6), "too costly"},
	} {
		if len(tc.text) >= MaxLength {
			t.Fatalf("%s: %d characters, want a filter under the %d cap", tc.name, len(tc.text), MaxLength)
		}
		_, err := Compile(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%d characters): %v; want refused with %q", tc.name, len(tc.text), err, tc.want)
		}
	}
}

// TestOrdinaryFiltersAccepted: the refusals leave everyday filters alone,
// nested passes over an event's own sub-lists included.
func TestOrdinaryFiltersAccepted(t *testing.T) {
	for _, text := range []string{
		`data.total > 1000 && subject.startsWith("eu-")`,
		`data.status in ["paid", "shipped"]`,
		`"vip" in data.tags`,
		`data.lines.exists(l, l.sku == "a" && l.tags.exists(t, t == "x"))`,
		`data.lines.map(l, l.qty).exists(q, q > 3)`,
		`data.coupon == null || data.coupon != "X"`,
		`has(data.a) && data.a.size() > 2`,
	} {
		if _, err := Compile(text); err != nil {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// TestConcatIsCharged: a list doubled by `+` in a loop is charged its size,
// so evaluation stops at the cost limit at once even when the apply-time
// estimate is skipped (a filter stored by an older Herald).
func TestConcatIsCharged(t *testing.T) {
	text := nested(40, "l%d + l%d", "2 in l%d + l%d")
	f, err := compile(text, false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := f.Match(context.Background(), []byte(`{"data":{}}`))
	if ok || ReasonOf(err) != ReasonCost {
		t.Fatalf("%v, %v; want the cost limit", ok, err)
	}
	if d := time.Since(start); d > Deadline {
		t.Fatalf("took %v, more than the deadline %v", d, Deadline)
	}
	// Appending one item at a time, as map builds its result, costs 1: over
	// 1,000 items a charge by the list's size would come to about 500,000,
	// five times the cost limit (1,000 keeps the evaluation far inside the
	// deadline on a loaded machine under -race).
	g, err := Compile(`data.items.map(x, x + 1).size() == 1000`)
	if err != nil {
		t.Fatal(err)
	}
	items := strings.TrimSuffix(strings.Repeat("1,", 1000), ",")
	if ok, err := g.Match(context.Background(), []byte(`{"data":{"items":[`+items+`]}}`)); !ok || err != nil {
		t.Fatalf("map over 1,000 items: %v, %v", ok, err)
	}
}

// TestDeadlineInterrupts: evaluation runs under a context; once it is done
// the next check inside a comprehension stops the evaluation, reason timeout.
func TestDeadlineInterrupts(t *testing.T) {
	f, err := Compile(`data.items.all(x, x >= 0)`)
	if err != nil {
		t.Fatal(err)
	}
	items := strings.TrimSuffix(strings.Repeat("1,", 1000), ",")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := f.Match(ctx, []byte(`{"data":{"items":[`+items+`]}}`))
	if ok || ReasonOf(err) != ReasonTimeout {
		t.Fatalf("%v, %v; want a timeout", ok, err)
	}
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("%T is not a *filter.Error", err)
	}
}

// TestWorstCaseWithinDeadline: the slowest filters that pass Compile, over
// a 256 KiB event, end at the cost limit well within Deadline.
func TestWorstCaseWithinDeadline(t *testing.T) {
	items := strings.TrimSuffix(strings.Repeat("1,", 128<<10), ",")
	long := strings.Repeat("a", 250<<10)
	vars, err := Variables([]byte(`{"data":{"items":[` + items + `],"s":"` + long + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		`data.items.exists(x, x == 2)`,
		`data.items.all(x, data.items.all(y, x + y >= 0))`,
		`data.items.exists(x, 2 in data.items)`,
		`data.items.exists(x, data.s.contains("b"))`,
		`data.items.exists(x, data.s.matches("a*b"))`,
		`data.items.map(x, data.s + data.s).size() > 0`,
	} {
		f, err := Compile(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		start := time.Now()
		_, err = f.MatchVars(context.Background(), vars)
		d := time.Since(start)
		t.Logf("%s: %v in %v", text, ReasonOf(err), d)
		if err == nil {
			t.Errorf("%s: no error; want the cost limit", text)
		}
		// The deadline plus one interrupt interval (one call, such as a
		// regular expression over 250 KiB, is not interruptible).
		if d > 2*Deadline*slowdown {
			t.Errorf("%s: took %v", text, d)
		}
	}
}

// TestMatchCostReportsWork: the cost an evaluation spent comes back with
// its result, and with its error, so the relay can tell work from waiting.
func TestMatchCostReportsWork(t *testing.T) {
	f, err := Compile(`data.items.all(x, data.items.all(y, x + y >= 0))`)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := Variables([]byte(`{"data":{"items":[1,2,3]}}`))
	if ok, spent, err := f.MatchCost(context.Background(), small); !ok || err != nil || spent == 0 || spent > 1000 {
		t.Fatalf("3 items: %v, cost %d, %v", ok, spent, err)
	}
	items := strings.TrimSuffix(strings.Repeat("1,", 2000), ",")
	large, _ := Variables([]byte(`{"data":{"items":[` + items + `]}}`))
	ok, spent, err := f.MatchCost(context.Background(), large)
	if ok || err == nil || (ReasonOf(err) == ReasonCost && spent <= CostLimit) || spent == 0 {
		t.Fatalf("2,000 items: %v, cost %d, %v; want the work spent with the error", ok, spent, err)
	}
}

// TestMatchesPatternIsABoundedLiteral: a pattern read from the event could
// cost anything to compile and to run, and a large literal one costs its
// program's size on every byte: Compile refuses both, saying where, and
// takes ordinary patterns, in either form of the call.
func TestMatchesPatternIsABoundedLiteral(t *testing.T) {
	for text, want := range map[string]string{
		`data.s.matches(data.p)`:                        "not a string literal",
		`matches(subject, string(data.p))`:              "not a string literal",
		`subject.matches(subject)`:                      "not a string literal",
		`subject.matches("[ab]{0,1000}c")`:              "too complex",
		`subject.matches("[a-z]{0,600}[0-9]{600}")`:     "too complex",
		`data.items.exists(x, x.matches("a{999}b{9}"))`: "too complex",
		`subject.matches("(")`:                          "does not parse",
	} {
		_, err := Compile(text)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "line 1, column") {
			t.Errorf("Compile(%s) = %v; want a refusal saying %q and where", text, err, want)
		}
	}
	vars := map[string]any{"subject": "eu-42", "data": map[string]any{}}
	for text, want := range map[string]bool{
		`subject.matches("^eu-[0-9]+$")`:  true,
		`matches(subject, "^us-")`:        false,
		`subject.matches("[ab]{0,900}c")`: false,
		`subject.matches("4")`:            true, // a match anywhere, as RE2's
	} {
		f, err := Compile(text)
		if err != nil {
			t.Fatalf("Compile(%s): %v", text, err)
		}
		if got, err := f.MatchVars(context.Background(), vars); err != nil || got != want {
			t.Errorf("%s on subject eu-42: %v, %v; want %v", text, got, err, want)
		}
	}
}

// TestRegexBudgetStopsAMatchBeforeItRuns: each match is charged to the
// evaluation's cost before it runs (a cost unit per RegexUnitsPerCost
// bytes times program size). `[ab]{0,900}c` over 256 KiB would take
// seconds: it fails at once as a cost error, naming its charge; a loop of
// matches that each fit stops once they add up over the limit; and the
// charge is reported as the evaluation's work, so the relay's round budget
// counts it.
func TestRegexBudgetStopsAMatchBeforeItRuns(t *testing.T) {
	long := strings.Repeat("a", 256<<10)
	f, err := Compile(`data.s.matches("[ab]{0,900}c")`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.MatchVars(context.Background(), map[string]any{"data": map[string]any{"s": long}})
	if ReasonOf(err) != ReasonCost || !strings.Contains(err.Error(), "costs") {
		t.Fatalf("a match of 256 KiB against [ab]{0,900}c: %v; want a cost error before it runs", err)
	}
	// "a+" is estimated at 2, so a match of 256 KiB is ~524,000 units, a
	// charge of 26,215: three fit in the cost limit, four do not.
	loop := func(n int) error {
		f, err := Compile(fmt.Sprintf(`[%s].all(i, data.s.matches("a+"))`, strings.TrimSuffix(strings.Repeat("1,", n), ",")))
		if err != nil {
			t.Fatal(err)
		}
		ok, err := f.MatchVars(context.Background(), map[string]any{"data": map[string]any{"s": long}})
		if err == nil && !ok {
			t.Fatalf("%d matches of a+ over a's: false", n)
		}
		return err
	}
	if err := loop(3); err != nil {
		t.Fatalf("three matches within the budget: %v", err)
	}
	if err := loop(4); ReasonOf(err) != ReasonCost {
		t.Fatalf("four matches over the budget: %v; want a cost error", err)
	}
	// Each evaluation has a limit of its own.
	if err := loop(3); err != nil {
		t.Fatalf("three matches again, in a new evaluation: %v", err)
	}
	one, err := Compile(`data.s.matches("a+")`)
	if err != nil {
		t.Fatal(err)
	}
	ok, spent, err := one.MatchCost(context.Background(), map[string]any{"data": map[string]any{"s": long}})
	if want := uint64((len(long)+1)*2/RegexUnitsPerCost + 1); !ok || err != nil || spent < want {
		t.Fatalf("one match of 256 KiB: %v, %v, cost %d; want true and a cost of at least its charge %d", ok, err, spent, want)
	}
}
