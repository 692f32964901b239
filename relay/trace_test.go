package relay_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"herald/internal/tracing"
	"herald/relay"
	"herald/workflows"
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

// TestStartedKeyEventsHaveTheirSpan: a new key whose events of a round
// need more than one signal is signalled, one span per signal as ever: a
// start's one span would leave the events past the first signal's worth
// with no relay signal span in their traces.
func TestStartedKeyEventsHaveTheirSpan(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	st, p := setup(t)
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer tracing.Reset()
	publishN(t, p, "contacts.person.deleted", "big", 3) // crm's only
	publishN(t, p, "contacts.person.deleted", "small", 2)
	publishes := map[string]bool{} // trace ids
	for _, s := range rec.Ended() {
		if s.Name() == "publish contacts.person.deleted" {
			publishes[s.SpanContext().TraceID().String()] = true
		}
	}
	tmp := &startingTemporal{}
	r := &relay.Relay{Store: st, Temporal: tmp, StartNewKeys: true, MaxEventsPerSignal: 2}
	if _, err := r.DispatchOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	signalled := map[string]bool{} // trace ids of the events a relay signal span is the child of or links
	for _, s := range rec.Ended() {
		if s.Name() != relay.SpanSignal {
			continue
		}
		signalled[s.SpanContext().TraceID().String()] = true
		for _, l := range s.Links() {
			signalled[l.SpanContext.TraceID().String()] = true
		}
	}
	for id := range publishes {
		if !signalled[id] {
			t.Errorf("the event of trace %s has no relay signal span", id)
		}
	}
	if fmt.Sprint(tmp.started) != fmt.Sprint([]string{workflows.DeliveryID("crm:contacts.person.deleted@1", "small")}) {
		t.Errorf("started %v, want only the key whose events fit one signal", tmp.started)
	}
}
