package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fanOutItemsSchema is 820 bytes that apply 2^12 paths of oneOf to each item
// of an array: within the compile budget (each definition is counted once
// per use), it took some 30 ms per item, so 35 s for 2,000 items and half an
// hour for a 256 KiB event.
func fanOutItemsSchema() string {
	return strings.Replace(fanOutSchema("oneOf", 12), `"$ref":"#/$defs/d0"}`,
		`"type":"array","items":{"$ref":"#/$defs/d0"}}`, 1)
}

// doublingSchema is a recursive schema whose every level applies the next
// twice (oneOf tries both): counted once by the compile budget, it doubles
// the work at each level of nested arrays, so 40 levels (80 bytes of data)
// would take 2^40 steps.
const doublingSchema = `{"$defs":{"n":{"type":"array","items":{"oneOf":[{"$ref":"#/$defs/n"},{"$ref":"#/$defs/n"}]}}},"$ref":"#/$defs/n"}`

// stringArray is a JSON array of n one-letter strings.
func stringArray(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`"x",`, n), ",") + "]"
}

// within runs fn and fails the test when it has not returned after d: the
// validator cannot be stopped, so a test of a hang must not wait for it.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v", what, d)
	}
}

func TestValidationBudgetRefusesHostileData(t *testing.T) {
	for _, tt := range []struct {
		name, schema, data string
	}{
		{"fan-out under items", fanOutItemsSchema(), stringArray(60_000)},
		{"fan-out under items, 2,000 items", fanOutItemsSchema(), stringArray(2_000)},
		{"doubling recursion", doublingSchema, strings.Repeat("[", 40) + strings.Repeat("]", 40)},
		// Each error copies its location: 9,000 levels (18 KB) that each
		// fail took 9 s.
		{"deep data failing at each level", `{"type":"array","minItems":2,"items":{"$ref":"#"}}`,
			strings.Repeat("[", 9_000) + strings.Repeat("]", 9_000)},
		// Under unevaluatedProperties each branch copies the set of
		// members: 200 branches over 20,000 members took 3.6 s.
		{"unevaluatedProperties over many branches", `{"unevaluatedProperties":false,"anyOf":[` +
			strings.TrimSuffix(strings.Repeat(`{"properties":{"k1":true}},`, 200), ",") + `]}`, manyMembers(20_000)},
		// Go's matcher is linear in the input, times the program's size:
		// 200,000 bytes against [a-z]{0,1000}x took 5 s.
		{"long string under a costly pattern", `{"type":"string","pattern":"[a-z]{0,1000}x"}`,
			`"` + strings.Repeat("a", 200_000) + `"`},
		{"long name under a costly pattern", `{"patternProperties":{"[a-z]{0,1000}x":true}}`,
			`{"` + strings.Repeat("a", 200_000) + `":1}`},
		// Each failure's message shows the const: 60,000 items failing a
		// const of 6,000 characters made 360 MB of messages.
		{"many items failing a long const", `{"type":"array","items":{"const":"` + strings.Repeat("z", 6_000) + `"}}`,
			"[" + strings.TrimSuffix(strings.Repeat("1,", 60_000), ",") + "]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sch, err := CompileSchema(json.RawMessage(tt.schema))
			if err != nil {
				t.Fatalf("CompileSchema = %v: the schema must be one a publisher may have stored", err)
			}
			if len(tt.data) > 256<<10 {
				t.Fatalf("data is %d bytes, over an event's limit", len(tt.data))
			}
			var errs []DataError
			start := time.Now()
			within(t, 10*time.Second, "ValidateData", func() { errs = ValidateData(sch, json.RawMessage(tt.data)) })
			// Milliseconds, but -race on a busy machine is slower.
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("refusing took %v", took)
			}
			if len(errs) != 1 || errs[0].Pointer != "" || !strings.Contains(errs[0].Message, "the limit per event") {
				t.Errorf("ValidateData = %.300v, want one error at the root about the validation budget", fmt.Sprint(errs))
			}
			_, err = ValidateDataWithin(sch, json.RawMessage(tt.data), nil)
			if !errors.Is(err, ErrValidationBudget) {
				t.Errorf("ValidateDataWithin error = %v, want ErrValidationBudget", err)
			}
		})
	}
}

// manyMembers is a JSON object of n members.
func manyMembers(n int) string {
	kv := make([]string, n)
	for i := range kv {
		kv[i] = fmt.Sprintf(`"k%d":1`, i)
	}
	return "{" + strings.Join(kv, ",") + "}"
}

