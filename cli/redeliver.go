package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"herald/keyops"
	"herald/store"
	"herald/workflows"
)

// replayWindow is the window of redeliver --since: events received in
// [since, until).
type replayWindow struct {
	since, until time.Time
	dryRun       bool
}

// parseWindow checks the flags of a replay window and turns --since and
// --until into times (now is the time durations count back from).
func parseWindow(cmd string, req signalRequest, since, until string, now time.Time) (replayWindow, error) {
	switch {
	case req.eventID != "" || req.allFailed || req.all:
		return replayWindow{}, usagef(cmd, "%s: --since replays a window of the event log; it takes no --event, --all-failed or --all", cmd)
	case req.subscription == "":
		return replayWindow{}, usagef(cmd, "%s: --since needs --subscription", cmd)
	}
	if err := checkSubscriptionFlag(cmd, req.subscription); err != nil {
		return replayWindow{}, err
	}
	if req.subject != "" {
		if err := checkSubjectFlag(cmd, req.subject); err != nil {
			return replayWindow{}, err
		}
	}
	w := replayWindow{until: now}
	var err error
	if w.since, err = parseTimeFlag(cmd, "since", since, now); err != nil {
		return w, err
	}
	if until != "" {
		if w.until, err = parseTimeFlag(cmd, "until", until, now); err != nil {
			return w, err
		}
	}
	switch {
	case w.since.After(now):
		return w, usagef(cmd, "%s: --since %s is in the future", cmd, w.since.Format(time.RFC3339))
	case !w.since.Before(w.until):
		return w, usagef(cmd, "%s: --since (%s) must be before --until (%s)", cmd,
			w.since.Format(time.RFC3339), w.until.Format(time.RFC3339))
	}
	return w, nil
}

// parseTimeFlag reads a TIME: an RFC 3339 time, or a Go duration counted
// back from now ("2h" is two hours ago).
func parseTimeFlag(cmd, flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef(cmd, "%s: --%s %q: a duration counts back from now and must be positive", cmd, flag, s)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, usagef(cmd, "%s: --%s %q is neither an RFC 3339 time (2006-01-02T15:04:05Z) "+
		"nor a duration back from now (2h, 90m)", cmd, flag, s)
}

// deliverableSubscription reads the subscription a redeliver is for; an
// unknown or cancelled one is refused (exit 2), and so is one that is
// paused or blocked (subscriptionRefusal).
func deliverableSubscription(inv *invocation, st *store.Store, id string) (store.Subscription, error) {
	sub, err := st.GetSubscription(inv.ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sub, invalidf("no subscription %s (starter subscriptions lists them)", id)
	case err != nil:
		return sub, err
	}
	return sub, subscriptionRefusal(sub)
}

// subscriptionRefusal says why nothing can be redelivered to sub now, or is
// nil when it is active. The key of a paused or blocked subscription would
// take a redelivery and hold it, without a word, until the subscription is
// active again (docs/design.md#command-line): starter answers instead.
func subscriptionRefusal(sub store.Subscription) error {
	switch sub.State {
	case store.StateCancelled:
		return invalidf("subscription %s is cancelled (%s): nothing is delivered to it any more", sub.ID, dash(sub.Reason))
	case store.StatePaused:
		return invalidf("subscription %s is paused (%s): nothing was sent, since it would wait until the subscription is resumed; "+
			"resume it first (starter subscriptions resume %s), then redeliver", sub.ID, dash(sub.Reason), shellQuote(sub.ID))
	case store.StateBlocked:
		return invalidf("subscription %s is blocked (%s): nothing was sent, since nothing is delivered to it until it is active again "+
			"(starter subscriptions shows its state); redeliver then", sub.ID, dash(sub.Reason))
	}
	return nil
}

// checkRedeliverable refuses a redeliver of a key's failed head, or of
// every failed key, when the subscription is not active.
func checkRedeliverable(inv *invocation, id string) error {
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = deliverableSubscription(inv, st, id)
	return err
}

// redeliverEventJSON is the JSON of redeliver --event.
type redeliverEventJSON struct {
	opJSON
	// StartInput is the workflow's input when the Update starts it.
	StartInput workflows.Params `json:"startInput"`
	EventSeq   int64            `json:"eventSeq"`
	// SignalledAfterStart is set when the workflow, started by this
	// command, could not take the Update yet, and the action was sent as a
	// signal instead: it is applied, but without an answer.
	SignalledAfterStart bool `json:"signalledAfterStart,omitempty"`
}

