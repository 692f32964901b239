package tracing

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestSetupWithoutEndpointInstallsNothing: with no OTLP endpoint in the
// environment the global provider and propagator stay OpenTelemetry's
// defaults, spans do not record and the Temporal interceptor stays out.
func TestSetupWithoutEndpointInstallsNothing(t *testing.T) {
	before := otel.GetTracerProvider()
	beforeProp := otel.GetTextMapPropagator()
	shutdown, err := setup(context.Background(), env(map[string]string{
		"OTEL_SERVICE_NAME": "herald-test", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if Enabled() || On() {
		t.Fatalf("Enabled() %v, On() %v without an endpoint", Enabled(), On())
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("the global tracer provider was replaced")
	}
	if otel.GetTextMapPropagator() != beforeProp {
		t.Fatal("the global propagator was replaced")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatalf("a span records or has a valid context without an endpoint: %v", span.SpanContext())
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(context.Background(), carrier)
	if len(carrier) != 0 {
		t.Fatalf("the propagator injects %v", carrier)
	}
}

// TestSetupWithEndpointInstalls: an endpoint turns tracing on with a
// recording provider and the W3C propagator; shutdown returns (no collector
// listens, so the flush of no spans has nothing to send).
func TestSetupWithEndpointInstalls(t *testing.T) {
	defer Reset()
	for _, proto := range []string{"", "grpc"} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
		shutdown, err := Setup(context.Background())
		if err != nil {
			t.Fatalf("protocol %q: %v", proto, err)
		}
		if !Enabled() || !On() {
			t.Fatalf("Enabled() %v, On() %v with an endpoint", Enabled(), On())
		}
		sctx, span := otel.Tracer("test").Start(context.Background(), "x")
		if !span.IsRecording() || !span.SpanContext().IsValid() {
			t.Fatal("the installed provider does not record")
		}
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(sctx, carrier)
		span.End()
		if want := "00-" + span.SpanContext().TraceID().String(); len(carrier["traceparent"]) != 55 || carrier["traceparent"][:35] != want {
			t.Fatalf("traceparent %q, want one of trace %s", carrier["traceparent"], want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = shutdown(ctx) // the span cannot be exported: only returning matters
		cancel()
	}
	Reset()
	if Enabled() || On() {
		t.Fatalf("after Reset: Enabled() %v, On() %v", Enabled(), On())
	}
	if _, err := setup(context.Background(), env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})); err == nil {
		t.Fatal("an unsupported protocol was accepted")
	}
}

// TestTemporalInterceptorsOnlyWhenOn: Temporal's client gets the tracing
// interceptor only while a recording provider is installed.
func TestTemporalInterceptorsOnlyWhenOn(t *testing.T) {
	defer Reset()
	if ics, err := TemporalInterceptors(); err != nil || len(ics) != 0 {
		t.Fatalf("tracing off: %d interceptors, %v", len(ics), err)
	}
	Install(sdktrace.NewTracerProvider())
	if ics, err := TemporalInterceptors(); err != nil || len(ics) != 1 {
		t.Fatalf("tracing on: %d interceptors, %v", len(ics), err)
	}
}

// TestShutdownFlushesToTheCollector: spans are exported by OTLP over HTTP
// to the configured endpoint, with the resource of OTEL_SERVICE_NAME, and
// shutdown sends what is still buffered.
func TestShutdownFlushesToTheCollector(t *testing.T) {
	defer Reset()
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			mu.Lock()
			bodies = append(bodies, body)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	// The exporter and the resource read the process environment themselves.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "herald-flush-test")
	shutdown, err := Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "span-to-flush")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || !bytes.Contains(bodies[0], []byte("span-to-flush")) || !bytes.Contains(bodies[0], []byte("herald-flush-test")) {
		t.Fatalf("collector got %d exports; want one holding the span and the service name", len(bodies))
	}
}
