package manifest

import (
	"math"
	"strings"
	"testing"
)

func TestLimitsParsed(t *testing.T) {
	doc := validDoc()
	doc["limits"] = map[string]any{"maxPerSecond": 2.5, "maxInFlight": 3}
	m, err := Parse("m.json", render(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	if m.Limits == nil || m.Limits.MaxPerSecond != 2.5 || m.Limits.MaxInFlight != 3 {
		t.Fatalf("limits = %+v, want 2.5/s and 3 in flight", m.Limits)
	}
	y := "app: contacts\nendpoint: https://c.internal\nlimits:\n  maxInFlight: 4\n"
	m, err = Parse("m.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if m.Limits == nil || m.Limits.MaxPerSecond != 0 || m.Limits.MaxInFlight != 4 {
		t.Fatalf("YAML limits = %+v, want only 4 in flight", m.Limits)
	}
}

func TestLimitsRefused(t *testing.T) {
	cases := []struct {
		name   string
		limits any
		field  string
		msg    string
	}{
		{"zero rate", map[string]any{"maxPerSecond": 0}, "limits.maxPerSecond", "must be a number of deliveries per second from 1/86400 (one a day) to 1000000, got 0"},
		{"negative rate", map[string]any{"maxPerSecond": -3}, "limits.maxPerSecond", "got -3"},
		{"rate too high", map[string]any{"maxPerSecond": 2e6}, "limits.maxPerSecond", "got 2000000"},
		{"rate as text", map[string]any{"maxPerSecond": "5"}, "limits.maxPerSecond", `got "5"`},
		{"zero in flight", map[string]any{"maxInFlight": 0}, "limits.maxInFlight", "must be an integer from 1 to 100000, got 0"},
		{"fractional in flight", map[string]any{"maxInFlight": 1.5}, "limits.maxInFlight", "got 1.5"},
		{"in flight too high", map[string]any{"maxInFlight": 100001}, "limits.maxInFlight", "got 100001"},
		{"unknown field", map[string]any{"perMinute": 3}, "limits.perMinute", "unknown field"},
		{"not an object", []any{1}, "limits", "must be an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := validDoc()
			doc["limits"] = c.limits
			_, err := Parse("m.json", render(t, doc))
			wantProblem(t, problemsOf(t, err), c.field, c.msg)
			// The message names the app, as for every other field.
			if !strings.Contains(err.Error(), `(app "contacts")`) {
				t.Errorf("error does not name the app: %v", err)
			}
		})
	}
}

func TestLimitsValidateBuiltByHand(t *testing.T) {
	for _, l := range []Limits{{MaxPerSecond: math.NaN()}, {MaxPerSecond: math.Inf(1)}, {MaxPerSecond: -1}, {MaxInFlight: -2}} {
		m := &Manifest{App: "billing", Endpoint: "https://b.internal", Limits: &l}
		if err := m.Validate(); err == nil {
			t.Errorf("limits %+v accepted", l)
		}
	}
	m := &Manifest{App: "billing", Endpoint: "https://b.internal", Limits: &Limits{MaxPerSecond: 0.5, MaxInFlight: 1}}
	if err := m.Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
}

func TestHashCoversLimits(t *testing.T) {
	m := &Manifest{App: "billing", Endpoint: "https://b.internal"}
	none := m.Hash()
	m.Limits = &Limits{}
	if m.Hash() != none {
		t.Error("empty limits changed the hash")
	}
	m.Limits = &Limits{MaxPerSecond: 5}
	five := m.Hash()
	if five == none {
		t.Error("a rate limit left the hash unchanged")
	}
	m.Limits = &Limits{MaxPerSecond: 6}
	if m.Hash() == five {
		t.Error("changing the rate left the hash unchanged")
	}
}
