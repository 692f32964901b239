package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSelectShapes(t *testing.T) {
	tests := []struct {
		names   string
		scale   float64
		want    []Shape
		wantErr string
	}{
		{"A,B,C,D,E", 1, StandardShapes[:5], ""},
		{"f", 0.01, []Shape{{Name: "F", Keys: 500, EventsPerKey: 2, Subscriptions: 1, HeraldOnly: true}}, ""},
		{"c, a", 1, []Shape{StandardShapes[2], StandardShapes[0]}, ""},
		{"A,C", 10, []Shape{{Name: "A", Keys: 200, EventsPerKey: 50, Subscriptions: 1}, {Name: "C", Keys: 10000, EventsPerKey: 1, Subscriptions: 1}}, ""},
		{"A", 0.01, []Shape{{Name: "A", Keys: 1, EventsPerKey: 50, Subscriptions: 1}}, ""},
		{"D", 0.5, []Shape{{Name: "D", Keys: 100, EventsPerKey: 5, Subscriptions: 3}}, ""},
		{"G", 1, nil, "unknown shape"},
		{"e", 0.1, []Shape{{Name: "E", Keys: 1000, EventsPerKey: 1, Subscriptions: 1, FloorOnly: true}}, ""},
		{"A,A", 1, nil, "named twice"},
		{"A", 0, nil, "scale must be positive"},
		{"A", -2, nil, "scale must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.names, func(t *testing.T) {
			got, err := selectShapes(tt.names, tt.scale)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("shape %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestSteadyShape(t *testing.T) {
	tests := []struct {
		d       time.Duration
		rate    float64
		keys    int
		want    Shape
		wantErr bool
	}{
		{30 * time.Second, 20, 50, Shape{Name: "steady", Keys: 50, EventsPerKey: 12, Subscriptions: 1, Rate: 20}, false},
		{2 * time.Second, 20, 50, Shape{Name: "steady", Keys: 40, EventsPerKey: 1, Subscriptions: 1, Rate: 20}, false},
		{10 * time.Second, 5, 3, Shape{Name: "steady", Keys: 3, EventsPerKey: 17, Subscriptions: 1, Rate: 5}, false},
		{time.Second, 0, 5, Shape{}, true},
		{time.Second, 5, 0, Shape{}, true},
	}
	for _, tt := range tests {
		got, err := steadyShape(tt.d, tt.rate, tt.keys)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("steadyShape(%v, %g, %d) = %+v, %v; want %+v (error %v)", tt.d, tt.rate, tt.keys, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNewPhase(t *testing.T) {
	ph, err := newPhase("r1", Shape{Name: "X", Keys: 3, EventsPerKey: 2, Subscriptions: 2}, SystemHerald, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	ids := map[string]bool{}
	for _, ev := range ph.events {
		order = append(order, fmt.Sprintf("%s#%d", ev.Key, ev.N))
		ids[ev.ID] = true
	}
	if got, want := strings.Join(order, " "),
		"r1-X-00001#1 r1-X-00002#1 r1-X-00003#1 r1-X-00001#2 r1-X-00002#2 r1-X-00003#2"; got != want {
		t.Errorf("publishing order %s, want %s", got, want)
	}
	if len(ids) != 6 {
		t.Errorf("%d distinct ids, want 6", len(ids))
	}
	if got := len(ph.expected()); got != 12 {
		t.Errorf("%d expected deliveries, want 12", got)
	}
}

func TestPercentiles(t *testing.T) {
	msList := func(vals ...int) []time.Duration {
		out := make([]time.Duration, len(vals))
		for i, v := range vals {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", msList(7), Latency{P50: 7, P95: 7, P99: 7, Max: 7, Mean: 7}},
		{"four", msList(40, 10, 30, 20), Latency{P50: 20, P95: 40, P99: 40, Max: 40, Mean: 25}},
		{"hundred", msList(hundred...), Latency{P50: 50, P95: 95, P99: 99, Max: 100, Mean: 50.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentiles(tt.in); got != tt.want {
				t.Errorf("percentiles = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestForEachParallel(t *testing.T) {
	tests := []struct {
		name    string
		items   []int
		failAt  int
		wantErr bool
	}{
		{"all", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, -1, false},
		{"none", nil, -1, false},
		{"stops at an error", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var inFlight, most, done int
			err := forEachParallel(context.Background(), 3, tt.items, func(_ context.Context, it int) error {
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				inFlight--
				done++
				mu.Unlock()
				if it == tt.failAt {
					return errors.New("boom")
				}
				return nil
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if most > 3 {
				t.Errorf("%d calls at once, want at most 3", most)
			}
			if !tt.wantErr && done != len(tt.items) {
				t.Errorf("%d calls, want %d", done, len(tt.items))
			}
			if tt.wantErr && done == len(tt.items) {
				t.Errorf("kept going after the error")
			}
		})
	}
}

func TestBenchManifests(t *testing.T) {
	ms := benchManifests("http://127.0.0.1:9", []int{1, 3})
	if len(ms) != 4 {
		t.Fatalf("%d manifests, want the publisher and sink-1..3", len(ms))
	}
	subs := map[string][]string{}
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			t.Errorf("manifest %s: %v", m.App, err)
		}
		for _, s := range m.Subscribes {
			subs[m.App] = append(subs[m.App], s.Type)
		}
	}
	want := map[string]string{
		"sink-1": "bench-src.fanout-1,bench-src.fanout-3",
		"sink-2": "bench-src.fanout-3",
		"sink-3": "bench-src.fanout-3",
	}
	for app, types := range want {
		if got := strings.Join(subs[app], ","); got != types {
			t.Errorf("%s subscribes to %s, want %s", app, got, types)
		}
	}
	if got := heraldSubscriptions(3); strings.Join(got, " ") !=
		"sink-1:bench-src.fanout-3@1 sink-2:bench-src.fanout-3@1 sink-3:bench-src.fanout-3@1" {
		t.Errorf("heraldSubscriptions(3) = %v", got)
	}
}
