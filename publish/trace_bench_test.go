package publish

import (
	"context"
	"testing"
)

// BenchmarkPublishSpanOff is what tracing adds to publishing one event when
// it is off (no provider installed, the caller's context without a span).
func BenchmarkPublishSpanOff(b *testing.B) {
	r := Request{App: "contacts", Type: "contacts.person.updated", Version: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		span, tc := startSpan(ctx, r)
		if tc != nil {
			b.Fatal("a trace context without tracing")
		}
		endAccepted(span, "id", Result{Seq: 1})
	}
}
