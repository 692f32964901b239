package manifest

import (
	"strings"
	"testing"
)

// TestSubscriptionErrorPolicy: a subscription may choose onFailure (hold or
// skip) and maxAttempts (1 to 20); anything else refuses the manifest with
// the field named.
func TestSubscriptionErrorPolicy(t *testing.T) {
	ok := `{"app":"billing","endpoint":"https://billing.internal","subscribes":[
	  {"type":"orders.order.placed","version":1,"onFailure":"skip","maxAttempts":3},
	  {"type":"orders.order.paid","version":1}]}`
	m, err := Parse("billing.json", []byte(ok))
	if err != nil {
		t.Fatalf("valid error policy refused: %v", err)
	}
	if got := m.Subscribes[0]; got.OnFailure != OnFailureSkip || got.MaxAttempts != 3 {
		t.Fatalf("policy read as onFailure=%q maxAttempts=%d; want skip, 3", got.OnFailure, got.MaxAttempts)
	}
	if got := m.Subscribes[1]; got.OnFailure != "" || got.MaxAttempts != 0 {
		t.Fatalf("a subscription without a policy read as onFailure=%q maxAttempts=%d", got.OnFailure, got.MaxAttempts)
	}
	for member, want := range map[string]string{
		`"onFailure":"drop"`:  `subscribes[0].onFailure: must be "hold" or "skip", not "drop"`,
		`"onFailure":1`:       `subscribes[0].onFailure: must be a string`,
		`"maxAttempts":0`:     `subscribes[0].maxAttempts: must be an integer from 1 to 20, not 0`,
		`"maxAttempts":21`:    `subscribes[0].maxAttempts: must be an integer from 1 to 20, not 21`,
		`"maxAttempts":2.5`:   `subscribes[0].maxAttempts: must be an integer from 1 to 20, not 2.5`,
		`"maxAttempts":"3"`:   `subscribes[0].maxAttempts: must be an integer from 1 to 20, not "3"`,
		`"maxAttempts":1e400`: `subscribes[0].maxAttempts: must be an integer from 1 to 20`,
		`"maxAttempts":-1`:    `subscribes[0].maxAttempts: must be an integer from 1 to 20, not -1`,
	} {
		doc := `{"app":"billing","endpoint":"https://billing.internal","subscribes":[
		  {"type":"orders.order.placed","version":1,` + member + `}]}`
		_, err := Parse("billing.json", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", member, err, want)
		}
	}
}
