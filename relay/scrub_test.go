package relay

import (
	"context"
	"strings"
	"testing"

	"herald/filter"
)

// TestScrubKeepsEventDataOut: the first error of a failing filter, as it
// goes to the log and the audit trail, names what the filter's text names
// and elides the event's values.
func TestScrubKeepsEventDataOut(t *testing.T) {
	event := []byte(`{"data":{"t":"s3cr3t(","m":{}}}`)
	for text, want := range map[string]string{
		`timestamp(data.t) > timestamp("2020-01-01T00:00:00Z")`: "invalid RFC 3339 timestamp",
		`duration(data.t) > duration("1s")`:                     "type conversion error",
		`data.m[data.t] == 1`:                                   "no such key: …",
		`data.coupon == "X"`:                                    "no such key: coupon",
	} {
		f, err := filter.Compile(text)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Match(context.Background(), event)
		if err == nil {
			t.Fatalf("%s: no error", text)
		}
		got := scrub(err, text)
		if strings.Contains(got, "s3cr3t") || !strings.Contains(got, want) {
			t.Errorf("%s: %q; want %q and no event data", text, got, want)
		}
	}
	long := strings.Repeat("é", 400)
	if got := scrub(errorString(long), ""); len(got) > 310 || !strings.HasSuffix(got, "…") {
		t.Errorf("a long error: %d bytes, %q", len(got), got[len(got)-8:])
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
