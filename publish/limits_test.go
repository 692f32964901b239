package publish

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

// limitsInput is a checkInput for contacts.order.placed@1 with the given
// data schema.
func limitsInput(t *testing.T, schema string) checkInput {
	t.Helper()
	sch, err := manifest.CompileSchema(json.RawMessage(schema))
	if err != nil {
		t.Fatalf("compile schema: %v", err)
	}
	return checkInput{
		appKnown: true,
		decl: &declared{DeclaredEvent: store.DeclaredEvent{App: "contacts", Type: "contacts.order.placed", Version: 1},
			schema: sch},
		now:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		newID:         "0190f8a4-7b2c-7d3e-8f40-000000000001",
		maxEventBytes: DefaultMaxEventBytes,
	}
}

func order(data string) Request {
	return Request{App: "contacts", Type: "contacts.order.placed", Version: 1, Subject: "order-1", Data: json.RawMessage(data)}
}

// {"total": 1e100000000} against a schema with minimum or multipleOf
// panicked inside the validator and crashed the publisher.
func TestHugeExponentIsDataInvalid(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{
		`{"type":"object","properties":{"total":{"type":"number","minimum":0}}}`,
		`{"type":"object","properties":{"total":{"type":"number","multipleOf":0.01}}}`,
	} {
		_, rej := validateRequest(order(`{"total": 1e100000000}`), limitsInput(t, schema))
		if rej == nil || rej.Code != CodeDataInvalid || len(rej.Errors) != 1 || rej.Errors[0].Pointer != "/total" ||
			!strings.Contains(rej.Message, "/total: number 1e100000000 is out of range") {
			t.Errorf("schema %s: rejection %+v, want data_invalid at /total", schema, rej)
		}
	}
}

// 1e999999 was accepted at about 33 ms of CPU per number: a 256 KiB event
// of them took minutes.
func TestCostlyExponentsRefusedQuickly(t *testing.T) {
	// Serial: measures how long a refusal takes.
	in := limitsInput(t, `{"type":"array","items":{"type":"number","minimum":0}}`)
	data := `[` + strings.TrimSuffix(strings.Repeat(`1e999999,`, 25_000), ",") + `]`
	start := time.Now()
	_, rej := validateRequest(order(data), in)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("refusing took %v", took)
	}
	if rej == nil || rej.Code != CodeDataInvalid || len(rej.Errors) == 0 || rej.Errors[0].Pointer != "/0" {
		t.Fatalf("rejection %+v, want data_invalid from /0", rej)
	}
}

// 32 MiB of data was parsed and validated before the 256 KiB limit refused
// it. The data here is not even JSON at its end: only a refusal before
// parsing answers payload_too_large rather than data_invalid.
func TestOversizedDataRefusedBeforeParsing(t *testing.T) {
	// Serial: measures how long a refusal takes.
	in := limitsInput(t, `{"type":"array","items":{"type":"integer"}}`)
	data := `[` + strings.Repeat(`1,`, 16<<20) + `oops`
	start := time.Now()
	_, rej := validateRequest(order(data), in)
	if rej == nil || rej.Code != CodePayloadTooLarge ||
		!strings.Contains(rej.Message, "over the limit of 262144 bytes") {
		t.Fatalf("rejection %+v, want payload_too_large", rej)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusing took %v", took)
	}
}

// hostileItemsSchema (820 bytes, accepted by the compile budget) applies
// 2^12 paths of oneOf to each item: 2,000 items took 35 s, a 256 KiB event
// about half an hour of the publisher's CPU.
func hostileItemsSchema() string {
	var defs []string
	for i := range 12 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"oneOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, `"d12":{"type":"string"}`)
	return `{"$defs":{` + strings.Join(defs, ",") + `},"type":"array","items":{"$ref":"#/$defs/d0"}}`
}

func TestValidationBudgetExceeded(t *testing.T) {
	// Serial: measures how long a refusal takes.
	in := limitsInput(t, hostileItemsSchema())
	data := `[` + strings.TrimSuffix(strings.Repeat(`"x",`, 60_000), ",") + `]`
	done := make(chan *Rejection, 1)
	start := time.Now()
	go func() {
		_, rej := validateRequest(order(data), in)
		done <- rej
	}()
	var rej *Rejection
	select {
	case rej = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("validation still running after 10s")
	}
	// Milliseconds, but -race on a busy machine is slower.
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("refusing took %v", took)
	}
	if rej == nil || rej.Code != CodeValidationBudget || !strings.Contains(rej.Message, "the limit per event") {
		t.Fatalf("rejection %+v, want validation_budget_exceeded", rej)
	}
}

// The events of one request share a budget: once it is spent, the next
// event is refused with validation_budget_exceeded, not validated.
func TestRequestValidationBudget(t *testing.T) {
	t.Parallel()
	in := limitsInput(t, `{"type":"array","items":{"type":"integer"}}`)
	in.budget = manifest.NewBudget(25_000)
	data := `[` + strings.TrimSuffix(strings.Repeat(`1,`, 9_999), ",") + `]` // 10,000 steps
	for i := range 2 {
		if _, rej := validateRequest(order(data), in); rej != nil {
			t.Fatalf("event %d: %v", i, rej)
		}
	}
	_, rej := validateRequest(order(data), in)
	if rej == nil || rej.Code != CodeValidationBudget || !strings.Contains(rej.Message, "request's validation budget") {
		t.Fatalf("third event: rejection %+v, want validation_budget_exceeded for the request", rej)
	}
}
