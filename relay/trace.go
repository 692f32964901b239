package relay

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
	"herald/store"
)

// SpanSignal is the name of the relay's span around one signal.
const SpanSignal = "relay signal"

// tracerOf takes its tracer from OpenTelemetry's global provider at each use, so a
// provider installed after this package loaded is the one used.
var tracerOf = tracing.NewTracer("herald/relay")

func tracer() trace.Tracer { return tracerOf.Get() }

// startSignalSpan starts the span of one signal carrying evs to workflow id:
// a child of the first event's publish span, linked to the other events'
// (a signal carries events of several traces). The returned context carries
// it, so that Temporal's tracing interceptor continues the trace into the
// workflow.
func startSignalSpan(ctx context.Context, id string, g *group, evs []store.PendingEvent) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, tracing.NoopSpan
	}
	if sc := tracing.StoredSpanContext(evs[0].TraceContext); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := tracer().Start(ctx, SpanSignal, trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(
		attribute.String("herald.workflow.id", id),
		attribute.String("herald.subscription", g.key.sub.ID),
		attribute.Int("herald.events", len(evs)),
		attribute.String("messaging.message.id", evs[0].ID),
	)
	for _, ev := range evs[1:] {
		if sc := tracing.StoredSpanContext(ev.TraceContext); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return ctx, span
}

// endSignalSpan ends a signal's span with the signal's error, if any.
func endSignalSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, "signal failed")
	}
	span.End()
}
