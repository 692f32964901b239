package tracing

import (
	"context"
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// defaultProvider is OpenTelemetry's global provider before any program
// installs one: it records nothing.
var defaultProvider = otel.GetTracerProvider()

// NoopSpan records nothing and has no valid context; ending it does nothing.
var NoopSpan = trace.SpanFromContext(context.Background())

// On reports whether OpenTelemetry's global tracer provider may record:
// one other than the default or a no-op one is installed (by Install, or by
// a program embedding Herald's packages that set its own). Instrumentation
// skips its work when it is false and no span is in play.
func On() bool {
	tp := otel.GetTracerProvider()
	if sameProvider(tp, defaultProvider) {
		return false
	}
	_, isNoop := tp.(noop.TracerProvider)
	return !isNoop
}

// sameProvider compares providers without panicking on a provider type
// that is not comparable.
func sameProvider(a, b trace.TracerProvider) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// Tracer is a named tracer of OpenTelemetry's global provider that follows
// the provider installed at the time of use: a trace.Tracer taken once, before
// the program installs its provider, would stay bound to the first provider
// ever installed. The tracer is looked up again only when the provider
// changed.
type Tracer struct {
	name   string
	cached atomic.Pointer[boundTracer]
}

type boundTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

// NewTracer returns the tracer named name (an instrumentation scope).
func NewTracer(name string) *Tracer { return &Tracer{name: name} }

// Get returns the tracer of the current global provider.
func (t *Tracer) Get() trace.Tracer {
	tp := otel.GetTracerProvider()
	if b := t.cached.Load(); b != nil && sameProvider(b.tp, tp) {
		return b.t
	}
	b := &boundTracer{tp: tp, t: tp.Tracer(t.name)}
	t.cached.Store(b)
	return b.t
}

// StoredSpanContext is the span context of an event's stored W3C trace
// context (traceparent, tracestate); invalid when there is none.
func StoredSpanContext(tc map[string]string) trace.SpanContext {
	if len(tc) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(tc)))
}

// trustIncoming is HERALD_TRUST_INCOMING_TRACE (see SetTrustIncoming).
var trustIncoming atomic.Bool

// SetTrustIncoming sets whether a publisher's incoming trace context (its
// traceparent header) is trusted as the parent of the event's publish span.
// Untrusted (the default), the publish span starts a trace of Herald's own,
// sampled by Herald's sampler, with a link to the publisher's span, and the
// publisher's tracestate reaches no subscriber: a publisher does not choose
// every subscriber's trace id, sampling or trace state.
func SetTrustIncoming(trust bool) { trustIncoming.Store(trust) }

// TrustIncoming reports SetTrustIncoming's setting.
func TrustIncoming() bool { return trustIncoming.Load() }
