package cli

import (
	"fmt"
	"strconv"
	"time"

	"herald/store"
)

// statusRejections is how many recent rejections status shows.
const statusRejections = 10

// statusJSON is the JSON of starter status.
type statusJSON struct {
	Relay          relayLagJSON    `json:"relay"`
	LastRejections []rejectionJSON `json:"lastRejections"`
}

// relayLagJSON is the relay's lag: accepted events not yet handed to Temporal.
type relayLagJSON struct {
	Undispatched     int64   `json:"undispatched"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
}

// rejectionJSON is one recorded rejection.
type rejectionJSON struct {
	Time    time.Time `json:"time"`
	Code    string    `json:"code"`
	App     string    `json:"app"`
	Type    string    `json:"type"`
	Version int       `json:"version,omitempty"`
	Subject string    `json:"subject,omitempty"`
	ID      string    `json:"id,omitempty"`
	Reason  string    `json:"reason"`
}

// runStatus shows how far the relay is behind and the latest rejections.
func runStatus(inv *invocation, args []string) error {
	fs := inv.newFlags("status")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("status", rest); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	lag, err := st.RelayLag(inv.ctx)
	if err != nil {
		return err
	}
	rejected, err := st.LastRejections(inv.ctx, statusRejections)
	if err != nil {
		return err
	}
	if inv.json {
		out := statusJSON{
			Relay:          relayLagJSON{Undispatched: lag.Undispatched, OldestAgeSeconds: lag.OldestAge.Round(time.Millisecond).Seconds()},
			LastRejections: make([]rejectionJSON, 0, len(rejected)),
		}
		for _, r := range rejected {
			out.LastRejections = append(out.LastRejections, rejectionJSON{
				Time: r.ReceivedAt, Code: r.Code, App: r.SourceApp, Type: r.Type, Version: r.Version,
				Subject: r.Subject, ID: r.ID, Reason: r.Reason,
			})
		}
		return writeJSON(inv.stdout, out)
	}
	printStatus(inv, lag, rejected)
	return nil
}

func printStatus(inv *invocation, lag store.Lag, rejected []store.RejectedEvent) {
	w := inv.stdout
	fmt.Fprintln(w, "Relay (accepted events not yet handed to Temporal):")
	if lag.Undispatched == 0 {
		fmt.Fprintln(w, "  undispatched events: 0")
	} else {
		fmt.Fprintf(w, "  undispatched events: %d, the oldest waiting %s\n", lag.Undispatched, formatAge(lag.OldestAge))
	}
	fmt.Fprintf(w, "\nLast rejected events (up to %d, newest first):\n", statusRejections)
	if len(rejected) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	t := newTable(w, "  TIME", "CODE", "APP", "TYPE", "REASON")
	for _, r := range rejected {
		typ := r.Type
		if r.Version != 0 {
			typ += "@" + strconv.Itoa(r.Version)
		}
		t.row("  "+formatTime(r.ReceivedAt), r.Code, dash(r.SourceApp), dash(typ), r.Reason)
	}
	_ = t.flush()
}
