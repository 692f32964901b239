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
	case "retry-relay":
		return runEventsRetryRelay(inv, rest)
	case "":
		return usagef("events", "events: missing subcommand (show or retry-relay)")
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

	// Relay is present once a signal of the event failed.
	Relay *relayJSON `json:"relay,omitempty"`
}

// relayJSON is the relay's back-off of an event (docs/design.md#the-event-log-and-the-relay).
type relayJSON struct {
	// Attempts counts the failed signals (not counted in a round where
	// Temporal accepted none).
	Attempts  int        `json:"attempts"`
	LastError string     `json:"lastError"`
	NextTry   *time.Time `json:"nextTry,omitempty"`
	// Code is relay_failed once the relay gave up (DeadAt), else empty.
	Code   string     `json:"code,omitempty"`
	DeadAt *time.Time `json:"deadAt,omitempty"`
}

// relayOf is the back-off of ev, or nil when no signal of it failed.
func relayOf(ev store.StoredEvent) *relayJSON {
	if ev.RelayAttempts == 0 && ev.RelayError == "" && ev.RelayDeadAt == nil {
		return nil
	}
	r := &relayJSON{Attempts: ev.RelayAttempts, LastError: ev.RelayError, DeadAt: ev.RelayDeadAt}
	if ev.State == "accepted" {
		r.NextTry = ev.RelayNextTry
	}
	if ev.RelayDeadAt != nil {
		r.Code = store.CodeRelayFailed
	}
	return r
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
	app := fs.String("app", "", "the event's source app, when events of several apps have the id (ids are unique per app)")
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
	ev, err := st.GetAppEvent(inv.ctx, *app, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("event %s is not in the event log (an unknown id, a rejected publish, or removed by retention)", id)
	case errors.Is(err, store.ErrAmbiguousEvent):
		return invalidf("%v: give --app APP", err)
	case err != nil:
		return err
	}
	outcomes, err := st.EventOutcomesOf(inv.ctx, ev.ID, ev.Type, ev.Version)
	if err != nil {
		return err
	}
	out := eventShowJSON{
		Event: eventJSON{ID: ev.ID, Seq: ev.Seq, Type: ev.Type, Version: ev.Version, SourceApp: ev.SourceApp,
			Subject: ev.Subject, ReceivedAt: ev.ReceivedAt, State: ev.State, DispatchedAt: ev.DispatchedAt,
			Envelope: json.RawMessage(ev.Envelope), PublishedVia: ev.PublishedVia, PublishedToken: ev.PublishedToken,
			Relay: relayOf(ev)},
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
	switch {
	case ev.DispatchedAt != nil:
		state += " (" + formatTime(*ev.DispatchedAt) + ")"
	case ev.Relay != nil && ev.Relay.Code != "":
		state += " (" + ev.Relay.Code + ": the relay gave up " + formatTime(*ev.Relay.DeadAt) +
			"; starter events retry-relay " + ev.ID + ")"
	default:
		state += " (not yet handed to the subscriptions' keys)"
	}
	fmt.Fprintf(w, "  state        %s\n", state)
	if r := ev.Relay; r != nil {
		relay := plural(r.Attempts, "failed signal")
		if r.NextTry != nil {
			relay += ", next try " + formatTime(*r.NextTry)
		}
		fmt.Fprintf(w, "  relay        %s\n", relay)
		fmt.Fprintf(w, "  relay error  %s\n", cleanCell(r.LastError))
	}
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

// runEventsRetryRelay gives an event the relay gave up on (relay_failed)
// back to it with fresh attempts, with the later dead events of its type
// and subject, audited.
func runEventsRetryRelay(inv *invocation, args []string) error {
	fs := inv.newFlags("events retry-relay")
	reason := fs.String("reason", "", "why the event is retried (recorded in the audit trail)")
	app := fs.String("app", "", "the event's source app, when events of several apps have the id (ids are unique per app)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("events retry-relay", rest, "ID"); err != nil {
		return err
	}
	id := rest[0]
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.RetryAppRelay(inv.ctx, *app, id, inv.actor(*actor), *reason)
	switch {
	case errors.Is(err, store.ErrAmbiguousEvent):
		return invalidf("%v: give --app APP", err)
	case errors.Is(err, store.ErrNotFound):
		return invalidf("event %s is not in the event log (an unknown id, a rejected publish, or removed by retention)", id)
	case errors.Is(err, store.ErrNotDead):
		return invalidf("event %s is not dead (the relay has not given up on it): nothing to do; starter events show %s", id, id)
	case err != nil:
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, res)
	}
	fmt.Fprintf(inv.stdout, "event %s: given back to the relay after %s (last error: %s)\n",
		res.EventID, plural(res.Attempts, "failed signal"), cleanCell(res.Error))
	if res.Released > 1 {
		fmt.Fprintf(inv.stdout, "  with %s of %s, subject %s, that had died behind it\n",
			plural(int(res.Released-1), "later dead event"), res.Type, cleanCell(res.Subject))
	}
	if res.HeldBy != "" {
		fmt.Fprintf(inv.stdout, "  still held behind the earlier dead event %s: starter events retry-relay %s\n", res.HeldBy, res.HeldBy)
	}
	return nil
}