// redeliverEvent puts one event of the log back in front of its key's
// queue, whether or not the key's workflow runs: the event must be in the
// log and belong to the subscription's type and version and to the subject
// key. It runs the redeliver Update with Update-With-Start, so the key
// answers what it did.
func redeliverEvent(inv *invocation, req signalRequest) error {
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	sub, err := deliverableSubscription(inv, st, req.subscription)
	if err != nil {
		return err
	}
	// Ids are unique per source app; the subscription's type names the app
	// whose event is meant.
	owner, _, _ := strings.Cut(sub.Type, ".")
	ev, err := st.GetAppEvent(inv.ctx, owner, req.eventID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("event %s is not in the event log (an unknown id, a rejected publish, or removed by retention)", req.eventID)
	case err != nil:
		return err
	case ev.Type != sub.Type || ev.Version != sub.Version:
		return invalidf("event %s is a %s@%d event; subscription %s takes %s@%d", ev.ID, ev.Type, ev.Version,
			sub.ID, sub.Type, sub.Version)
	case store.IsHeraldType(ev.Type) && store.OperationalEventApp(ev.Envelope) != sub.App:
		return invalidf("event %s is an operational event about another app's subscription; "+
			"subscription %s receives only those about %s's own", ev.ID, sub.ID, sub.App)
	case ev.Subject != req.subject:
		return invalidf("event %s has the subject key %q, not %q: give --subject %s", ev.ID, ev.Subject, req.subject,
			shellQuote(ev.Subject))
	}

	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	out, err := redeliverTo(inv, tc, sub, ev, req)
	if err != nil {
		return err
	}
	id := out.WorkflowID
	if inv.json {
		if err := writeJSON(inv.stdout, out); err != nil {
			return err
		}
		if !out.SignalledAfterStart && (out.Result == nil || !out.Result.Changed) {
			return &reportedError{code: ExitInvalid}
		}
		return nil
	}
	if out.SignalledAfterStart {
		w := inv.stdout
		fmt.Fprintf(w, "%s %s: started the key's workflow and sent the redeliver as a signal (a new run cannot answer an update yet)\n",
			req.op.name, id)
		fmt.Fprintf(w, "  event:   %s (seq %d, %s@%d, received %s)\n", ev.ID, ev.Seq, ev.Type, ev.Version, formatTime(ev.ReceivedAt))
		fmt.Fprintf(w, "The workflow records what it did in the audit trail: starter audit --target %s\n", shellQuote(id))
		fmt.Fprintf(w, "Same with the Temporal CLI:\n  %s\n", out.SignalCommand)
		return nil
	}
	if out.Result != nil && out.Result.Changed {
		fmt.Fprintf(inv.stdout, "event %s (seq %d, %s@%d, received %s)\n", ev.ID, ev.Seq, ev.Type, ev.Version, formatTime(ev.ReceivedAt))
	}
	return reportOp(inv, out.opJSON)
}

// redeliverTo runs the redeliver Update of event ev with Update-With-Start
// on the key of sub and ev's subject, and answers what the key did.
func redeliverTo(inv *invocation, tc *temporalConn, sub store.Subscription, ev store.StoredEvent, req signalRequest) (redeliverEventJSON, error) {
	id := workflows.DeliveryID(sub.ID, ev.Subject)
	params := keyops.IdentityParams(sub, ev.Subject)
	payload := workflows.RedeliverSignal{EventID: ev.ID, Actor: req.actor, Reason: req.reason}
	out := redeliverEventJSON{StartInput: params, EventSeq: ev.Seq, opJSON: opJSON{
		WorkflowID: id, Update: req.op.name, Payload: payload,
		TemporalCommand: tc.updateWithStartCommand(id, req.op.name, payload, params),
		SignalCommand:   tc.signalWithStartCommand(id, req.op.name, payload, params)}}
	res, err := keyops.UpdateWithStart(inv.ctx, tc, id, req.op.name, payload, params)
	var rejected *keyops.RejectedError
	switch {
	case errors.As(err, &rejected) && rejected.UnknownUpdate():
		// A workflow started without settings asks the worker for them
		// before it takes Updates, and a new run rejects an Update that
		// arrives first. The start went through, and the rejected Update
		// did nothing: the signal, which waits in the workflow's history,
		// does the redeliver.
		if err := tc.signal(inv.ctx, id, req.op.name, payload); err != nil {
			return out, temporalError("signal "+req.op.name+" to", id, err)
		}
		out.SignalledAfterStart = true
	case errors.As(err, &rejected):
		out.Rejected = rejected.Msg
	case err != nil:
		return out, temporalError(req.op.name+" (update-with-start)", id, err)
	default:
		out.Result = &res
	}
	return out, nil
}

// windowJSON is the JSON of redeliver --since.
type windowJSON struct {
	Subscription string             `json:"subscription"`
	Subject      string             `json:"subject,omitempty"`
	Since        time.Time          `json:"since"`
	Until        time.Time          `json:"until"`
	DryRun       bool               `json:"dryRun"`
	Keys         int                `json:"keys"`
	Events       int                `json:"events"`
	Queued       int                `json:"queued"`
	Results      []keyops.WindowKey `json:"results"`
}

// windowFailuresInARow stops a replay window after this many keys in a row
// could not be signalled: Temporal is most likely unreachable, and the rest
// would only fail the same way, one timeout each.
const windowFailuresInARow = 3

