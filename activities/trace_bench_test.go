package activities

import (
	"context"
	"testing"

	"herald/store"
)

// BenchmarkPostSpanOff is what tracing adds to one delivery attempt when it
// is off: for an event published without tracing, and for one whose
// publisher traced it (its stored context is read and passed on).
func BenchmarkPostSpanOff(b *testing.B) {
	for _, bc := range []struct {
		name string
		tc   store.TraceContext
	}{
		{"untraced event", nil},
		{"traced event", store.TraceContext{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := PostRequest{URL: "http://127.0.0.1:1/x", EventID: "e", TraceContext: bc.tc}
			b.ReportAllocs()
			for b.Loop() {
				_, span := startPostSpan(context.Background(), r)
				endPostSpan(span, PostResult{})
			}
		})
	}
}
