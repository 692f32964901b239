package store_test

import (
	"context"
	"maps"
	"testing"

	"herald/store"
)

// TestTraceContextIsStoredAndRead: an event's trace context goes into the
// event log and comes back with the relay's read and the delivery batch; an
// event without one reads back nil (stored as NULL, not JSON null).
func TestTraceContextIsStoredAndRead(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	c := mkManifest("contacts", nil)
	c.Events = append(c.Events, decl("person.updated", 1))
	mustApply(t, s, c)
	mustApply(t, s, mkManifest("billing", nil, subTo("contacts.person.updated", 1)))
	ctx := context.Background()
	traced := newEvent("contacts.person.updated", "p1", "a")
	traced.TraceContext = store.TraceContext{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "vendor=x y,other=1",
	}
	plain := newEvent("contacts.person.updated", "p1", "b")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{traced, plain}); err != nil {
		t.Fatal(err)
	}
	var nulls int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE trace_context IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Fatalf("rows with a NULL trace_context: %d, %v", nulls, err)
	}
	pending, err := s.Undispatched(ctx, 10, 0)
	if err != nil || len(pending) != 2 {
		t.Fatalf("undispatched: %+v, %v", pending, err)
	}
	if !maps.Equal(pending[0].TraceContext, traced.TraceContext) || pending[1].TraceContext != nil {
		t.Fatalf("relay read trace contexts %v and %v", pending[0].TraceContext, pending[1].TraceContext)
	}
	b, err := s.DeliveryBatch(ctx, billingPersonSub, "", []string{traced.ID, plain.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(b.Events[traced.ID].TraceContext, traced.TraceContext) || b.Events[plain.ID].TraceContext != nil {
		t.Fatalf("delivery batch trace contexts %v and %v", b.Events[traced.ID].TraceContext, b.Events[plain.ID].TraceContext)
	}
}