// redeliverWindow queues again, per subject key in key order, every accepted
// event of the subscription received in the window, in sequence order: one
// signal-with-start of redeliver per keyops.IDsPerSignal events of a key.
func redeliverWindow(inv *invocation, req signalRequest) error {
	win := req.window
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	sub, err := deliverableSubscription(inv, st, req.subscription)
	if err != nil {
		return err
	}
	keys, err := st.WindowEvents(inv.ctx, sub.ID, req.subject, win.since, win.until)
	if err != nil {
		return err
	}
	out := windowJSON{Subscription: sub.ID, Subject: req.subject, Since: win.since, Until: win.until,
		DryRun: win.dryRun, Keys: len(keys)}
	out.Results, out.Events = keyops.PlanWindow(sub.ID, keys)
	if out.Events == 0 {
		scope := ""
		if req.subject != "" {
			scope = " with subject key " + shellQuote(req.subject)
		}
		return invalidf("no %s@%d events%s were received from %s to %s: nothing to redeliver for %s",
			sub.Type, sub.Version, scope, win.since.Format(time.RFC3339), win.until.Format(time.RFC3339), sub.ID)
	}
	if win.dryRun {
		for i := range out.Results {
			out.Results[i].Result = "dry-run"
		}
		return printWindow(inv, out)
	}

	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	var bar *countBar
	if isTerminal(inv.stderr) {
		bar = newCountBar(inv.stderr, out.Events, "events")
	}
	failedInARow, failed := 0, 0
	for i, k := range keys {
		if failedInARow >= windowFailuresInARow || inv.ctx.Err() != nil {
			break
		}
		r := &out.Results[i]
		params := keyops.IdentityParams(sub, k.Subject)
		sent := out.Queued
		out.Queued += keyops.QueueKey(k, r, func(ids []string) error {
			payload := workflows.RedeliverSignal{EventIDs: ids, Actor: req.actor, Reason: req.reason}
			return tc.signalWithStart(inv.ctx, r.WorkflowID, req.op.name, payload, params)
		}, func(n int) {
			if sent += n; bar != nil {
				bar.update(sent)
			}
		})
		if r.Result == "error" {
			failed++
			failedInARow++
			continue
		}
		failedInARow = 0
	}
	if bar != nil {
		bar.clear()
	}
	if err := printWindow(inv, out); err != nil {
		return err
	}
	if out.Queued < out.Events {
		if failed > 0 {
			fmt.Fprintf(inv.stderr, "starter: %s could not be signalled; re-run for each with --subject (a key queued twice "+
				"delivers its events twice)\n", plural(failed, "key"))
		} else {
			fmt.Fprintln(inv.stderr, "starter: stopped before every key was signalled")
		}
		return &reportedError{code: ExitError}
	}
	return nil
}

// windowListed caps the keys the text output of a window lists.
const windowListed = 50

// printWindow prints the result (or plan) of a replay window.
func printWindow(inv *invocation, out windowJSON) error {
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	w := inv.stdout
	scope := ""
	if out.Subject != "" {
		scope = ", subject key " + cleanCell(out.Subject)
	}
	fmt.Fprintf(w, "redeliver window of %s%s: events received from %s to %s\n", out.Subscription, scope,
		formatTime(out.Since), formatTime(out.Until))
	t := newTable(w, "  SUBJECT", "EVENTS", "SEQ", "RESULT")
	listed := 0
	for _, r := range out.Results {
		// Every key that failed is listed, and the first of the others.
		if r.Result != "error" && listed >= windowListed {
			continue
		}
		listed++
		result := r.Result
		if r.Result == "error" {
			result = "error: " + r.Error
		}
		t.row("  "+r.Subject, fmt.Sprint(r.Events), fmt.Sprintf("%d..%d", r.FirstSeq, r.LastSeq), result)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if n := len(out.Results) - listed; n > 0 {
		fmt.Fprintf(w, "  (%s more; --json lists every key)\n", plural(n, "key"))
	}
	if out.DryRun {
		fmt.Fprintf(w, "would queue %s again on %s (dry run: nothing was sent)\n", plural(out.Events, "event"), plural(out.Keys, "key"))
		return nil
	}
	done := 0
	for _, r := range out.Results {
		if r.Result == "queued" {
			done++
		}
	}
	fmt.Fprintf(w, "queued %s again on %s of %d, in sequence order per key\n", plural(out.Queued, "event"), plural(done, "key"), out.Keys)
	fmt.Fprintf(w, "Each key's workflow (started if it was not running) puts them in front of its queue and writes a %s audit row per signal:\n"+
		"  starter audit --action %s --target %s\n", workflows.AuditDeliveryRedelivered, workflows.AuditDeliveryRedelivered,
		shellQuote(workflows.DeliveryID(out.Subscription, "")+"*"))
	return nil
}
