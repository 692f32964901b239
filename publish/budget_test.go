package publish_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"herald/manifest"
	"herald/publish"
)

// costlyChecked declares contacts.costly.checked@1, whose items are each
// checked against an enum of 1,000 values (1,001 steps an item), and returns
// a request of n items.
func costlyChecked(e *env) func(subject string, n int) publish.Request {
	values := make([]string, 1000)
	for i := range values {
		values[i] = strconv.Itoa(i)
	}
	e.declare("contacts", "costly.checked", 1, `{"type":"array","items":{"enum":[`+strings.Join(values, ",")+`]}}`)
	return func(subject string, n int) publish.Request {
		data := "[" + strings.TrimSuffix(strings.Repeat("7,", n), ",") + "]"
		return publish.Request{App: "contacts", Type: "contacts.costly.checked", Version: 1, Subject: subject, Data: json.RawMessage(data)}
	}
}

// The events of one request share its validation budget: each of these fits
// the per-event budget, four fit the request's, the fifth is refused and
// recorded, and the next request starts afresh.
func TestPublishBatchSharesValidationBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	req := costlyChecked(e)
	p := e.publisher(publish.Options{})
	const items = 450 // 450,451 steps: under the per-event budget
	if int64(items*1001+1) > manifest.MaxValidationSteps || 5*int64(items*1001+1) <= manifest.MaxRequestValidationSteps {
		t.Fatal("the test's events no longer straddle the budgets")
	}
	batch := make([]publish.Request, 5)
	for i := range batch {
		batch[i] = req("k"+strconv.Itoa(i), items)
	}
	outs, err := p.PublishBatch(e.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs[:4] {
		if o.Rejection != nil {
			t.Errorf("event %d refused: %v", i, o.Rejection)
		}
	}
	if rej := outs[4].Rejection; rej == nil || rej.Code != publish.CodeValidationBudget ||
		!strings.Contains(rej.Message, "request's validation budget") {
		t.Errorf("fifth event = %+v, want validation_budget_exceeded for the request", outs[4])
	}
	if n := e.count("rejected"); n != 1 {
		t.Errorf("%d rejected rows, want 1", n)
	}
	if _, err := p.Publish(e.ctx, req("again", items)); err != nil {
		t.Errorf("a new request: %v", err)
	}

	// PublishTx is one request too: all or nothing, so the transaction's
	// publish fails on the fifth event.
	tx := e.begin()
	_, err = p.PublishTx(e.ctx, tx, batch...)
	if rej, ok := publish.IsRejection(err); !ok || rej.Code != publish.CodeValidationBudget {
		t.Errorf("PublishTx = %v, want validation_budget_exceeded", err)
	}
}
