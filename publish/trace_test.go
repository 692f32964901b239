package publish_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
	"herald/publish"
)

// TestPublishSpan: with tracing on, every way of publishing makes one
// publish span per event, a child of the caller's span; its W3C trace
// context is stored with the event and written into the envelope as the
// traceparent extension attribute. With tracing off nothing is added.
func TestPublishSpan(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	e := newEnv(t)
	p := e.publisher(publish.Options{})

	off, err := p.Publish(e.ctx, person("p-off", "Ada"))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := e.store.GetEvent(e.ctx, off.ID); err != nil || jsonField(t, ev.Envelope, "traceparent") != nil {
		t.Fatalf("untraced envelope %s (%v) has a traceparent", ev.Envelope, err)
	}

	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer tracing.Reset()
	ctx, parent := otel.Tracer("test").Start(e.ctx, "caller")
	res, err := p.Publish(ctx, person("p-on", "Ada"))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := p.PublishBatch(context.Background(), []publish.Request{person("p-b1", "Bo"),
		{App: "contacts", Type: "contacts.nothing", Version: 1, Subject: "x", Data: json.RawMessage(`{}`)}})
	if err != nil || outs[0].Rejection != nil || outs[1].Rejection == nil {
		t.Fatalf("batch: %+v, %v", outs, err)
	}
	tx, err := e.store.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	txRes, err := p.PublishTx(ctx, tx, person("p-tx", "Cy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == "publish contacts.person.updated" || s.Name() == "publish contacts.nothing" {
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.message.id" {
					spans[kv.Value.AsString()] = s
				}
			}
			if s.Name() == "publish contacts.nothing" {
				spans["rejected"] = s
			}
		}
	}
	if len(spans) != 4 {
		t.Fatalf("publish spans by event id: %v (want 3 events and the rejected request)", spans)
	}
	if s := spans["rejected"]; s.Status().Description != publish.CodeEventNotDeclared || s.Parent().IsValid() {
		t.Errorf("rejected request's span: status %+v, parent %v", s.Status(), s.Parent())
	}
	for _, id := range []string{res.ID, txRes[0].ID, outs[0].Result.ID} {
		s := spans[id]
		if s == nil {
			t.Fatalf("no publish span for event %s", id)
		}
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("span kind %v", s.SpanKind())
		}
		underCaller := id != outs[0].Result.ID
		if underCaller && (s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID()) {
			t.Errorf("event %s: span parent %v, want the caller's span %v", id, s.Parent(), parent.SpanContext())
		}
		if !underCaller && s.Parent().IsValid() {
			t.Errorf("event %s published without a span: its span has parent %v", id, s.Parent())
		}
		want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
		ev, err := e.store.GetEvent(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonField(t, ev.Envelope, "traceparent"); got != want {
			t.Errorf("event %s: envelope traceparent %v, want %s", id, got, want)
		}
		var stored string
		if err := e.store.Pool.QueryRow(e.ctx, `SELECT trace_context->>'traceparent' FROM events WHERE id = $1`, id).Scan(&stored); err != nil || stored != want {
			t.Errorf("event %s: stored traceparent %q (%v), want %s", id, stored, err, want)
		}
	}
}

func jsonField(t *testing.T, doc []byte, field string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("envelope %s: %v", doc, err)
	}
	return m[field]
}
