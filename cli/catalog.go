package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"herald/store"
)

// runCatalog lists every declaration with its publisher and subscribers.
func runCatalog(inv *invocation, args []string) error {
	fs := inv.newFlags("catalog")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("catalog", rest); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	entries, err := st.Catalog(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, nonNil(entries))
	}
	if len(entries) == 0 {
		fmt.Fprintln(inv.stdout, "no events declared yet (starter apps apply PATH...)")
		return nil
	}
	t := newTable(inv.stdout, "EVENT", "PUBLISHER", "SUBJECT", "STATUS", "FIRST SEEN", "SUBSCRIBER", "SUBSCRIPTION STATE")
	for _, e := range entries {
		event := e.Type + "@" + strconv.Itoa(e.Version)
		if len(e.Subscribers) == 0 {
			t.row(event, e.App, e.Subject, catalogStatus(e), formatTime(e.FirstSeen), "-", "-")
			continue
		}
		for i, s := range e.Subscribers {
			if i == 0 {
				t.row(event, e.App, e.Subject, catalogStatus(e), formatTime(e.FirstSeen), s.App, stateText(s.State, s.Reason))
			} else {
				t.row("", "", "", "", "", s.App, stateText(s.State, s.Reason))
			}
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	printDescriptions(inv, entries)
	printDeprecatedSubscribers(inv, entries)
	return nil
}

// catalogSchemaShown caps the characters of a data schema the text output
// of catalog shows on its line; --json gives every schema whole.
const catalogSchemaShown = 200

// printDescriptions writes, under the catalog, each event's title,
// description and data schema (on one line, cut at catalogSchemaShown
// characters).
func printDescriptions(inv *invocation, entries []store.CatalogEntry) {
	w := inv.stdout
	fmt.Fprintln(w, "\nevents, their descriptions and data schemas:")
	for _, e := range entries {
		fmt.Fprintf(w, "  %s@%d", e.Type, e.Version)
		if e.Title != "" {
			fmt.Fprintf(w, ": %s", cleanCell(e.Title))
		}
		fmt.Fprintln(w)
		if e.Description != "" {
			fmt.Fprintf(w, "    %s\n", cleanCell(e.Description))
		}
		var b bytes.Buffer
		if err := json.Compact(&b, e.DataSchema); err != nil {
			b.Reset()
			b.Write(e.DataSchema)
		}
		schema := cleanCell(b.String())
		if n := utf8.RuneCountInString(schema); n > catalogSchemaShown {
			schema = string([]rune(schema)[:catalogSchemaShown]) + fmt.Sprintf("… (%d characters; catalog --json shows it whole)", n)
		}
		fmt.Fprintf(w, "    data schema: %s\n", schema)
	}
}

// printDeprecatedSubscribers lists, under the catalog, who still subscribes
// to a deprecated version (cancelled subscriptions left out).
func printDeprecatedSubscribers(inv *invocation, entries []store.CatalogEntry) {
	header := false
	for _, e := range entries {
		if !e.Deprecated || e.Retired {
			continue
		}
		var still []string
		for _, s := range e.Subscribers {
			if s.State != store.StateCancelled {
				still = append(still, s.App)
			}
		}
		if !header {
			fmt.Fprintln(inv.stdout, "\ndeprecated versions and the subscribers still on them:")
			header = true
		}
		who := "no subscribers left"
		if len(still) > 0 {
			who = strings.Join(still, ", ")
		}
		fmt.Fprintf(inv.stdout, "  %s@%d: %s\n", e.Type, e.Version, who)
	}
}

// catalogStatus says whether a declaration can be published and subscribed to.
func catalogStatus(e store.CatalogEntry) string {
	switch {
	case e.Retired:
		return "retired"
	case e.Place:
		return "declared (resource-scoped)"
	case e.Deprecated:
		return "deprecated"
	default:
		return "declared"
	}
}

// runSubscriptions lists subscriptions, or pauses or resumes one.
func runSubscriptions(inv *invocation, args []string) error {
	fs := inv.newFlags("subscriptions")
	app := fs.String("app", "", "list only this app's subscriptions")
	reason := fs.String("reason", "", "why the subscription is paused or resumed (recorded in the audit trail)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	if len(rest) == 0 {
		if set["reason"] || set["actor"] {
			return usagef("subscriptions", "subscriptions: --reason and --actor go with pause or resume")
		}
		return listSubscriptions(inv, *app)
	}
	op := rest[0]
	if op != "pause" && op != "resume" {
		return usagef("subscriptions", "subscriptions: unknown subcommand %q (want pause or resume)", op)
	}
	if set["app"] {
		return usagef("subscriptions", "subscriptions %s: --app only filters the list; give the subscription ID", op)
	}
	if err := wantArgs("subscriptions "+op, rest[1:], "ID"); err != nil {
		return err
	}
	return setSubscriptionPaused(inv, rest[1], op == "pause", inv.actor(*actor), *reason)
}

// subscriptionJSON is one subscription as starter subscriptions --json
// lists it: the subscription and what became of the events handed to it.
type subscriptionJSON struct {
	store.Subscription
	Deliveries store.DeliveryCounts `json:"deliveries"`
}

func listSubscriptions(inv *invocation, app string) error {
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	subs, err := st.ListSubscriptions(inv.ctx, app)
	if err != nil {
		return err
	}
	counts, err := st.SubscriptionCounts(inv.ctx, app)
	if err != nil {
		return err
	}
	if inv.json {
		out := make([]subscriptionJSON, len(subs))
		for i, s := range subs {
			out[i] = subscriptionJSON{Subscription: s, Deliveries: counts[s.ID]}
		}
		return writeJSON(inv.stdout, out)
	}
	if len(subs) == 0 {
		if app != "" {
			fmt.Fprintf(inv.stdout, "app %s has no subscriptions\n", app)
		} else {
			fmt.Fprintln(inv.stdout, "no subscriptions yet")
		}
		return nil
	}
	t := newTable(inv.stdout, "ID", "STATE", "REASON", "SINCE", "QUEUED", "DELIVERED", "FAILED", "CANCELLED", "EXPIRED")
	for _, s := range subs {
		c := counts[s.ID]
		n := func(v int64) string { return strconv.FormatInt(v, 10) }
		t.row(s.ID, s.State, dash(s.Reason), formatTime(s.UpdatedAt), n(c.Queued), n(c.Delivered), n(c.Failed), n(c.Cancelled), n(c.Expired))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(inv.stdout, "Counts are events per outcome (delivered, failed and held, cancelled, expired after the hold expiry),\n"+
		"over the event log's retention; --json adds filtered. Stuck keys: starter deliveries --status failed")
	return nil
}

func setSubscriptionPaused(inv *invocation, id string, paused bool, actor, reason string) error {
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	before, err := st.GetSubscription(inv.ctx, id)
	if err != nil {
		return subscriptionError(id, err)
	}
	sub, err := st.SetSubscriptionPaused(inv.ctx, id, paused, actor, reason)
	if err != nil {
		return subscriptionError(id, err)
	}
	if before.State == sub.State && before.Reason == sub.Reason {
		// An operator command that had nothing to do exits 2
		// (docs/design.md#command-line), as resuming an active one does.
		return invalidf("subscription %s is already %s: nothing changed (starter subscriptions resume %s releases it)",
			sub.ID, stateText(sub.State, sub.Reason), shellQuote(sub.ID))
	}
	if inv.json {
		return writeJSON(inv.stdout, sub)
	}
	fmt.Fprintf(inv.stdout, "%s: %s -> %s\n", sub.ID, stateText(before.State, before.Reason), stateText(sub.State, sub.Reason))
	return nil
}

// subscriptionError words an unknown subscription id for the operator.
func subscriptionError(id string, err error) error {
	var state *store.StateError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("subscription %s not found (ids look like billing:contacts.person.updated@1; see starter subscriptions)", id)
	case errors.As(err, &state):
		return &invalidError{err: state}
	}
	return err
}
