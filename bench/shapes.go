package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Shape is one load pattern: how many subject keys, how many events per key
// and how many subscriptions receive every event. Rate zero publishes
// everything at once (a burst); a positive Rate publishes that many events
// per second, one at a time.
type Shape struct {
	Name          string  `json:"name"`
	Keys          int     `json:"keys"`
	EventsPerKey  int     `json:"eventsPerKey"`
	Subscriptions int     `json:"subscriptions"`
	Rate          float64 `json:"rate,omitempty"`
	// FloorOnly measures the shape against the floor alone: the ceilings,
	// at 8–13 signals a second on this machine, would take a quarter of an
	// hour for it.
	FloorOnly bool `json:"floorOnly,omitempty"`
	// HeraldOnly measures the shape on Herald alone, with no ceiling or
	// floor beside it: a burst whose figures are its drain time, memory
	// and database size, not a ratio.
	HeraldOnly bool `json:"heraldOnly,omitempty"`
}

// Events is the number of events the shape publishes.
func (s Shape) Events() int { return s.Keys * s.EventsPerKey }

// Deliveries is the number of deliveries the shape expects.
func (s Shape) Deliveries() int { return s.Events() * s.Subscriptions }

// String describes the shape, like "20 keys × 50 events".
func (s Shape) String() string {
	out := fmt.Sprintf("%d keys × %d", s.Keys, s.EventsPerKey)
	if s.Subscriptions > 1 {
		out += fmt.Sprintf(" × %d subs", s.Subscriptions)
	}
	if s.Rate > 0 {
		out += fmt.Sprintf(" @ %g/s", s.Rate)
	}
	return out
}

// StandardShapes are issue 6's shapes: A bursty keys, B and C many keys with
// few events, D is B with every event going to three subscriptions; issue
// 29's E, ten times C, measured against the floor only, and its burst F,
// 100,000 events over 50,000 keys published at once, on Herald only (not
// in the default -shapes: it drains for tens of minutes on two CPUs).
var StandardShapes = []Shape{
	{Name: "A", Keys: 20, EventsPerKey: 50, Subscriptions: 1},
	{Name: "B", Keys: 200, EventsPerKey: 5, Subscriptions: 1},
	{Name: "C", Keys: 1000, EventsPerKey: 1, Subscriptions: 1},
	{Name: "D", Keys: 200, EventsPerKey: 5, Subscriptions: 3},
	{Name: "E", Keys: 10000, EventsPerKey: 1, Subscriptions: 1, FloorOnly: true},
	{Name: "F", Keys: 50000, EventsPerKey: 2, Subscriptions: 1, HeraldOnly: true},
}

// selectShapes picks standard shapes by name ("A,B,C,D") and multiplies
// their event counts by scale. Scale multiplies the number of keys, so each
// shape keeps its events per key (what makes A bursty and C one-off).
func selectShapes(names string, scale float64) ([]Shape, error) {
	if scale <= 0 || math.IsInf(scale, 0) || math.IsNaN(scale) {
		return nil, fmt.Errorf("scale must be positive, not %g", scale)
	}
	var out []Shape
	seen := map[string]bool{}
	for _, name := range strings.Split(names, ",") {
		name = strings.ToUpper(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("shape %s named twice", name)
		}
		seen[name] = true
		found := false
		for _, s := range StandardShapes {
			if s.Name == name {
				s.Keys = max(1, int(math.Round(float64(s.Keys)*scale)))
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown shape %q (use A, B, C, D, E)", name)
		}
	}
	return out, nil
}

// steadyShape is the steady run: rate events per second for about d, spread
// round-robin over keys, each to one subscription.
func steadyShape(d time.Duration, rate float64, keys int) (Shape, error) {
	if rate <= 0 || keys <= 0 {
		return Shape{}, fmt.Errorf("steady run needs a positive rate and key count")
	}
	total := max(1, int(math.Round(rate*d.Seconds())))
	keys = min(keys, total)
	perKey := max(1, (total+keys-1)/keys)
	return Shape{Name: "steady", Keys: keys, EventsPerKey: perKey, Subscriptions: 1, Rate: rate}, nil
}
