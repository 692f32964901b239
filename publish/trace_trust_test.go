package publish_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
	"herald/publish"
)

// A publisher's traceparent chose every subscriber's trace id and forced
// sampling, and its tracestate was stored and forwarded. Now an incoming
// (remote) trace context is only linked unless HERALD_TRUST_INCOMING_TRACE
// says otherwise: the trace, its sampling and its state are Herald's
// (issue 27 item 6).
func TestIncomingTraceContextIsLinkedNotTrusted(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	incoming := func() context.Context {
		tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		ts, _ := trace.ParseTraceState("publisher=secret")
		return trace.ContextWithRemoteSpanContext(e.ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true}))
	}
	const publisherTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	stored := func(t *testing.T, id string) (traceparent, tracestate string) {
		t.Helper()
		if err := e.store.Pool.QueryRow(e.ctx, `SELECT COALESCE(trace_context->>'traceparent', ''),
			COALESCE(trace_context->>'tracestate', '') FROM events WHERE id = $1`, id).Scan(&traceparent, &tracestate); err != nil {
			t.Fatal(err)
		}
		return traceparent, tracestate
	}

	t.Run("tracing off: nothing of the publisher's is stored", func(t *testing.T) {
		res, err := p.Publish(incoming(), person("t-off", "Ada"))
		if err != nil {
			t.Fatal(err)
		}
		if tp, ts := stored(t, res.ID); tp != "" || ts != "" {
			t.Errorf("stored traceparent %q tracestate %q, want none", tp, ts)
		}
	})

	t.Run("a new trace linked to the publisher's span", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		defer tracing.Reset()
		res, err := p.Publish(incoming(), person("t-link", "Ada"))
		if err != nil {
			t.Fatal(err)
		}
		var span sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "publish contacts.person.updated" {
				span = s
			}
		}
		if span == nil {
			t.Fatal("no publish span")
		}
		if span.Parent().IsValid() || span.SpanContext().TraceID().String() == publisherTrace {
			t.Errorf("publish span parent %v trace %v: want a root of a trace of Herald's", span.Parent(), span.SpanContext().TraceID())
		}
		if l := span.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != publisherTrace {
			t.Errorf("publish span links %+v, want the publisher's span", l)
		}
		tp, ts := stored(t, res.ID)
		if want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"; tp != want || ts != "" {
			t.Errorf("stored traceparent %q tracestate %q, want %q and none", tp, ts, want)
		}
	})

	t.Run("Herald's sampler decides, not the publisher's flag", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
		defer tracing.Reset()
		res, err := p.Publish(incoming(), person("t-sample", "Ada"))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rec.Ended()); n != 0 {
			t.Errorf("%d spans recorded: the publisher's sampled flag overrode Herald's sampler", n)
		}
		if tp, _ := stored(t, res.ID); len(tp) != 55 || tp[3:35] == publisherTrace || tp[53:] != "00" {
			t.Errorf("stored traceparent %q: want Herald's own trace, not sampled", tp)
		}
	})

	t.Run("trusted: the publisher's span is the parent", func(t *testing.T) {
		tracing.SetTrustIncoming(true)
		defer tracing.SetTrustIncoming(false)
		rec := tracetest.NewSpanRecorder()
		tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		defer tracing.Reset()
		res, err := p.Publish(incoming(), person("t-trust", "Ada"))
		if err != nil {
			t.Fatal(err)
		}
		if tp, ts := stored(t, res.ID); len(tp) != 55 || tp[3:35] != publisherTrace || ts != "publisher=secret" {
			t.Errorf("stored traceparent %q tracestate %q, want the publisher's trace and state", tp, ts)
		}
	})
}
