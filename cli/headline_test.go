package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"herald/manifest"
)

// TestRejectionNamesEachViolationOnce: a data_invalid rejection's message
// lists its violations, and so do the lines under it; printed together, each
// pointer appears once.
func TestRejectionNamesEachViolationOnce(t *testing.T) {
	errs := []manifest.DataError{{Pointer: "/total", Message: "got string, want number"}, {Pointer: "", Message: "missing property 'id'"}}
	var out bytes.Buffer
	fmt.Fprintf(&out, "rejected: data_invalid: %s\n", headline("/total: got string, want number; (root): missing property 'id'", errs))
	printDataErrors(&out, errs)
	for _, want := range []string{"/total: got string, want number", "(root): missing property 'id'"} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%q appears %d times, want once:\n%s", want, n, out.String())
		}
	}
	if !strings.Contains(out.String(), "(2 violations):") {
		t.Errorf("the headline does not count the violations:\n%s", out.String())
	}
	if got := headline("event_not_declared: no such event", nil); got != "event_not_declared: no such event" {
		t.Errorf("a rejection without violations keeps its message, got %q", got)
	}
}
