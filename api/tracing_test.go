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
// with a traceparent header gets a publish span in a trace of Herald's own,
// linked to the caller's span (a caller's context is not trusted by
// default, issue 27 item 6), and stores that trace's context; with
// HERALD_TRUST_INCOMING_TRACE the publish span is a child of the caller's.
func TestPublishContinuesTheCallersTrace(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(tracing.Reset)
	s := startServer(t)
	token := s.token("contacts", "crm")
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	publishTraced := func(t *testing.T, subject string) (sdktrace.ReadOnlySpan, string) {
		t.Helper()
		rec.Reset()
		req, err := http.NewRequest(http.MethodPost, s.base+"/v1/events", strings.NewReader(person("", subject, 1)))
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
		var stored string
		if err := s.store.Pool.QueryRow(context.Background(),
			`SELECT trace_context->>'traceparent' FROM events WHERE source_app <> 'herald' AND subject = $1`, subject).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if want := "00-" + publish.SpanContext().TraceID().String() + "-" + publish.SpanContext().SpanID().String() + "-01"; stored != want {
			t.Fatalf("stored traceparent %q, want %q", stored, want)
		}
		return publish, stored
	}

	t.Run("linked by default", func(t *testing.T) {
		publish, _ := publishTraced(t, "person-1")
		if publish.Parent().IsValid() || publish.SpanContext().TraceID().String() == traceID {
			t.Fatalf("publish span parent %v trace %v, want a root of Herald's own trace", publish.Parent(), publish.SpanContext().TraceID())
		}
		if l := publish.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != traceID ||
			l[0].SpanContext.SpanID().String() != callerSpan || !l[0].SpanContext.IsRemote() {
			t.Fatalf("publish span links %+v, want the caller's span %s of trace %s", l, callerSpan, traceID)
		}
	})
	t.Run("a child when trusted", func(t *testing.T) {
		tracing.SetTrustIncoming(true)
		defer tracing.SetTrustIncoming(false)
		publish, _ := publishTraced(t, "person-2")
		if publish.Parent().TraceID().String() != traceID || publish.Parent().SpanID().String() != callerSpan || !publish.Parent().IsRemote() {
			t.Fatalf("publish span parent %v, want the caller's span %s of trace %s", publish.Parent(), callerSpan, traceID)
		}
	})
}
