package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"herald/internal/tracing"
)

// TestPublishContinuesTheCallersTrace: with tracing on, an event published
// with a traceparent header gets a publish span that is a child of the
// caller's span, in the caller's trace, and stores that trace's context.
func TestPublishContinuesTheCallersTrace(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(tracing.Reset)
	s := startServer(t)
	token := s.token("contacts", "crm")
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/events", strings.NewReader(person("", "person-1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var publish sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if strings.HasPrefix(sp.Name(), "publish ") {
			publish = sp
		}
	}
	if publish == nil {
		t.Fatal("no publish span")
	}
	if publish.Parent().TraceID().String() != traceID || publish.Parent().SpanID().String() != callerSpan || !publish.Parent().IsRemote() {
		t.Fatalf("publish span parent %v, want the caller's span %s of trace %s", publish.Parent(), callerSpan, traceID)
	}
	var stored string
	if err := s.store.Pool.QueryRow(context.Background(),
		`SELECT trace_context->>'traceparent' FROM events WHERE source_app <> 'herald'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := "00-" + traceID + "-" + publish.SpanContext().SpanID().String() + "-01"; stored != want {
		t.Fatalf("stored traceparent %q, want %q", stored, want)
	}
}
