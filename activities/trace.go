package activities

import (
	"context"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
)

// tracerOf takes its tracer from OpenTelemetry's global provider at each use, so a
// provider installed after this package loaded is the one used.
var tracerOf = tracing.NewTracer("herald/activities")

func tracer() trace.Tracer { return tracerOf.Get() }

// w3c writes the traceparent header of a delivery.
var w3c propagation.TraceContext

// startPostSpan starts the span of one delivery attempt, "POST" (HTTP
// client conventions). A Deliver execution carries events of several
// traces, so the span's parent is the event's own publish span (its stored
// trace context), with a link to the span in ctx (the activity's, from
// Temporal's tracing interceptor); an event stored without a trace context
// gets the span in ctx as parent. With tracing off the span records nothing
// but still carries the event's stored context, which the request then
// passes on in its traceparent header.
func startPostSpan(ctx context.Context, r PostRequest) (context.Context, trace.Span) {
	if !tracing.On() && !trace.SpanContextFromContext(ctx).IsValid() {
		// Tracing off: only pass the stored context on.
		if len(r.TraceContext) > 0 {
			if sc := tracing.StoredSpanContext(r.TraceContext); sc.IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
		}
		return ctx, tracing.NoopSpan
	}
	var opts []trace.SpanStartOption
	if len(r.TraceContext) > 0 {
		if sc := tracing.StoredSpanContext(r.TraceContext); sc.IsValid() {
			if act := trace.SpanContextFromContext(ctx); act.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: act,
					Attributes: []attribute.KeyValue{attribute.String("herald.link", "activity")}}))
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient))
	ctx, span := tracer().Start(ctx, "POST", opts...)
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", "POST"),
			attribute.String("url.full", r.URL),
			attribute.String("messaging.message.id", r.EventID),
			attribute.String("herald.subscription", r.SubscriptionID),
			attribute.Int("herald.attempt", r.Attempt),
		}
		if u, err := url.Parse(r.URL); err == nil {
			attrs = append(attrs, attribute.String("server.address", u.Hostname()))
			if port, err := strconv.Atoi(u.Port()); err == nil {
				attrs = append(attrs, attribute.Int("server.port", port))
			}
		}
		span.SetAttributes(attrs...)
	}
	return ctx, span
}

// endPostSpan ends an attempt's span with its outcome.
func endPostSpan(span trace.Span, res PostResult) {
	if span.IsRecording() {
		if res.Status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
		}
		if !res.Delivered() {
			span.SetAttributes(attribute.String("error.type", res.Code))
			span.SetStatus(codes.Error, res.Message)
		}
	}
	span.End()
}
