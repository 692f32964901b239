package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/internal/tracing"
	"herald/manifest"
	"herald/relay"
)

// TestTracingEndToEnd runs the real worker with tracing on (an in-memory
// span recorder in place of the OTLP exporter), publishes one event and
// follows its trace to the subscriber: publish span → relay signal span →
// Temporal's spans (signal, workflow, activity) → POST span, all of one
// trace id with the parents the documentation draws, and the subscriber
// receives the POST span's traceparent header and the publish span's
// traceparent in the envelope.
func TestTracingEndToEnd(t *testing.T) {
	// Serial: installs the process-wide tracer provider.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracing.Install(tp)
	// Registered before start's own cleanup, so it runs after the worker stopped.
	t.Cleanup(func() {
		tracing.Reset()
		_ = tp.Shutdown(context.Background())
	})

	type delivery struct {
		header, state string
		body          []byte
	}
	var mu sync.Mutex
	var got []delivery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{header: r.Header.Get("traceparent"), state: r.Header.Get("tracestate"), body: body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	s := system.Start(t)
	for _, m := range []*manifest.Manifest{
		{App: "contacts", Endpoint: srv.URL, Events: []manifest.Event{{Name: "person.updated", Version: 1, Subject: "person",
			DataSchema: json.RawMessage(`{"type":"object"}`)}}},
		{App: "billing", Endpoint: srv.URL, Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}},
	} {
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Svc.Store.ApplyManifest(context.Background(), m, "e2e"); err != nil {
			t.Fatal(err)
		}
	}
	res := s.Publish("traced", 1)

	testkit.Eventually(t, 60*time.Second, "the event at the subscriber", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	d := got[0]
	mu.Unlock()

	var publish sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "publish contacts.person.updated" {
			publish = sp
		}
	}
	if publish == nil {
		t.Fatal("no publish span")
	}
	traceID := publish.SpanContext().TraceID()
	if publish.Parent().IsValid() {
		t.Errorf("publish span has parent %v; published without a span it is the trace's root", publish.Parent())
	}
	// The POST span ends after the response, and the activity span after
	// the Deliver execution: wait for both.
	var post, activity sdktrace.ReadOnlySpan
	testkit.Eventually(t, 30*time.Second, "the POST and RunActivity:Deliver spans to end", func() bool {
		post, activity = nil, nil
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() != traceID {
				continue
			}
			switch sp.Name() {
			case "POST":
				post = sp
			case "RunActivity:Deliver":
				activity = sp
			}
		}
		return post != nil && activity != nil
	})

	// Every span of the trace, ended or not (the workflow's run span lasts as
	// long as the key's workflow).
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var names []string
	for _, sp := range rec.Started() {
		if sp.SpanContext().TraceID() == traceID {
			byID[sp.SpanContext().SpanID()] = sp
			names = append(names, sp.Name())
		}
	}
	t.Logf("spans of the trace: %s", strings.Join(names, ", "))
	parentOf := func(sp sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan { return byID[sp.Parent().SpanID()] }
	// same compares spans by id: the recorder's started and ended views of a
	// span are different values.
	same := func(a, b sdktrace.ReadOnlySpan) bool {
		return a != nil && b != nil && a.SpanContext().SpanID() == b.SpanContext().SpanID()
	}

	// The relay's signal span is the publish span's child, and Temporal's
	// client span its child: a start, as the key is new (the relay starts a
	// new key's workflow eagerly, relay/start.go).
	var signal, temporalSignal sdktrace.ReadOnlySpan
	for _, sp := range byID {
		switch {
		case sp.Name() == relay.SpanSignal:
			signal = sp
		case strings.HasPrefix(sp.Name(), "StartWorkflow:"):
			temporalSignal = sp
		}
	}
	if signal == nil || !same(parentOf(signal), publish) {
		t.Fatalf("relay signal span %v: want a child of the publish span", names)
	}
	if temporalSignal == nil || !same(parentOf(temporalSignal), signal) {
		t.Fatalf("Temporal's StartWorkflow span: want a child of the relay signal span (spans %v)", names)
	}
	// The activity's span descends from Temporal's signal span through the
	// workflow's spans.
	var chain []string
	sp := activity
	for sp != nil && !same(sp, temporalSignal) {
		chain = append(chain, sp.Name())
		sp = parentOf(sp)
	}
	if !same(sp, temporalSignal) {
		t.Fatalf("RunActivity:Deliver does not descend from the signal: its ancestors are %v", chain)
	}
	joined := strings.Join(chain, " < ")
	if !strings.Contains(joined, "StartActivity:Deliver") || !strings.Contains(joined, "RunWorkflow:Delivery") {
		t.Errorf("activity's ancestry %s lacks the workflow's spans", joined)
	}
	// The POST span: a client span under the event's own publish span,
	// linked to the activity that made it.
	if post.SpanKind() != trace.SpanKindClient || !same(parentOf(post), publish) {
		t.Errorf("POST span kind %v, parent %v: want a client span under the publish span", post.SpanKind(), post.Parent())
	}
	if l := post.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != activity.SpanContext().SpanID() {
		t.Errorf("POST span links %+v: want the RunActivity:Deliver span", l)
	}

	// What the subscriber received.
	w3c := func(sc trace.SpanContext) string {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	}
	if d.header != w3c(post.SpanContext()) {
		t.Errorf("traceparent header %q, want the POST span's %q", d.header, w3c(post.SpanContext()))
	}
	var env map[string]any
	if err := json.Unmarshal(d.body, &env); err != nil {
		t.Fatal(err)
	}
	if env["id"] != res.ID || env["traceparent"] != w3c(publish.SpanContext()) {
		t.Errorf("envelope id %v traceparent %v, want %s and the publish span's %s", env["id"], env["traceparent"], res.ID, w3c(publish.SpanContext()))
	}
}
