package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// writeTables prints the run as three Markdown tables (readable in a
// terminal too): the results, the Temporal actions and task timings of the
// sampled workflows, and the CPU time per delivery of each process.
func writeTables(w io.Writer, rep *Report) error {
	header := []string{"shape", "system", "load", "deliveries", "seconds", "deliveries/s", "× ceiling"}
	batched := hasSystem(rep, SystemBatched)
	if batched {
		header = append(header, "× batched")
	}
	floor := hasSystem(rep, SystemFloor)
	if floor {
		header = append(header, "× floor")
	}
	shaped := hasSystem(rep, SystemShapedFloor)
	if shaped {
		header = append(header, "× shaped floor")
	}
	results := [][]string{append(header, "p50 ms", "p95 ms", "p99 ms", "lost", "out of order", "duplicates", "worker peak RSS MB",
		"PostgreSQL MB (+ growth)")}
	for _, m := range rep.Measurements {
		ratio, ratioBatched, ratioFloor, ratioShaped, rss, pg := "", "", "", "", "", ""
		if !isReference(m.System) {
			rss = fmt.Sprintf("%.0f", m.WorkerPeakRSSMB)
			if m.PostgresMB > 0 {
				pg = fmt.Sprintf("%.0f (+%.0f)", m.PostgresMB, m.PostgresGrowthMB)
			}
			if m.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f×", m.Ratio)
			}
			if m.RatioBatched > 0 {
				ratioBatched = fmt.Sprintf("%.2f×", m.RatioBatched)
			}
			if m.RatioFloor > 0 {
				ratioFloor = fmt.Sprintf("%.2f×", m.RatioFloor)
			}
			if m.RatioShapedFloor > 0 {
				ratioShaped = fmt.Sprintf("%.2f×", m.RatioShapedFloor)
			}
		}
		row := []string{m.Shape.Name, m.System, m.Shape.String(),
			fmt.Sprintf("%d/%d", m.Delivered, m.Deliveries), fmt.Sprintf("%.1f", m.Seconds),
			fmt.Sprintf("%.1f", m.PerSecond), ratio}
		if batched {
			row = append(row, ratioBatched)
		}
		if floor {
			row = append(row, ratioFloor)
		}
		if shaped {
			row = append(row, ratioShaped)
		}
		results = append(results, append(row,
			fmt.Sprintf("%.0f", m.LatencyMS.P50), fmt.Sprintf("%.0f", m.LatencyMS.P95), fmt.Sprintf("%.0f", m.LatencyMS.P99),
			fmt.Sprint(m.Lost), fmt.Sprint(m.OutOfOrder), fmt.Sprint(m.Duplicates), rss, pg))
	}
	actions := [][]string{{"shape", "system", "signals/event", "workflow tasks/event", "activities/event",
		"local activities/event", "SA upserts/event", "history events/event", "starts/event", "updates/event",
		"timers/event", "LA batches/event", "billable actions/event", "publish→signal ms", "WFT wait ms", "WFT run ms",
		"activity wait ms", "activity run ms"}}
	cpu := [][]string{{"shape", "system", "CPU ms/delivery: worker", "temporal", "temporal db", "postgres", "bench",
		"visibility writes/delivery: started", "closed", "upserted", "store requests/delivery", "cluster metadata reads/delivery",
		"machine idle %", "load avg before→after"}}
	for _, m := range rep.Measurements {
		if a := m.Actions; a != nil && a.Events > 0 {
			actions = append(actions, []string{m.Shape.Name, m.System,
				fmt.Sprintf("%.2f", a.PerEvent(a.Signals)), fmt.Sprintf("%.2f", a.PerEvent(a.WorkflowTasks)),
				fmt.Sprintf("%.2f", a.PerEvent(a.Activities)), fmt.Sprintf("%.2f", a.PerEvent(a.LocalActivities)),
				fmt.Sprintf("%.2f", a.PerEvent(a.SearchAttributeUpserts)),
				fmt.Sprintf("%.2f", a.PerEvent(a.HistoryEvents)), fmt.Sprintf("%.2f", a.PerEvent(a.Starts)),
				fmt.Sprintf("%.2f", a.PerEvent(a.Updates)), fmt.Sprintf("%.2f", a.PerEvent(a.Timers)),
				fmt.Sprintf("%.2f", a.PerEvent(a.LocalActivityBatches)), fmt.Sprintf("%.2f", a.PerEvent(a.Billable())),
				fmt.Sprintf("%.0f", a.SignalDelayMS),
				fmt.Sprintf("%.0f", a.WorkflowTaskWaitMS), fmt.Sprintf("%.0f", a.WorkflowTaskRunMS),
				fmt.Sprintf("%.0f", a.ActivityWaitMS), fmt.Sprintf("%.0f", a.ActivityRunMS)})
		}
		row := []string{m.Shape.Name, m.System}
		for _, proc := range []string{"worker", "temporal", temporalDB, "postgres", "bench"} {
			v, ok := m.CPUSeconds[proc]
			if !ok || m.Delivered == 0 {
				row = append(row, "")
				continue
			}
			row = append(row, fmt.Sprintf("%.1f", v*1000/float64(m.Delivered)))
		}
		if v := m.Visibility; v != nil && m.Delivered > 0 {
			n := float64(m.Delivered)
			row = append(row, fmt.Sprintf("%.2f", v.Started/n), fmt.Sprintf("%.2f", v.Closed/n), fmt.Sprintf("%.2f", v.Upserted/n))
			if v.Store != 0 { // counted since 2026-12-06: zero in results written before
				row = append(row, fmt.Sprintf("%.1f", v.Store/n), fmt.Sprintf("%.2f", v.ClusterMetadata/n))
			} else {
				row = append(row, "", "")
			}
		} else {
			row = append(row, "", "", "", "", "")
		}
		if m.MachineIdle != nil {
			row = append(row, fmt.Sprintf("%.0f", *m.MachineIdle))
		} else {
			row = append(row, "")
		}
		cpu = append(cpu, append(row, fmt.Sprintf("%.1f→%.1f", m.LoadBefore, m.LoadAfter)))
	}
	tables := [][][]string{results, actions, cpu}
	if tail := tailRows(rep); len(tail) > 1 {
		tables = append(tables, tail)
	}
	if noisy := noisyRows(rep); len(noisy) > 1 {
		tables = append(tables, noisy)
	}
	for i, table := range tables {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if err := markdownTable(w, table); err != nil {
			return err
		}
	}
	return nil
}

