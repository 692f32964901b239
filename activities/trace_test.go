package activities_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/tracing"
	"herald/store"
)

const storedParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestPostSpan: a delivery attempt's "POST" span is a child of the event's
// stored trace context, linked to the span of its context (the activity's),
// and the request carries its traceparent; the stored tracestate only when
// incoming trace context is trusted (issue 27 item 6).
func TestPostSpan(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	var mu sync.Mutex
	var got []http.Header
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	p, _ := newPoster(t)
	headers := func() http.Header {
		mu.Lock()
		defer mu.Unlock()
		return got[len(got)-1]
	}

	// Tracing off: the stored context goes on as it is, and an event
	// without one gets no header.
	req := request(srv.URL)
	req.TraceContext = store.TraceContext{"traceparent": storedParent}
	if res := p.Post(context.Background(), req); !res.Delivered() {
		t.Fatalf("post: %+v", res)
	}
	if h := headers().Get("traceparent"); h != storedParent {
		t.Errorf("untraced worker sent traceparent %q, want the stored %q", h, storedParent)
	}
	if res := p.Post(context.Background(), request(srv.URL)); !res.Delivered() || headers().Get("traceparent") != "" {
		t.Errorf("an event without trace context: %+v, traceparent %q", res, headers().Get("traceparent"))
	}

	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer tracing.Reset()
	ctx, activity := otel.Tracer("test").Start(context.Background(), "RunActivity:Deliver")
	req.TraceContext = store.TraceContext{"traceparent": storedParent, "tracestate": "vendor=1"}
	if res := p.Post(ctx, req); !res.Delivered() {
		t.Fatalf("post: %+v", res)
	}
	activity.End()
	var post sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "POST" {
			post = s
		}
	}
	if post == nil {
		t.Fatal("no POST span")
	}
	if post.SpanKind() != trace.SpanKindClient || post.Parent().TraceID().String() != storedParent[3:35] ||
		post.Parent().SpanID().String() != storedParent[36:52] || post.SpanContext().TraceID() != post.Parent().TraceID() {
		t.Errorf("POST span kind %v, parent %v: want a client span under the stored context", post.SpanKind(), post.Parent())
	}
	if l := post.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != activity.SpanContext().SpanID() {
		t.Errorf("POST span links %+v, want the activity span %v", l, activity.SpanContext())
	}
	want := "00-" + post.SpanContext().TraceID().String() + "-" + post.SpanContext().SpanID().String() + "-01"
	// The stored tracestate may be a publisher's: it reaches the subscriber
	// only when incoming trace context is trusted (HERALD_TRUST_INCOMING_TRACE).
	if h := headers(); h.Get("traceparent") != want || h.Get("tracestate") != "" {
		t.Errorf("headers traceparent %q tracestate %q, want %q and no tracestate", h.Get("traceparent"), h.Get("tracestate"), want)
	}
	tracing.SetTrustIncoming(true)
	defer tracing.SetTrustIncoming(false)
	if res := p.Post(ctx, req); !res.Delivered() {
		t.Fatalf("post: %+v", res)
	}
	if h := headers(); h.Get("tracestate") != "vendor=1" {
		t.Errorf("trusted: tracestate %q, want the stored state", h.Get("tracestate"))
	}
	status := false
	for _, kv := range post.Attributes() {
		if kv.Key == "http.response.status_code" && kv.Value.AsInt64() == http.StatusNoContent {
			status = true
		}
	}
	if !status {
		t.Errorf("POST span attributes %v lack the status code", post.Attributes())
	}
}
