package subscriber

import (
	"fmt"
	"testing"
	"time"
)

func TestReplayCache(t *testing.T) {
	type op struct {
		jti     string
		expires time.Duration // after t0
		at      time.Duration // "now", after t0
		want    bool          // new?
	}
	tests := []struct {
		name    string
		max     int
		ops     []op
		wantLen int
	}{
		{
			name: "repeat refused until expiry",
			max:  10,
			ops: []op{
				{"a", time.Minute, 0, true},
				{"a", time.Minute, 30 * time.Second, false},
				{"a", time.Minute, time.Minute - time.Nanosecond, false},
				{"a", time.Minute, time.Minute, true}, // forgotten at expiry
			},
			wantLen: 1,
		},
		{
			name: "full cache forgets the id expiring first",
			max:  3,
			ops: []op{
				{"late", 5 * time.Minute, 0, true},
				{"soon", time.Minute, 0, true},
				{"mid", 3 * time.Minute, 0, true},
				{"new", 4 * time.Minute, 0, true}, // evicts "soon"
				{"late", 5 * time.Minute, 0, false},
				{"mid", 3 * time.Minute, 0, false},
				{"new", 4 * time.Minute, 0, false},
				{"soon", time.Minute, 0, true}, // was evicted; evicts "mid"
				{"mid", 3 * time.Minute, 0, true},
			},
			wantLen: 3,
		},
		{
			name: "expired ids are dropped before counting",
			max:  2,
			ops: []op{
				{"a", time.Minute, 0, true},
				{"b", time.Minute, 0, true},
				{"c", 5 * time.Minute, 2 * time.Minute, true},
				{"c", 5 * time.Minute, 2 * time.Minute, false},
			},
			wantLen: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newReplayCache(tc.max)
			for i, o := range tc.ops {
				if got := c.add(o.jti, t0.Add(o.expires), t0.Add(o.at)); got != o.want {
					t.Errorf("op %d add(%s) = %v, want %v", i, o.jti, got, o.want)
				}
				if c.len() > tc.max {
					t.Fatalf("op %d: cache holds %d ids, above %d", i, c.len(), tc.max)
				}
			}
			if c.len() != tc.wantLen {
				t.Errorf("cache holds %d ids, want %d", c.len(), tc.wantLen)
			}
		})
	}
}

func TestReplayCacheStaysBounded(t *testing.T) {
	c := newReplayCache(100)
	for i := range 10_000 {
		c.add(fmt.Sprint(i), t0.Add(time.Duration(i%300)*time.Second), t0)
	}
	if c.len() != 100 || len(c.queue) != 100 {
		t.Fatalf("cache holds %d ids (%d queued), want 100", c.len(), len(c.queue))
	}
	// The id just added is always remembered, even when it expires before
	// the others: it is the one a replay would reuse next.
	if c.add("9999", t0.Add(99*time.Second), t0) {
		t.Error("the last id added was forgotten")
	}
}