// tailRows is the table of where the slowest deliveries of paced runs spent
// their time, in milliseconds.
func tailRows(rep *Report) [][]string {
	rows := [][]string{{"shape", "latency ms", "publish→signal", "key busy", "WFT wait", "WFT run", "WFT attempt",
		"Deliver", "activity wait", "activity attempt", "POST→sink", "note"}}
	part := func(v float64) string {
		if v < 0 {
			return "?"
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, m := range rep.Measurements {
		for _, te := range m.Tail {
			kind := "activity"
			if te.Local {
				kind = "local"
			}
			rows = append(rows, []string{m.Shape.Name, part(te.LatencyMS), part(te.RelayMS), part(te.KeyBusyMS),
				part(te.WorkflowTaskWaitMS), part(te.WorkflowTaskRunMS), fmt.Sprint(te.WorkflowTaskAttempts),
				kind, part(te.ActivityWaitMS), fmt.Sprint(te.ActivityAttempt), part(te.PostMS), te.Error})
		}
	}
	return rows
}

// noisyRows is the noisy-neighbour comparison: each healthy shape alone,
// alone again (the comparison's noise), beside the calm neighbours and
// beside the misbehaving ones, and what the neighbours did meanwhile.
func noisyRows(rep *Report) [][]string {
	rows := [][]string{{"shape", "load", "alone deliveries/s", "again deliveries/s", "calm deliveries/s",
		"beside deliveries/s", "again × alone", "× alone", "× calm", "alone p99 ms", "again p99 ms", "calm p99 ms",
		"beside p99 ms", "again p99 × alone", "p99 × alone", "p99 × calm", "lost / out of order / duplicates",
		"neighbour events slow/fail/heavy", "neighbour POSTs slow/fail/filtered", "token guesses by status"}}
	of := map[string]map[string]Measurement{SystemAlone: {}, SystemAloneAgain: {}, SystemCalm: {}}
	for _, m := range rep.Measurements {
		if byShape, ok := of[m.System]; ok {
			byShape[m.Shape.Name] = m
		}
	}
	for _, m := range rep.Measurements {
		if m.System != SystemNeighbours {
			continue
		}
		a, g, c := of[SystemAlone][m.Shape.Name], of[SystemAloneAgain][m.Shape.Name], of[SystemCalm][m.Shape.Name]
		lost, ooo, dups := m.Lost+c.Lost+g.Lost, m.OutOfOrder+c.OutOfOrder+g.OutOfOrder, m.Duplicates+c.Duplicates+g.Duplicates
		row := []string{m.Shape.Name, m.Shape.String(), fmt.Sprintf("%.1f", a.PerSecond), figure(g.PerSecond, "%.1f"),
			figure(c.PerSecond, "%.1f"), fmt.Sprintf("%.1f", m.PerSecond),
			ratioCell(g.PerSecond, a.PerSecond), fmt.Sprintf("%.2f×", m.AloneRatio), ratioCell(m.PerSecond, c.PerSecond),
			fmt.Sprintf("%.0f", a.LatencyMS.P99), figure(g.LatencyMS.P99, "%.0f"), figure(c.LatencyMS.P99, "%.0f"),
			fmt.Sprintf("%.0f", m.LatencyMS.P99),
			ratioCell(g.LatencyMS.P99, a.LatencyMS.P99), fmt.Sprintf("%.2f×", m.AloneP99Ratio),
			ratioCell(m.LatencyMS.P99, c.LatencyMS.P99),
			fmt.Sprintf("%d / %d / %d", lost, ooo, dups)}
		if n := m.Neighbours; n != nil {
			row = append(row,
				fmt.Sprintf("%d/%d/%d", n.Published["slow"], n.Published["fail"], n.Published["heavy"]),
				fmt.Sprintf("%d/%d/%d", n.Received[noisySlowApp], n.Received[noisyFailApp], n.Received[noisyFilterApp]),
				countsText(n.TokenGuesses))
		} else {
			row = append(row, "", "", "")
		}
		rows = append(rows, row)
	}
	return rows
}

// figure formats v, or is empty when there is none (0).
func figure(v float64, format string) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(format, v)
}

// ratioCell is v ÷ of as "0.00×", empty without either (a measurement
// not made in that run).
func ratioCell(v, of float64) string {
	if v == 0 || of == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v/of)
}

