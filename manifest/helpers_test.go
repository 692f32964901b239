package manifest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// validDoc returns a fresh, valid manifest as a JSON-shaped map for tests to
// spoil one field at a time.
func validDoc() map[string]any {
	return map[string]any{
		"app":      "contacts",
		"endpoint": "https://contacts.internal:8443",
		"events": []any{
			map[string]any{
				"name":    "person.updated",
				"version": 1,
				"subject": "person",
				"title":   "Person updated",
				"dataSchema": map[string]any{
					"type":       "object",
					"required":   []any{"name"},
					"properties": map[string]any{"name": map[string]any{"type": "string"}},
				},
			},
			map[string]any{
				"name":       "person.deleted",
				"version":    1,
				"subject":    "person",
				"dataSchema": map[string]any{"type": "object"},
			},
		},
		"subscribes": []any{
			map[string]any{"type": "billing.invoice.paid", "version": 1},
			map[string]any{"type": "billing.invoice.voided", "version": 2},
		},
	}
}

// event returns the i-th event of a validDoc for editing.
func event(doc map[string]any, i int) map[string]any {
	return doc["events"].([]any)[i].(map[string]any)
}

// subscription returns the i-th subscription of a validDoc for editing.
func subscription(doc map[string]any, i int) map[string]any {
	return doc["subscribes"].([]any)[i].(map[string]any)
}

func render(t testing.TB, doc any) []byte {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("marshal test manifest: %v", err)
	}
	return b
}

// nested returns a valid schema whose JSON nesting depth is exactly depth
// (at least 1): {"not":{"not":...{"type":"string"}}}.
func nested(depth int) string {
	return strings.Repeat(`{"not":`, depth-1) + `{"type":"string"}` + strings.Repeat("}", depth-1)
}

// problemsOf returns the problems of a *ValidationError, failing the test for
// any other error.
func problemsOf(t testing.TB, err error) []Problem {
	t.Helper()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error is %T (%v), want *ValidationError", err, err)
	}
	if len(verr.Problems) == 0 {
		t.Fatalf("ValidationError without problems")
	}
	return verr.Problems
}

// wantProblem fails unless problems hold one at field whose message contains
// msg.
func wantProblem(t testing.TB, problems []Problem, field, msg string) {
	t.Helper()
	for _, p := range problems {
		if p.Field == field && strings.Contains(p.Message, msg) {
			return
		}
	}
	t.Errorf("no problem at %q containing %q; got:\n%s", field, msg, formatProblems(problems))
}

func formatProblems(problems []Problem) string {
	var sb strings.Builder
	for _, p := range problems {
		sb.WriteString("  " + p.Field + ": " + p.Message + "\n")
	}
	return sb.String()
}
