package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReportOutputs(t *testing.T) {
	rep := &Report{Started: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, Measurements: []Measurement{
		{Shape: StandardShapes[0], System: SystemCeiling, Deliveries: 1000, Delivered: 1000, Seconds: 10, PerSecond: 100,
			LatencyMS: Latency{P50: 40, P95: 90, P99: 120}, CPUSeconds: map[string]float64{"temporal": 5},
			Visibility: &Visibility{Started: 2, Closed: 1000}, // as results written before the store was counted
			Actions: &Actions{Workflows: 1, Events: 50, Signals: 50, WorkflowTasks: 60, Activities: 50, HistoryEvents: 500, SignalDelayMS: 3,
				Starts: 1, Timers: 2}},
		{Shape: StandardShapes[0], System: SystemHerald, Deliveries: 1000, Delivered: 998, Seconds: 2, PerSecond: 499, Ratio: 4.99,
			Lost: 2, LatencyMS: Latency{P50: 700, P95: 1500, P99: 1900}, WorkerPeakRSSMB: 61.5,
			CPUSeconds: map[string]float64{"worker": 1.996, "temporal": 2, temporalDB: 1.497},
			Visibility: &Visibility{Started: 499, Closed: 998, Upserted: 0, Store: 12974, ClusterMetadata: 5489}, MachineIdle: new(31.6)},
		{Shape: Shape{Name: "steady", Keys: 50, EventsPerKey: 12, Subscriptions: 1, Rate: 20}, System: SystemHerald,
			Deliveries: 600, Delivered: 600, LatencyMS: Latency{P50: 80, P95: 200, P99: 400},
			Tail: []TailEvent{{EventID: "e1", LatencyMS: 950, RelayMS: 20, KeyBusyMS: 0, WorkflowTaskWaitMS: 30,
				WorkflowTaskRunMS: 10, WorkflowTaskAttempts: 1, ActivityWaitMS: 880, ActivityAttempt: 1, PostMS: 10},
				{EventID: "e2", LatencyMS: 900, RelayMS: 20, KeyBusyMS: -1, WorkflowTaskWaitMS: -1, WorkflowTaskRunMS: -1,
					ActivityWaitMS: -1, PostMS: -1, Local: true, Error: "no history"}}},
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
		// ... history events, starts, updates, timers, LA batches, billable (1 + 50 + 50 + 2 = 103 / 50), publish→signal
		"| 1.00          | 1.20                 | 1.00             | 0.00                   | 0.00             | 10.00                | 0.02         | 0.00          | 0.04         | 0.00             | 2.06                   | 3                 |",
		"| 2.0 ", // worker CPU ms per delivery: 1996ms / 998
		// temporal, temporal db (1497 ms / 998), postgres (none)
		"| 2.0      | 1.5         |          |",
		// Visibility records per delivery: started, closed, upserted; the
		// main store's requests and cluster metadata reads (12974 / 998,
		// 5489 / 998); the machine's idle share, rounded. The ceiling's
		// row, without the store's counts or idle share, leaves them
		// empty, and the steady row, without any counts, all five.
		"| 0.50                                | 1.00   | 0.00     | 13.0                    | 5.50                            | 32             | 0.0→0.0 ",
		"| 0.00                                | 1.00   | 0.00     |                         |                                 |                | 0.0→0.0 ",
		"|                                     |        |          |                         |                                 |                | 0.0→0.0 ",
		"50 keys × 12 @ 20/s",
		"| steady | 950        | 20             | 0        | 30       | 10      | 1           | activity | 880           | 1                | 10        |            |",
		"| steady | 900        | 20             | ?        | ?        | ?       | 0           | local    | ?             | 0                | ?         | no history |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
	var img bytes.Buffer
	if err := encodeChart(&img, &Suite{Runs: []*Report{rep}}); err != nil {
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

// TestSuiteOutputs checks the summary of several runs (medians per server
// configuration), the per-run headings, the stacked chart and the JSON
// round trip, also of a single run's report as earlier versions wrote it.
func TestSuiteOutputs(t *testing.T) {
	run := func(server ServerConfig, ceiling, herald, p99 float64, dups int) *Report {
		return &Report{Started: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC), CPUs: 2, Server: server,
			TemporalAddress: "127.0.0.1:7233", Measurements: []Measurement{
				{Shape: StandardShapes[1], System: SystemCeiling, PerSecond: ceiling},
				{Shape: StandardShapes[1], System: SystemBatched, PerSecond: 2 * ceiling},
				{Shape: StandardShapes[1], System: SystemHerald, PerSecond: herald, Ratio: herald / ceiling,
					RatioBatched: herald / ceiling / 2, LatencyMS: Latency{P50: p99 / 2, P99: p99}, Duplicates: dups},
			}}
	}
	def, eager := ServerConfigs[0], ServerConfigs[1]
	suite := &Suite{Runs: []*Report{
		run(def, 20, 40, 900, 0), run(eager, 50, 100, 300, 0),
		run(def, 10, 40, 1500, 1), run(eager, 50, 75, 200, 0),
		run(def, 20, 10, 100, 0), run(eager, 40, 120, 250, 0),
	}}
	var b bytes.Buffer
	if err := writeSuite(&b, suite); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// default: ceiling 10, 20, 20; Herald 40, 40, 10; ratios 2, 4, 0.5; p99 900, 1500, 100.
		"| default | B     | 200 keys × 5 | 3    | 20.0                 | 40.0                 | 40.0                | 2.00×     | 1.00×     | 450           | 900           | 0 / 0 / 1 ",
		// eager: ratios 2, 1.5, 3.
		"| eager   | B     | 200 keys × 5 | 3    | 50.0                 | 100.0                | 100.0               | 2.00×     | 1.00×     | 125           | 250           | 0 / 0 / 0 ",
		"| × batched |",
		"Temporal 127.0.0.1:7233: " + def.Settings,
		"Temporal 127.0.0.1:7233: " + eager.Settings,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	var img bytes.Buffer
	if err := encodeChart(&img, suite); err != nil {
		t.Fatal(err)
	}
	decoded, err := png.Decode(&img)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := decoded.Bounds(); b.Dx() != chartW || b.Dy() != 6*chartH {
		t.Errorf("chart is %v, want %dx%d", b, chartW, 6*chartH)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := writeJSON(path, suite); err != nil {
		t.Fatal(err)
	}
	back, err := readJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 6 || back.Runs[1].Server.Name != "eager" || back.Runs[2].Measurements[2].Duplicates != 1 {
		t.Errorf("read back %d runs, second on %q", len(back.Runs), back.Runs[1].Server.Name)
	}
	old, err := json.Marshal(suite.Runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if back, err = readJSON(path); err != nil || len(back.Runs) != 1 || len(back.Runs[0].Measurements) != 3 {
		t.Errorf("a single report reads back as %+v, %v", back, err)
	}
}

func TestSelectServers(t *testing.T) {
	got, err := selectServers(" Eager, default")
	if err != nil || len(got) != 2 || got[0].Name != "eager" || got[1].Name != "default" {
		t.Fatalf("selectServers = %+v, %v", got, err)
	}
	if len(got[1].Flags) != 0 {
		t.Errorf("the default configuration adds flags %v; it must be the server's defaults", got[1].Flags)
	}
	for _, bad := range []string{"", "default,default", "fast"} {
		if _, err := selectServers(bad); err == nil {
			t.Errorf("selectServers(%q) accepted", bad)
		}
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

func TestParseFlagsServers(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.servers != "default,eager" || o.serverFlag || o.repeat != 1 || !o.batched {
		t.Errorf("defaults: %+v, %v; want both server configurations, once, with the batched ceiling", o, err)
	}
	if o, err = parseFlags([]string{"-servers", "eager", "-repeat", "3"}); err != nil || !o.serverFlag || o.repeat != 3 {
		t.Errorf("-servers eager -repeat 3: %+v, %v", o, err)
	}
	if _, err = parseFlags([]string{"-repeat", "0"}); err == nil {
		t.Error("-repeat 0 accepted")
	}
}

// TestNoisyRows checks the noisy-neighbour table: each shape beside the
// neighbours next to the same shape alone, with the ratios and what the
// neighbours did.
func TestNoisyRows(t *testing.T) {
	nb := Shape{Name: noisyBurstShape, Keys: 200, EventsPerKey: 5, Subscriptions: 2}
	rep := &Report{Measurements: []Measurement{
		{Shape: nb, System: SystemHerald, PerSecond: 1},
		{Shape: nb, System: SystemAlone, PerSecond: 200, LatencyMS: Latency{P99: 100}},
		{Shape: nb, System: SystemAloneAgain, PerSecond: 190, LatencyMS: Latency{P99: 110}, OutOfOrder: 3},
		{Shape: nb, System: SystemCalm, PerSecond: 150, LatencyMS: Latency{P99: 250}, Duplicates: 2},
		{Shape: nb, System: SystemNeighbours, PerSecond: 180, AloneRatio: 0.9, AloneP99Ratio: 1.25,
			LatencyMS: Latency{P99: 125}, Lost: 1,
			Neighbours: &NeighbourStats{Published: map[string]int{"slow": 7, "fail": 8, "heavy": 9},
				Received:     map[string]int{noisySlowApp: 3, noisyFailApp: 4, noisyFilterApp: 5},
				TokenGuesses: map[string]int{"429": 90, "401": 10}}},
	}}
	rows := noisyRows(rep)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want a header and one: %v", len(rows), rows)
	}
	got := strings.Join(rows[1], "|")
	want := "NB|200 keys × 5 × 2 subs|200.0|190.0|150.0|180.0|0.95×|0.90×|1.20×|100|110|250|125|1.10×|1.25×|0.50×|1 / 3 / 2|7/8/9|3/4/5|401: 10, 429: 90"
	if got != want {
		t.Errorf("row\n got %s\nwant %s", got, want)
	}
	if rows := noisyRows(&Report{Measurements: rep.Measurements[:4]}); len(rows) != 1 {
		t.Errorf("rows without a measurement beside neighbours: %v", rows)
	}
	// Without the control and the second run alone (a report of an earlier
	// run) their cells are empty.
	rows = noisyRows(&Report{Measurements: []Measurement{rep.Measurements[1], rep.Measurements[4]}})
	if got, want := strings.Join(rows[1][:17], "|"), "NB|200 keys × 5 × 2 subs|200.0|||180.0||0.90×||100|||125||1.25×||1 / 0 / 0"; got != want {
		t.Errorf("row without the control\n got %s\nwant %s", got, want)
	}
}

// TestNoisySummaryRows: the summary takes medians over runs per server and
// shape, of the figures and of each run's own ratios.
func TestNoisySummaryRows(t *testing.T) {
	nb := Shape{Name: noisyBurstShape, Keys: 200, EventsPerKey: 5, Subscriptions: 2}
	run := func(alone, calm, beside, p99a, p99c, p99b float64) *Report {
		return &Report{Server: ServerConfig{Name: "default"}, Measurements: []Measurement{
			{Shape: nb, System: SystemHerald, PerSecond: 1},
			{Shape: nb, System: SystemAlone, PerSecond: alone, LatencyMS: Latency{P99: p99a}},
			{Shape: nb, System: SystemAloneAgain, PerSecond: alone * 0.9, LatencyMS: Latency{P99: p99a * 2}},
			{Shape: nb, System: SystemCalm, PerSecond: calm, LatencyMS: Latency{P99: p99c}},
			{Shape: nb, System: SystemNeighbours, PerSecond: beside, LatencyMS: Latency{P99: p99b}, Duplicates: 1,
				AloneRatio: beside / alone, AloneP99Ratio: p99b / p99a},
		}}
	}
	suite := &Suite{Runs: []*Report{run(100, 90, 90, 10, 10, 20), run(200, 125, 100, 10, 15, 30), run(150, 100, 150, 20, 40, 20)}}
	rows := noisySummaryRows(suite)
	if len(rows) != 2 {
		t.Fatalf("rows: %v", rows)
	}
	got := strings.Join(rows[1], "|")
	// × calm: the median of 90/90, 100/125 and 150/100; p99: of 20/10, 30/15, 20/40.
	// Again: 0.9 × alone and twice its p99 in every run.
	want := "default|NB|3|150.0|135.0|100.0|100.0|0.90×|0.90×|1.00×|10|20|15|20|2.00×|2.00×|2.00×|0 / 0 / 3"
	if got != want {
		t.Errorf("row\n got %s\nwant %s", got, want)
	}
}

// The shaped floor gets a column of its own and Herald's ratio to it, in
// each run's table and in the summary's medians.
func TestShapedFloorColumns(t *testing.T) {
	c := StandardShapes[2]
	run := func(floor, shaped, herald float64) *Report {
		return &Report{Server: ServerConfigs[0], Measurements: []Measurement{
			{Shape: c, System: SystemFloor, PerSecond: floor},
			{Shape: c, System: SystemShapedFloor, PerSecond: shaped},
			{Shape: c, System: SystemHerald, PerSecond: herald, RatioFloor: herald / floor, RatioShapedFloor: herald / shaped},
		}}
	}
	suite := &Suite{Runs: []*Report{run(60, 50, 45), run(80, 60, 40), run(70, 55, 50)}}
	rows := summaryRows(suite)
	col := func(name string) int {
		for i, h := range rows[0] {
			if h == name {
				return i
			}
		}
		t.Fatalf("summary lacks a %q column: %v", name, rows[0])
		return -1
	}
	// Medians: shaped floor 55; Herald's ratios to it 0.90, 0.67, 0.91.
	if got := rows[1][col("shaped floor deliveries/s")]; got != "55.0" {
		t.Errorf("shaped floor median %q, want 55.0", got)
	}
	if got := rows[1][col("× shaped floor")]; got != "0.90×" {
		t.Errorf("ratio to the shaped floor %q, want 0.90×", got)
	}
	// The run's table: Herald's row has 0.90× under × shaped floor.
	var b bytes.Buffer
	if err := writeTables(&b, suite.Runs[0]); err != nil {
		t.Fatal(err)
	}
	cells := func(line string) []string {
		var out []string
		for _, c := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "|"), "|"), "|") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	lines := strings.Split(b.String(), "\n")
	header := cells(lines[0])
	at := slices.Index(header, "× shaped floor")
	var herald []string
	for _, l := range lines {
		if row := cells(l); len(row) == len(header) && row[1] == SystemHerald {
			herald = row
			break
		}
	}
	if at < 0 || herald == nil || herald[at] != "0.90×" {
		t.Errorf("Herald's ratio to the shaped floor is not 0.90× under × shaped floor:\n%s", b.String())
	}
}

// TestHeraldFirstEveryOtherRun: a single run measures Herald last; with
// -repeat, every other one measures it first.
func TestHeraldFirstEveryOtherRun(t *testing.T) {
	for i, want := range []bool{false, true, false, true} {
		if got := heraldFirst(i); got != want {
			t.Errorf("run %d: Herald first %v, want %v", i, got, want)
		}
	}
}
