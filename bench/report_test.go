package main

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"
)

func TestReportOutputs(t *testing.T) {
	rep := &Report{Started: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, Measurements: []Measurement{
		{Shape: StandardShapes[0], System: SystemCeiling, Deliveries: 1000, Delivered: 1000, Seconds: 10, PerSecond: 100,
			LatencyMS: Latency{P50: 40, P95: 90, P99: 120}, CPUSeconds: map[string]float64{"temporal": 5},
			Actions: &Actions{Workflows: 1, Events: 50, Signals: 50, WorkflowTasks: 60, Activities: 50, HistoryEvents: 500, SignalDelayMS: 3}},
		{Shape: StandardShapes[0], System: SystemHerald, Deliveries: 1000, Delivered: 998, Seconds: 2, PerSecond: 499, Ratio: 4.99,
			Lost: 2, LatencyMS: Latency{P50: 700, P95: 1500, P99: 1900}, WorkerPeakRSSMB: 61.5,
			CPUSeconds: map[string]float64{"worker": 1.996, "temporal": 2}},
		{Shape: Shape{Name: "steady", Keys: 50, EventsPerKey: 12, Subscriptions: 1, Rate: 20}, System: SystemHerald,
			Deliveries: 600, Delivered: 600, LatencyMS: Latency{P50: 80, P95: 200, P99: 400}},
	}}
	var b bytes.Buffer
	if err := writeTables(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| A      | herald  | 20 keys × 50 ",
		"| 998/1000 ",
		"| 4.99× ",
		"| 62 ", // rss rounded
		"| 1.00          | 1.20                 | 1.00             | 0.00             | 10.00                | 3                 |",
		"| 2.0 ", // worker CPU ms per delivery: 1996ms / 998
		"50 keys × 12 @ 20/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
	var img bytes.Buffer
	if err := encodeChart(&img, rep); err != nil {
		t.Fatal(err)
	}
	decoded, err := png.Decode(&img)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := decoded.Bounds(); b.Dx() != chartW || b.Dy() != chartH {
		t.Errorf("chart is %v, want %dx%d", b, chartW, chartH)
	}
	// The Herald bar of shape A is drawn in its colour somewhere in the left panel.
	found := false
	for x := 60; x < 560 && !found; x++ {
		if r, g, bl, _ := decoded.At(x, panelBottom-5).RGBA(); r>>8 == uint32(colHerald.R) && g>>8 == uint32(colHerald.G) && bl>>8 == uint32(colHerald.B) {
			found = true
		}
	}
	if !found {
		t.Error("no ratio bar in the chart")
	}
}

func TestDurationLabel(t *testing.T) {
	tests := []struct {
		ms   float64
		want string
	}{{10, "10ms"}, {999, "999ms"}, {1500, "1.5s"}, {12000, "12s"}, {100000, "100s"}, {900000, "15m"}}
	for _, tt := range tests {
		if got := durationLabel(tt.ms); got != tt.want {
			t.Errorf("durationLabel(%g) = %q, want %q", tt.ms, got, tt.want)
		}
	}
}