// noisySummaryRows are the rows (header first) of the noisy-neighbour
// summary: per server configuration and shape, the medians over runs of
// the healthy deliveries per second and p99 alone, alone again, beside the
// calm neighbours and beside the misbehaving ones, and of each run's own
// ratios.
func noisySummaryRows(suite *Suite) [][]string {
	rows := [][]string{{"server", "shape", "runs", "alone deliveries/s", "again deliveries/s", "calm deliveries/s",
		"beside deliveries/s", "again × alone", "× alone", "× calm", "alone p99 ms", "again p99 ms", "calm p99 ms",
		"beside p99 ms", "again p99 × alone", "p99 × alone", "p99 × calm", "lost / out of order / duplicates"}}
	type key struct{ server, shape string }
	// figures are one system's rates and p99s over runs, and each run's own
	// ratios of them to its first measurement alone and to its control.
	type figures struct{ rate, p99, ratio, p99Ratio, calmRatio, calmP99Ratio []float64 }
	type acc struct {
		by              map[string]*figures
		lost, ooo, dups int
	}
	var order []key
	accs := map[key]*acc{}
	systems := []string{SystemAlone, SystemAloneAgain, SystemCalm, SystemNeighbours}
	for _, rep := range suite.Runs {
		of := map[key]map[string]Measurement{}
		for _, m := range rep.Measurements {
			if !slices.Contains(systems, m.System) {
				continue
			}
			k := key{rep.Server.Name, m.Shape.Name}
			a := accs[k]
			if a == nil {
				a = &acc{by: map[string]*figures{}}
				for _, s := range systems {
					a.by[s] = &figures{}
				}
				accs[k] = a
				order = append(order, k)
			}
			if of[k] == nil {
				of[k] = map[string]Measurement{}
			}
			of[k][m.System] = m
			a.lost += m.Lost
			a.ooo += m.OutOfOrder
			a.dups += m.Duplicates
			f := a.by[m.System]
			f.rate = append(f.rate, m.PerSecond)
			f.p99 = append(f.p99, m.LatencyMS.P99)
		}
		// Each run's own ratios, to its first measurement alone and to its
		// control.
		for k, ms := range of {
			alone, calm := ms[SystemAlone], ms[SystemCalm]
			for _, s := range []string{SystemAloneAgain, SystemNeighbours} {
				m, ok := ms[s]
				if !ok {
					continue
				}
				f := accs[k].by[s]
				if alone.PerSecond > 0 && alone.LatencyMS.P99 > 0 {
					f.ratio = append(f.ratio, m.PerSecond/alone.PerSecond)
					f.p99Ratio = append(f.p99Ratio, m.LatencyMS.P99/alone.LatencyMS.P99)
				}
				if calm.PerSecond > 0 && calm.LatencyMS.P99 > 0 {
					f.calmRatio = append(f.calmRatio, m.PerSecond/calm.PerSecond)
					f.calmP99Ratio = append(f.calmP99Ratio, m.LatencyMS.P99/calm.LatencyMS.P99)
				}
			}
		}
	}
	for _, k := range order {
		a := accs[k]
		al, ag, ca, be := a.by[SystemAlone], a.by[SystemAloneAgain], a.by[SystemCalm], a.by[SystemNeighbours]
		rows = append(rows, []string{k.server, k.shape, fmt.Sprint(len(be.rate)),
			medianCell(al.rate, "%.1f"), medianCell(ag.rate, "%.1f"), medianCell(ca.rate, "%.1f"), medianCell(be.rate, "%.1f"),
			medianCell(ag.ratio, "%.2f×"), medianCell(be.ratio, "%.2f×"), medianCell(be.calmRatio, "%.2f×"),
			medianCell(al.p99, "%.0f"), medianCell(ag.p99, "%.0f"), medianCell(ca.p99, "%.0f"), medianCell(be.p99, "%.0f"),
			medianCell(ag.p99Ratio, "%.2f×"), medianCell(be.p99Ratio, "%.2f×"), medianCell(be.calmP99Ratio, "%.2f×"),
			fmt.Sprintf("%d / %d / %d", a.lost, a.ooo, a.dups)})
	}
	return rows
}

