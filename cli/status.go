package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"herald/store"
	"herald/workflows"
)

// statusRejections is how many recent rejections status shows.
const statusRejections = 10

// statusJSON is the JSON of starter status.
type statusJSON struct {
	Relay          relayLagJSON    `json:"relay"`
	LastRejections []rejectionJSON `json:"lastRejections"`
	// RejectedByApp is the total of rejected events per source app over
	// the event log's retention, the app with the most first.
	RejectedByApp []store.AppRejections `json:"rejectedByApp"`
	// Keys counts running delivery workflows per status; Keys.Error says
	// why it could not when Temporal is unreachable.
	Keys keysJSON `json:"keys"`
	// Worker is the worker's readiness.
	Worker workerJSON `json:"worker"`
}

// relayLagJSON is the relay's lag: accepted events not yet handed to
// Temporal, and apart from them those it gave up on (relay_failed).
type relayLagJSON struct {
	Undispatched     int64   `json:"undispatched"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	Dead             int64   `json:"dead"`
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

// runStatus shows how far the relay is behind, the latest rejections, the
// delivery keys per status and whether the worker is ready. It needs the
// database; an unreachable Temporal or worker is shown in the report, which
// still exits 0 (scripts read keys.error and worker.state from --json).
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
	perApp, err := st.RejectionsPerApp(inv.ctx)
	if err != nil {
		return err
	}
	keys := inv.countKeys()
	worker := checkWorker(inv.ctx, inv.workerURL())
	if inv.json {
		relay := relayLagJSON{Undispatched: lag.Undispatched,
			OldestAgeSeconds: lag.OldestAge.Round(time.Millisecond).Seconds(), Dead: lag.Dead}
		out := statusJSON{
			Relay:          relay,
			LastRejections: make([]rejectionJSON, 0, len(rejected)),
			RejectedByApp:  nonNil(perApp),
			Keys:           keys,
			Worker:         worker,
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
	printRejectedByApp(inv.stdout, perApp)
	printKeys(inv.stdout, keys)
	fmt.Fprintf(inv.stdout, "\nWorker (%s): %s\n", worker.URL, worker.text())
	return nil
}

// printRejectedByApp writes the total of rejected events per app.
func printRejectedByApp(w io.Writer, perApp []store.AppRejections) {
	fmt.Fprintln(w, "\nRejected events per app (over the event log's retention):")
	if len(perApp) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	t := newTable(w, "  APP", "REJECTED", "LAST")
	for _, r := range perApp {
		t.row("  "+cleanCell(r.App), strconv.FormatInt(r.Total, 10), formatTime(r.Last))
	}
	_ = t.flush()
}

// printKeys writes the delivery keys per status.
func printKeys(w io.Writer, k keysJSON) {
	fmt.Fprintf(w, "\nDelivery keys (running delivery workflows in Temporal %s, namespace %s):\n", k.Address, k.Namespace)
	switch {
	case !k.Reachable:
		fmt.Fprintf(w, "  Temporal unreachable: %s\n", k.Error)
		return
	case k.Error != "":
		fmt.Fprintf(w, "  could not count them: %s\n", k.Error)
		return
	}
	t := newTable(w, "  STATUS", "KEYS")
	for _, s := range deliveryStatuses {
		t.row("  "+s, strconv.FormatInt(k.ByStatus[s], 10))
	}
	t.row("  total", strconv.FormatInt(k.Total, 10))
	_ = t.flush()
	if n := k.ByStatus[workflows.StatusFailed]; n > 0 {
		fmt.Fprintf(w, "  %s held: starter deliveries --status failed\n", plural(int(n), "failed key"))
	}
	if n := k.ByStatus[workflows.StatusExhausted]; n > 0 {
		fmt.Fprintf(w, "  %s held with no automatic re-arm left: starter deliveries --status exhausted\n", plural(int(n), "exhausted key"))
	}
}

func printStatus(inv *invocation, lag store.Lag, rejected []store.RejectedEvent) {
	w := inv.stdout
	fmt.Fprintln(w, "Relay (accepted events not yet handed to Temporal):")
	if lag.Undispatched == 0 {
		fmt.Fprintln(w, "  undispatched events: 0")
	} else {
		fmt.Fprintf(w, "  undispatched events: %d, the oldest waiting %s\n", lag.Undispatched, formatAge(lag.OldestAge))
	}
	if lag.Dead > 0 {
		fmt.Fprintf(w, "  dead events (relay_failed, they hold their keys): %d; see docs/runbook.md, starter events retry-relay ID\n", lag.Dead)
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
