package filter_test

import (
	"context"
	"strings"
	"testing"

	"herald/filter"
)

const order = `{"specversion":"1.0","id":"e1","source":"app:orders","type":"orders.order.placed",
 "subject":"eu-42","time":"2026-11-30T10:00:00Z","datacontenttype":"application/json","dataversion":1,
 "traceparent":"00-abc-def-01","data":{"total":1500,"lines":[{"sku":"a"}],"vat":0.2}}`

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{`data.total > 1000 && subject.startsWith("eu-")`, true},
		{`data.total > 2000`, false},
		{`data.vat < 0.5 && size(data.lines) == 1`, true},
		{`type == "orders.order.placed" && dataversion == 1 && source == "app:orders"`, true},
		{`time < timestamp("2026-12-01T00:00:00Z")`, true},
		{`ext.traceparent.startsWith("00-")`, true},
		{`has(data.coupon) && data.coupon == "X"`, false},
	} {
		f, err := filter.Compile(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := f.Match(context.Background(), []byte(order))
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
}

func TestMatchErrorsAreNoMatch(t *testing.T) {
	f, err := filter.Compile(`data.coupon == "X"`) // no such field in the event
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(context.Background(), []byte(order)); ok || err == nil {
		t.Fatalf("a missing field: %v, %v; want false with an error", ok, err)
	}
	for _, event := range []string{`not json`, `[1]`, `1`, `null`, `{"data":1`, `{"data":1} {}`} {
		if ok, err := f.Match(context.Background(), []byte(event)); ok || err == nil || !strings.Contains(err.Error(), "not a JSON object") {
			t.Fatalf("event %s: %v, %v; want no match, the event not a JSON object", event, ok, err)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		``:                        "empty",
		`data.total >`:            "does not compile",
		`subject + 1`:             "does not compile",
		`subject`:                 "want a bool",
		`nosuchvar == 1`:          "does not compile",
		strings.Repeat("a", 3000): "at most",
	} {
		if _, err := filter.Compile(expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%.30q) = %v, want an error with %q", expr, err, want)
		}
	}
}

// TestCostLimit: a filter that does too much work over a large event stops
// at the cost limit instead of holding the relay (or, slowed down by the
// race detector, at the deadline first).
func TestCostLimit(t *testing.T) {
	f, err := filter.Compile(`data.items.all(x, data.items.all(y, x + y >= 0))`)
	if err != nil {
		t.Fatal(err)
	}
	items := strings.TrimSuffix(strings.Repeat("1,", 2000), ",")
	ok, err := f.Match(context.Background(), []byte(`{"data":{"items":[`+items+`]}}`))
	if r := filter.ReasonOf(err); ok || err == nil || (r != filter.ReasonCost && r != filter.ReasonTimeout) {
		t.Fatalf("4,000,000 steps: %v, %v; want the cost limit", ok, err)
	}
}
