package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// post sends one delivery to the sink's handler.
func post(s *sink, sub, body string) int {
	req, _ := http.NewRequest(http.MethodPost, "/deliver", strings.NewReader(body))
	req.Header.Set(subscriptionHeader, sub)
	rw := httptest.NewRecorder()
	s.ServeHTTP(rw, req)
	return rw.Code
}

func TestSinkTally(t *testing.T) {
	type arrival struct{ sub, id, subject, n string }
	ev := func(sub, id, subject, n string) arrival { return arrival{sub, id, subject, n} }
	expected := []delivery{{"s1", "e1"}, {"s1", "e2"}, {"s1", "e3"}, {"s2", "e1"}, {"s2", "e2"}, {"s2", "e3"}}
	tests := []struct {
		name     string
		arrivals []arrival
		raw      []string // unreadable bodies
		want     tally
		done     bool
	}{
		{
			name: "in order, all arrived",
			arrivals: []arrival{ev("s1", "e1", "k", "1"), ev("s2", "e1", "k", "1"), ev("s1", "e2", "k", "2"),
				ev("s1", "e3", "k", "3"), ev("s2", "e2", "k", "2"), ev("s2", "e3", "k", "3")},
			done: true,
		},
		{
			name:     "lost",
			arrivals: []arrival{ev("s1", "e1", "k", "1"), ev("s1", "e2", "k", "2")},
			want:     tally{lost: 4},
		},
		{
			name:     "out of order within one subscription",
			arrivals: []arrival{ev("s1", "e2", "k", "2"), ev("s1", "e1", "k", "1"), ev("s1", "e3", "k", "3")},
			want:     tally{lost: 3, outOfOrder: 1},
		},
		{
			name:     "orders are per subscription",
			arrivals: []arrival{ev("s1", "e3", "k", "3"), ev("s2", "e1", "k", "1")},
			want:     tally{lost: 4},
		},
		{
			name:     "duplicate",
			arrivals: []arrival{ev("s1", "e1", "k", "1"), ev("s1", "e1", "k", "1")},
			want:     tally{lost: 5, duplicates: 1},
		},
		{
			name:     "stray and unreadable",
			arrivals: []arrival{ev("s3", "e1", "k", "1"), ev("s1", "zz", "k", "1")},
			raw:      []string{"not json", `{"id":"e1","subject":"k","data":{}}`},
			want:     tally{lost: 6, stray: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sink{}
			rec := s.begin(expected)
			for _, a := range tt.arrivals {
				body := `{"id":"` + a.id + `","subject":"` + a.subject + `","data":{"n":` + a.n + `}}`
				if code := post(s, a.sub, body); code != http.StatusNoContent {
					t.Fatalf("sink answered %d, want 204", code)
				}
			}
			for _, body := range tt.raw {
				post(s, "s1", body)
			}
			done := rec.wait(context.Background(), time.Millisecond)
			got := s.finish(rec)
			if done != tt.done {
				t.Errorf("wait = %v, want %v", done, tt.done)
			}
			if got.lost != tt.want.lost || got.outOfOrder != tt.want.outOfOrder ||
				got.duplicates != tt.want.duplicates || got.stray != tt.want.stray {
				t.Errorf("tally lost %d ooo %d dup %d stray %d, want %+v",
					got.lost, got.outOfOrder, got.duplicates, got.stray, tt.want)
			}
			if len(got.arrived) != len(expected)-tt.want.lost {
				t.Errorf("%d arrivals recorded, want %d", len(got.arrived), len(expected)-tt.want.lost)
			}
			// After finish the recording is closed: later deliveries change nothing.
			post(s, "s1", `{"id":"e1","subject":"k","data":{"n":1}}`)
			if again := s.finish(rec); again.duplicates != got.duplicates || again.stray != got.stray {
				t.Errorf("a delivery after finish was recorded")
			}
		})
	}
}