// countsText writes counts as "k1: n1, k2: n2" in key order.
func countsText(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// hasSystem reports whether rep measured system.
func hasSystem(rep *Report, system string) bool {
	for _, m := range rep.Measurements {
		if m.System == system {
			return true
		}
	}
	return false
}

// markdownTable writes rows (the first is the header) with aligned columns.
func markdownTable(w io.Writer, rows [][]string) error {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			b.WriteString(" " + c + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)) + " |")
		}
		return b.String()
	}
	var b strings.Builder
	b.WriteString(line(rows[0]) + "\n")
	sep := make([]string, len(widths))
	for i, n := range widths {
		sep[i] = strings.Repeat("-", n)
	}
	b.WriteString(line(sep) + "\n")
	for _, r := range rows[1:] {
		b.WriteString(line(r) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Suite is what one invocation measured: a run per server configuration
// (and per repetition), in the order measured.
type Suite struct {
	Runs []*Report `json:"runs"`
}

// writeSuite prints, when there are several runs, a summary with the median
// figures of each server configuration, then every run's own tables headed
// by its server settings.
func writeSuite(w io.Writer, suite *Suite) error {
	if len(suite.Runs) > 1 {
		if _, err := fmt.Fprintf(w, "\nSummary: median of the runs of each server configuration (× ceiling: median of each run's own ratio)\n\n"); err != nil {
			return err
		}
		if err := markdownTable(w, summaryRows(suite)); err != nil {
			return err
		}
		if rows := noisySummaryRows(suite); len(rows) > 1 {
			if _, err := fmt.Fprintf(w, "\nNoisy neighbours: median of the runs of each server configuration (× alone: median of each run's own ratio)\n\n"); err != nil {
				return err
			}
			if err := markdownTable(w, rows); err != nil {
				return err
			}
		}
	}
	for _, rep := range suite.Runs {
		settings := rep.Server.Settings
		if settings == "" {
			settings = "settings not recorded"
		}
		if _, err := fmt.Fprintf(w, "\nTemporal %s: %s\nHerald commit %s, started %s, %d CPUs, Go %s\n\n",
			rep.TemporalAddress, settings, rep.Commit, rep.Started.Format(time.RFC3339), rep.CPUs, rep.GoVersion); err != nil {
			return err
		}
		if len(rep.WorkerEnv) > 0 {
			if _, err := fmt.Fprintf(w, "Herald's worker with %s\n\n", strings.Join(rep.WorkerEnv, " ")); err != nil {
				return err
			}
		}
		if err := writeTables(w, rep); err != nil {
			return err
		}
	}
	return nil
}

// summaryRows are the rows (header first) of the summary: per server
// configuration and shape, the median over runs of the ceiling's and
// Herald's throughput, of Herald's ratio and latency percentiles, and the
// total of lost, out of order and duplicate deliveries.
func summaryRows(suite *Suite) [][]string {
	batched, floor, shaped := false, false, false
	for _, rep := range suite.Runs {
		batched = batched || hasSystem(rep, SystemBatched)
		floor = floor || hasSystem(rep, SystemFloor)
		shaped = shaped || hasSystem(rep, SystemShapedFloor)
	}
	header := []string{"server", "shape", "load", "runs", "ceiling deliveries/s"}
	if batched {
		header = append(header, "batched deliveries/s")
	}
	if floor {
		header = append(header, "floor deliveries/s")
	}
	if shaped {
		header = append(header, "shaped floor deliveries/s")
	}
	header = append(header, "Herald deliveries/s", "× ceiling")
	if batched {
		header = append(header, "× batched")
	}
	if floor {
		header = append(header, "× floor")
	}
	if shaped {
		header = append(header, "× shaped floor")
	}
	rows := [][]string{append(header, "Herald p50 ms", "Herald p99 ms", "lost / out of order / duplicates")}
	type key struct{ server, shape string }
	var order []key
	type acc struct {
		shape                                             Shape
		runs                                              int
		ceiling, batched, floor, shaped, herald, p50, p99 []float64
		ratio, ratioBatched, ratioFloor, ratioShaped      []float64
		lost, ooo, dups                                   int
	}
	accs := map[key]*acc{}
	for _, rep := range suite.Runs {
		for _, m := range rep.Measurements {
			k := key{rep.Server.Name, m.Shape.Name}
			a := accs[k]
			if a == nil {
				a = &acc{shape: m.Shape}
				accs[k] = a
				order = append(order, k)
			}
			a.lost += m.Lost
			a.ooo += m.OutOfOrder
			a.dups += m.Duplicates
			switch m.System {
			case SystemCeiling:
				a.ceiling = append(a.ceiling, m.PerSecond)
			case SystemBatched:
				a.batched = append(a.batched, m.PerSecond)
			case SystemFloor:
				a.floor = append(a.floor, m.PerSecond)
			case SystemShapedFloor:
				a.shaped = append(a.shaped, m.PerSecond)
			case SystemHerald:
				a.runs++
				a.herald = append(a.herald, m.PerSecond)
				a.p50 = append(a.p50, m.LatencyMS.P50)
				a.p99 = append(a.p99, m.LatencyMS.P99)
				if m.Ratio > 0 {
					a.ratio = append(a.ratio, m.Ratio)
				}
				if m.RatioBatched > 0 {
					a.ratioBatched = append(a.ratioBatched, m.RatioBatched)
				}
				if m.RatioFloor > 0 {
					a.ratioFloor = append(a.ratioFloor, m.RatioFloor)
				}
				if m.RatioShapedFloor > 0 {
					a.ratioShaped = append(a.ratioShaped, m.RatioShapedFloor)
				}
			}
		}
	}
	for _, k := range order {
		a := accs[k]
		row := []string{k.server, k.shape, a.shape.String(), fmt.Sprint(a.runs), medianCell(a.ceiling, "%.1f")}
		if batched {
			row = append(row, medianCell(a.batched, "%.1f"))
		}
		if floor {
			row = append(row, medianCell(a.floor, "%.1f"))
		}
		if shaped {
			row = append(row, medianCell(a.shaped, "%.1f"))
		}
		row = append(row, medianCell(a.herald, "%.1f"), medianCell(a.ratio, "%.2f×"))
		if batched {
			row = append(row, medianCell(a.ratioBatched, "%.2f×"))
		}
		if floor {
			row = append(row, medianCell(a.ratioFloor, "%.2f×"))
		}
		if shaped {
			row = append(row, medianCell(a.ratioShaped, "%.2f×"))
		}
		rows = append(rows, append(row, medianCell(a.p50, "%.0f"), medianCell(a.p99, "%.0f"),
			fmt.Sprintf("%d / %d / %d", a.lost, a.ooo, a.dups)))
	}
	return rows
}

// isReference reports whether system is one Herald is measured against
// (a ceiling or the floor) rather than Herald itself.
func isReference(system string) bool {
	return system == SystemCeiling || system == SystemBatched || system == SystemFloor || system == SystemShapedFloor
}

// medianCell is a table cell of the median of vs in format, empty when
// there are none.
func medianCell(vs []float64, format string) string {
	if len(vs) == 0 {
		return ""
	}
	return fmt.Sprintf(format, median(vs))
}

// median of vs (the mean of the middle two for an even count).
func median(vs []float64) float64 {
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// readJSON reads results written by writeJSON, or a single run's report as
// earlier versions wrote it.
func readJSON(path string) (*Suite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var suite Suite
	if err := json.Unmarshal(b, &suite); err != nil {
		return nil, fmt.Errorf("read results %s: %w", path, err)
	}
	if len(suite.Runs) == 0 {
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("read results %s: %w", path, err)
		}
		if len(rep.Measurements) == 0 {
			return nil, fmt.Errorf("read results %s: no measurements", path)
		}
		suite.Runs = []*Report{&rep}
	}
	return &suite, nil
}

// writeJSON writes the results to path, indented.
func writeJSON(path string, suite *Suite) error {
	b, err := json.MarshalIndent(suite, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
