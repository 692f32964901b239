package publish

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
	"herald/store"
)

// tracerOf makes the publish spans, one per event: the root of the event's
// trace, or a child of the caller's span. Its tracer is taken from OpenTelemetry's
// global tracer provider at each use (a no-op one unless the program
// installed another), not once: a tracer taken before the program installs
// its provider would stay bound to the first provider ever installed.
var tracerOf = tracing.NewTracer("herald/publish")

func tracer() trace.Tracer { return tracerOf.Get() }

// w3c writes and reads the trace context stored with an event.
var w3c propagation.TraceContext

// startSpan starts the publish span of one request and returns it with its
// W3C trace context (nil when the span has no valid context: tracing is off
// and ctx carries no span it may continue).
//
// The span is a child of the span in ctx when that span is the caller's own
// (PublishTx, Publish from Go code), or a remote one (the publishing API's
// incoming traceparent) trusted by HERALD_TRUST_INCOMING_TRACE. An untrusted
// remote span becomes a link of a new root span instead: the trace id and
// the sampling decision are Herald's (its sampler sees no parent), and the
// publisher's tracestate is not stored, so it reaches no subscriber.
func startSpan(ctx context.Context, r Request) (trace.Span, store.TraceContext) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
	if in := trace.SpanContextFromContext(ctx); in.IsValid() && in.IsRemote() && !tracing.TrustIncoming() {
		if !tracing.On() {
			return tracing.NoopSpan, nil // nothing of Herald's own to pass on
		}
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: in,
			Attributes: []attribute.KeyValue{attribute.String("herald.link", "publisher")}}))
	} else if !tracing.On() && !in.IsValid() {
		return tracing.NoopSpan, nil // tracing off: nothing to do
	}
	_, span := tracer().Start(ctx, "publish "+r.Type, opts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return span, nil
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "herald"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", r.Type),
			attribute.Int("herald.event.version", r.Version),
			attribute.String("herald.app", r.App),
		)
	}
	tc := store.TraceContext{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(tc))
	return span, tc
}

// endAccepted ends the publish span of an accepted event.
func endAccepted(span trace.Span, id string, res Result) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.message.id", id),
			attribute.Int64("herald.event.seq", res.Seq),
			attribute.Bool("herald.duplicate", res.Duplicate),
		)
	}
	span.End()
}

// endRejected ends the publish span of a refused request.
func endRejected(span trace.Span, rej *Rejection) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("herald.rejection.code", rej.Code))
		span.SetStatus(codes.Error, rej.Code)
	}
	span.End()
}

// endFailed ends the publish spans still open after a failure of Herald's
// own (ending a span twice does nothing).
func endFailed(spans []trace.Span, err error) {
	for _, span := range spans {
		if span != nil && span.IsRecording() {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not published")
		}
		if span != nil {
			span.End()
		}
	}
}
