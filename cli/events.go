package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"herald/store"
)

// runEvents runs the events subcommands.
func runEvents(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "show":
		return runEventsShow(inv, rest)
	case "":
		return usagef("events", "events: missing subcommand (show)")
	}
	return usagef("events", "events: unknown subcommand %q", sub)
}

// eventJSON is one event of the log as events show prints it.
type eventJSON struct {
	ID           string          `json:"id"`
	Seq          int64           `json:"seq"`
	Type         string          `json:"type"`
	Version      int             `json:"version"`
	SourceApp    string          `json:"sourceApp"`
	Subject      string          `json:"subject"`
	ReceivedAt   time.Time       `json:"receivedAt"`
	State        string          `json:"state"`
	DispatchedAt *time.Time      `json:"dispatchedAt,omitempty"`
	Envelope     json.RawMessage `json:"envelope"`

	// PublishedVia is library, cli or http; PublishedToken the API token's name.
	PublishedVia   string `json:"publishedVia,omitempty"`
	PublishedToken string `json:"publishedToken,omitempty"`
}

// eventShowJSON is the JSON of events show.
type eventShowJSON struct {
	Event    eventJSON            `json:"event"`
	Outcomes []store.EventOutcome `json:"outcomes"`
}

// runEventsShow shows one event of the log and what became of it for each
// subscription it was handed to.
func runEventsShow(inv *invocation, args []string) error {
	fs := inv.newFlags("events show")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("events show", rest, "ID"); err != nil {
		return err
	}
	id := rest[0]
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	ev, err := st.GetEvent(inv.ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("event %s is not in the event log (an unknown id, a rejected publish, or removed by retention)", id)
	case err != nil:
		return err
	}
	outcomes, err := st.EventOutcomes(inv.ctx, ev.ID)
	if err != nil {
		return err
	}
	out := eventShowJSON{
		Event: eventJSON{ID: ev.ID, Seq: ev.Seq, Type: ev.Type, Version: ev.Version, SourceApp: ev.SourceApp,
			Subject: ev.Subject, ReceivedAt: ev.ReceivedAt, State: ev.State, DispatchedAt: ev.DispatchedAt,
			Envelope: json.RawMessage(ev.Envelope), PublishedVia: ev.PublishedVia, PublishedToken: ev.PublishedToken},
		Outcomes: nonNil(outcomes),
	}
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	printEvent(inv.stdout, out)
	return nil
}

// printEvent writes the readable view of an event and its outcomes.
func printEvent(w io.Writer, out eventShowJSON) {
	ev := out.Event
	fmt.Fprintf(w, "event %s\n", ev.ID)
	fmt.Fprintf(w, "  seq          %d\n", ev.Seq)
	fmt.Fprintf(w, "  type         %s@%d\n", ev.Type, ev.Version)
	fmt.Fprintf(w, "  source app   %s\n", ev.SourceApp)
	if ev.PublishedVia != "" {
		via := ev.PublishedVia
		if ev.PublishedToken != "" {
			via += " (token " + cleanCell(ev.PublishedToken) + ")"
		}
		fmt.Fprintf(w, "  published    %s\n", via)
	}
	fmt.Fprintf(w, "  subject      %s\n", cleanCell(ev.Subject))
	fmt.Fprintf(w, "  received     %s\n", formatTime(ev.ReceivedAt))
	state := ev.State
	if ev.DispatchedAt != nil {
		state += " (" + formatTime(*ev.DispatchedAt) + ")"
	} else {
		state += " (not yet handed to the subscriptions' keys)"
	}
	fmt.Fprintf(w, "  state        %s\n", state)
	fmt.Fprintln(w, "Envelope:")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, ev.Envelope, "  ", "  "); err != nil {
		pretty.Reset()
		pretty.Write(ev.Envelope)
	}
	fmt.Fprintf(w, "  %s\n", pretty.String())

	if len(out.Outcomes) == 0 {
		fmt.Fprintln(w, "Outcomes: none (no subscription has been handed this event)")
		return
	}
	fmt.Fprintf(w, "Outcomes (%s):\n", plural(len(out.Outcomes), "subscription"))
	for _, o := range out.Outcomes {
		fmt.Fprintf(w, "  %s\n", o.SubscriptionID)
		fmt.Fprintf(w, "    status     %s\n", o.Status)
		fmt.Fprintf(w, "    attempts   %d\n", o.Attempts)
		fmt.Fprintf(w, "    code       %s\n", dash(o.Code))
		if last := joinNonEmpty(": ", o.LastCode, o.LastError); last != "" {
			fmt.Fprintf(w, "    last       %s\n", cleanCell(last))
		}
		times := "queued " + formatTime(o.QueuedAt) + ", updated " + formatTime(o.UpdatedAt)
		if o.DeliveredAt != nil {
			times += ", delivered " + formatTime(*o.DeliveredAt)
		}
		fmt.Fprintf(w, "    times      %s\n", times)
	}
}

// joinNonEmpty joins the parts that are not empty with sep.
func joinNonEmpty(sep string, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}
