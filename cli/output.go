package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// table writes aligned columns. Cells are cleaned of tabs and line breaks so
// that a stray value cannot break the layout.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cleanCell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// cleanCell makes a value safe to print on a terminal, in a table or on a
// line of its own: tabs and line breaks become spaces, and every other
// control or invisible formatting character (escape sequences that recolour
// or retitle the terminal, a carriage return hiding what came before, bidi
// overrides reordering the text) is dropped. Values such as a subscriber's
// error text come from outside Herald. Invalid UTF-8 becomes U+FFFD.
func cleanCell(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' || r == '\u0085' || r == '\u2028' || r == '\u2029':
			return ' '
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			return -1
		}
		return r
	}, s)
}

// dash stands in for an empty optional value in a table.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatTime shows a time in local time to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

// formatAge shows a duration rounded to what a reader cares about.
func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// plural returns "1 event" or "2 events".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// stateText shows a subscription state with its reason: "blocked
// (event_not_declared)".
func stateText(state, reason string) string {
	if reason == "" {
		return state
	}
	return state + " (" + reason + ")"
}

// nonNil turns a nil slice into an empty one, so JSON shows [] and not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
