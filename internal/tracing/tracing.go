// Package tracing sets up OpenTelemetry tracing for Herald's processes: one
// trace per event, from publish to the subscriber (docs/observability.md).
//
// Tracing is on only when the standard OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Otherwise Setup installs
// nothing: the OpenTelemetry API stays on its no-op default, which records
// nothing and costs a few nanoseconds per call.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// DefaultServiceName is the service.name of Herald's spans when neither
// OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "herald"

// Propagator is the W3C Trace Context propagator (traceparent, tracestate),
// the format events carry and subscribers receive.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// enabled is set once a tracer provider is installed.
var enabled atomic.Bool

// Enabled reports whether Setup or Install installed a tracer provider (On
// also sees a provider a program installed itself).
func Enabled() bool { return enabled.Load() }

// Configured reports whether the environment asks for OTLP export of traces.
func Configured(getenv func(string) string) bool {
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// FlushTimeout bounds how long a program flushes its buffered spans when it
// ends (the shutdown function of Setup, called with a context this long).
const FlushTimeout = 5 * time.Second

// Setup installs an OTLP-exporting tracer provider as OpenTelemetry's global
// one when the environment configures an endpoint (see Configured), and
// returns a shutdown function that flushes the spans still buffered. Without
// an endpoint it installs nothing and the shutdown function does nothing.
//
// The exporter reads the standard OTEL_EXPORTER_OTLP_* variables itself;
// OTEL_EXPORTER_OTLP_PROTOCOL (or ..._TRACES_PROTOCOL) "grpc" selects gRPC,
// anything else OTLP over HTTP (http/protobuf, the specification's default).
// The resource honours OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, with
// service.name "herald" by default.
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	return setup(ctx, os.Getenv)
}

func setup(ctx context.Context, getenv func(string) string) (func(context.Context) error, error) {
	nothing := func(context.Context) error { return nil }
	if !Configured(getenv) {
		return nothing, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch strings.TrimSpace(protocol) {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The sampler (parent-based, always on for roots by default) follows
	// OTEL_TRACES_SAMPLER when it is set.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// Install makes tp OpenTelemetry's global tracer provider, with the W3C
// Trace Context and Baggage propagators, and marks tracing enabled. Setup
// calls it; tests and programs embedding Herald may call it with their own
// provider. Install it before building the worker service (service.New),
// whose Temporal client takes the tracing interceptor only when tracing is
// enabled.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	enabled.Store(true)
}

// Reset puts OpenTelemetry's global tracer provider back to a no-op one and
// marks tracing disabled (tests that called Install).
func Reset() {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	enabled.Store(false)
}

// TemporalInterceptors are the interceptors a Temporal client takes for
// tracing: Temporal's OpenTelemetry tracing interceptor when a recording
// tracer provider is installed (On: by Setup, Install, or a program
// embedding Herald), none otherwise. Set on the client (client.Options.Interceptors),
// the interceptor also serves every worker built from that client, so it
// must not be set on the worker's options as well. It carries the span of a
// signal's context into the workflow's header, and on into its activities'
// contexts (spans SignalWithStartWorkflow:…, HandleSignal:…, RunWorkflow:…,
// StartActivity:…, RunActivity:…); workflow code calls no OpenTelemetry API
// itself.
func TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	if !On() {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer: otel.GetTracerProvider().Tracer("herald/temporal"),
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: Temporal interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}
