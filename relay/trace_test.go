package relay_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"herald/internal/tracing"
	"herald/relay"
)

// TestSignalSpan: each signal gets a span, a child of its first event's
// publish span and linked to the other events' publish spans, and the
// signal is sent with that span in its context (where Temporal's tracing
// interceptor picks it up).
func TestSignalSpan(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	st, p := setup(t)
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer tracing.Reset()
	publishN(t, p, "contacts.person.deleted", "p1", 3)
	var order []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "publish contacts.person.deleted" {
			order = append(order, s)
		}
	}
	if len(order) != 3 {
		t.Fatalf("%d publish spans, want 3", len(order))
	}
	tmp := &fakeTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp}
	if _, err := r.DispatchOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var signals []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == relay.SpanSignal {
			signals = append(signals, s)
		}
	}
	if len(signals) != 1 || len(tmp.signals) != 1 {
		t.Fatalf("%d signal spans and %d signals, want one (crm's key p1)", len(signals), len(tmp.signals))
	}
	sig := signals[0]
	first := order[0].SpanContext()
	if sig.Parent().SpanID() != first.SpanID() || sig.SpanContext().TraceID() != first.TraceID() || !sig.Parent().IsRemote() {
		t.Errorf("signal span parent %v, want the first event's publish span %v", sig.Parent(), first)
	}
	if len(sig.Links()) != 2 || sig.Links()[0].SpanContext.SpanID() != order[1].SpanContext().SpanID() ||
		sig.Links()[1].SpanContext.SpanID() != order[2].SpanContext().SpanID() {
		t.Errorf("signal span links %+v, want the other two publish spans", sig.Links())
	}
	if got := tmp.signals[0].Span; got.SpanID() != sig.SpanContext().SpanID() {
		t.Errorf("the signal was sent with span %v in its context, want the signal span %v", got, sig.SpanContext())
	}
}
