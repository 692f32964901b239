package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// writeTables prints the run as three Markdown tables (readable in a
// terminal too): the results, the Temporal actions and task timings of the
// sampled workflows, and the CPU time per delivery of each process.
func writeTables(w io.Writer, rep *Report) error {
	results := [][]string{{"shape", "system", "load", "deliveries", "seconds", "deliveries/s", "× ceiling",
		"p50 ms", "p95 ms", "p99 ms", "lost", "out of order", "duplicates", "worker peak RSS MB"}}
	for _, m := range rep.Measurements {
		ratio, rss := "", ""
		if m.System == SystemHerald {
			rss = fmt.Sprintf("%.0f", m.WorkerPeakRSSMB)
			if m.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f×", m.Ratio)
			}
		}
		results = append(results, []string{m.Shape.Name, m.System, m.Shape.String(),
			fmt.Sprintf("%d/%d", m.Delivered, m.Deliveries), fmt.Sprintf("%.1f", m.Seconds),
			fmt.Sprintf("%.1f", m.PerSecond), ratio,
			fmt.Sprintf("%.0f", m.LatencyMS.P50), fmt.Sprintf("%.0f", m.LatencyMS.P95), fmt.Sprintf("%.0f", m.LatencyMS.P99),
			fmt.Sprint(m.Lost), fmt.Sprint(m.OutOfOrder), fmt.Sprint(m.Duplicates), rss})
	}
	actions := [][]string{{"shape", "system", "signals/event", "workflow tasks/event", "activities/event",
		"SA upserts/event", "history events/event", "publish→signal ms", "WFT wait ms", "WFT run ms",
		"activity wait ms", "activity run ms"}}
	cpu := [][]string{{"shape", "system", "CPU ms/delivery: worker", "temporal", "postgres", "bench", "load avg before→after"}}
	for _, m := range rep.Measurements {
		if a := m.Actions; a != nil && a.Events > 0 {
			actions = append(actions, []string{m.Shape.Name, m.System,
				fmt.Sprintf("%.2f", a.PerEvent(a.Signals)), fmt.Sprintf("%.2f", a.PerEvent(a.WorkflowTasks)),
				fmt.Sprintf("%.2f", a.PerEvent(a.Activities)), fmt.Sprintf("%.2f", a.PerEvent(a.SearchAttributeUpserts)),
				fmt.Sprintf("%.2f", a.PerEvent(a.HistoryEvents)), fmt.Sprintf("%.0f", a.SignalDelayMS),
				fmt.Sprintf("%.0f", a.WorkflowTaskWaitMS), fmt.Sprintf("%.0f", a.WorkflowTaskRunMS),
				fmt.Sprintf("%.0f", a.ActivityWaitMS), fmt.Sprintf("%.0f", a.ActivityRunMS)})
		}
		row := []string{m.Shape.Name, m.System}
		for _, proc := range []string{"worker", "temporal", "postgres", "bench"} {
			v, ok := m.CPUSeconds[proc]
			if !ok || m.Delivered == 0 {
				row = append(row, "")
				continue
			}
			row = append(row, fmt.Sprintf("%.1f", v*1000/float64(m.Delivered)))
		}
		cpu = append(cpu, append(row, fmt.Sprintf("%.1f→%.1f", m.LoadBefore, m.LoadAfter)))
	}
	for i, table := range [][][]string{results, actions, cpu} {
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

// readJSON reads a report written by writeJSON.
func readJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("read results %s: %w", path, err)
	}
	return &rep, nil
}

// writeJSON writes the report to path, indented.
func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