// typicalEvent is an order of n lines, about 100 bytes each.
func typicalEvent(n int) string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"sku":"SKU-%06d","quantity":%d,"price":"%d.99","tags":["a","b"]}`, i, i%7+1, i%100)
	}
	return `{"id":"order-1","customer":{"name":"Ada","email":"ada@example.com"},"lines":[` + strings.Join(lines, ",") + `]}`
}

const typicalSchema = `{"type":"object","required":["id","lines"],"additionalProperties":false,
	"properties":{"id":{"type":"string","maxLength":64},
	"customer":{"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string","format":"email"}}},
	"lines":{"type":"array","items":{"type":"object","required":["sku","quantity"],
		"properties":{"sku":{"type":"string","pattern":"^SKU-[0-9]+$"},"quantity":{"type":"integer","minimum":1},
		"price":{"type":"string"},"tags":{"type":"array","items":{"enum":["a","b","c"]},"uniqueItems":true}}}}}}`

func TestValidationBudgetKeepsLargeTypicalEvents(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(typicalSchema))
	if err != nil {
		t.Fatal(err)
	}
	data := typicalEvent(3_600)
	if len(data) > 256<<10 || len(data) < 200<<10 {
		t.Fatalf("event is %d bytes, want 200 to 256 KiB", len(data))
	}
	doc, err := decodeJSON([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	steps := validationSteps(sch, doc, MaxValidationSteps)
	if steps > MaxValidationSteps/2 {
		t.Errorf("a 256 KiB typical event takes %d steps, more than half the budget of %d", steps, MaxValidationSteps)
	}
	if errs, err := ValidateDataWithin(sch, json.RawMessage(data), nil); err != nil || len(errs) != 0 {
		t.Errorf("ValidateDataWithin = %v, %v, want valid", errs, err)
	}
}

func TestValidationSteps(t *testing.T) {
	for _, tt := range []struct {
		schema, data string
		want         int64
	}{
		// The array, then each item.
		{`{"type":"array","items":{"type":"integer"}}`, `[1,2,3]`, 4},
		// A value nothing applies to costs nothing.
		{`{"type":"object","properties":{"a":{"type":"integer"}}}`, `{"a":1,"b":{"c":[1,2]}}`, 2},
		// Every branch counts, each reference too: root, anyOf's two
		// branches and the $ref's target.
		{`{"$defs":{"s":{"type":"string"}},"anyOf":[{"$ref":"#/$defs/s"},{"type":"integer"}]}`, `"x"`, 4},
		// enum charges its values.
		{`{"enum":["a","b","c"]}`, `"a"`, 4},
		// uniqueItems charges twice the values of the array: 1 + 2*4,
		// plus 3 items under items.
		{`{"uniqueItems":true,"items":true}`, `[1,2,3]`, 12},
		// patternProperties: the object (1 + 2 names × 1 pattern), and
		// the member that matches.
		{`{"patternProperties":{"^a":{"type":"integer"}}}`, `{"a":1,"b":2}`, 4},
		// A $dynamicRef whose target has the anchor counts every schema
		// with the anchor: the root, then the item's schema and the one
		// schema with the anchor (the root again).
		{`{"$dynamicAnchor":"node","type":"array","items":{"$dynamicRef":"#node"}}`, `[[]]`, 3},
		// Under unevaluatedProperties, the object's 3 members count once
		// for the schema itself and once per schema applied in place
		// (the root and its allOf branch): 2 + 3 + 2*3; then "a" under
		// properties and unevaluatedProperties (counted as if applied
		// to every member), "b" and "c" under unevaluatedProperties.
		{`{"unevaluatedProperties":false,"allOf":[{"properties":{"a":true}}]}`, `{"a":1,"b":2,"c":3}`, 2 + 3 + 2*3 + 4},
		// Deep data costs more per check: the root array 1, the arrays at
		// depths 1 to 7 two schemas each, the one at depth 8 two schemas
		// at 2 steps each.
		{`{"type":"array","items":{"$ref":"#"}}`, `[[[[[[[[[]]]]]]]]]`, 1 + 7*2 + 2*2},
	} {
		sch, err := CompileSchema(json.RawMessage(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.schema, err)
		}
		doc, err := decodeJSON([]byte(tt.data))
		if err != nil {
			t.Fatal(err)
		}
		if got := validationSteps(sch, doc, MaxValidationSteps); got != tt.want {
			t.Errorf("validationSteps(%s, %s) = %d, want %d", tt.schema, tt.data, got, tt.want)
		}
	}
}

func TestRequestValidationBudget(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(`{"type":"array","items":{"type":"string"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBudget(2_500)
	data := json.RawMessage(stringArray(999)) // 1,000 steps
	for i := range 2 {
		if errs, err := ValidateDataWithin(sch, data, b); err != nil || len(errs) != 0 {
			t.Fatalf("event %d: %v, %v", i, errs, err)
		}
	}
	if b.Left() != 500 {
		t.Errorf("left = %d, want 500", b.Left())
	}
	_, err = ValidateDataWithin(sch, data, b)
	if !errors.Is(err, ErrValidationBudget) || !strings.Contains(err.Error(), "request's validation budget (500 of 2,500 steps)") {
		t.Errorf("third event: %v, want the request's budget exceeded", err)
	}
	if b.Left() != 500 {
		t.Errorf("a refused event took steps: left = %d", b.Left())
	}
}

func BenchmarkValidateData(b *testing.B) {
	sch, err := CompileSchema(json.RawMessage(typicalSchema))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{3, 300} {
		data := json.RawMessage(typicalEvent(n))
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if errs := ValidateData(sch, data); len(errs) != 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}

// BenchmarkValidationSteps is the walk that counts before validating, alone:
// its share of BenchmarkValidateData is what the budget costs.
func BenchmarkValidationSteps(b *testing.B) {
	sch, err := CompileSchema(json.RawMessage(typicalSchema))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{3, 300} {
		doc, err := decodeJSON([]byte(typicalEvent(n)))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if steps := validationSteps(sch, doc, MaxValidationSteps); steps > MaxValidationSteps {
					b.Fatal(steps)
				}
			}
		})
	}
}
