package cli

import (
	"errors"
	"fmt"

	"herald/store"
	"herald/workflows"
)

// Results of one subscription in redeliver --event ID alone.
const (
	// everyRequeued: the key put the event in front of its queue.
	everyRequeued = "requeued"
	// everySignalled: the key's workflow was started and took the
	// redeliver as a signal (no answer; see the audit trail).
	everySignalled = "signalled"
	// everyUnchanged: the key answered that there was nothing to do
	// (already_queued, filtered, not_dispatched_yet, …).
	everyUnchanged = "unchanged"
	// everyRefused: the subscription is paused or blocked; nothing was sent.
	everyRefused = "refused"
	// everyError: Temporal could not be asked.
	everyError = "error"
)

// everyResultJSON is what became of one subscription's key in redeliver
// --event ID alone.
type everyResultJSON struct {
	Subscription string `json:"subscription"`
	State        string `json:"state"`
	WorkflowID   string `json:"workflowId"`
	// Result is requeued, signalled, unchanged, refused or error.
	Result string `json:"result"`
	// Reason says why a key was unchanged or refused, or the error.
	Reason string `json:"reason,omitempty"`
	// Answer is the key's answer (absent when refused or on an error).
	Answer *redeliverEventJSON `json:"answer,omitempty"`
}

// redeliverEveryJSON is the JSON of redeliver --event ID alone.
type redeliverEveryJSON struct {
	EventID   string            `json:"eventId"`
	EventSeq  int64             `json:"eventSeq"`
	SourceApp string            `json:"sourceApp"`
	Type      string            `json:"type"`
	Version   int               `json:"version"`
	Subject   string            `json:"subject"`
	Results   []everyResultJSON `json:"results"`
}

// redeliverEventEverywhere delivers one event of the log again to every
// subscription of its type and version that is not cancelled (an
// operational event only to the subscription it is about), each on the key
// of the event's subject, with the Update-With-Start of redeliver --event.
// A paused or blocked subscription is refused and listed. It exits 0 when
// at least one key took the event and no key failed, 2 when none took it,
// 1 when Temporal failed for a key.
func redeliverEventEverywhere(inv *invocation, req signalRequest) error {
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	ev, err := st.GetAppEvent(inv.ctx, req.app, req.eventID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return invalidf("event %s is not in the event log (an unknown id, a rejected publish, or removed by retention)", req.eventID)
	case errors.Is(err, store.ErrAmbiguousEvent):
		return invalidf("%v: give --app APP", err)
	case err != nil:
		return err
	}
	subs, err := st.SubscriptionsTo(inv.ctx, ev.Type, ev.Version)
	if err != nil {
		return err
	}
	out := redeliverEveryJSON{EventID: ev.ID, EventSeq: ev.Seq, SourceApp: ev.SourceApp, Type: ev.Type,
		Version: ev.Version, Subject: ev.Subject, Results: []everyResultJSON{}}
	// targets[i] is the subscription of out.Results[i] when it is sent to.
	targets := map[int]store.Subscription{}
	for _, sub := range subs {
		if sub.State == store.StateCancelled ||
			(store.IsHeraldType(ev.Type) && store.OperationalEventApp(ev.Envelope) != sub.App) {
			continue
		}
		r := everyResultJSON{Subscription: sub.ID, State: sub.State, WorkflowID: workflows.DeliveryID(sub.ID, ev.Subject)}
		if refusal := subscriptionRefusal(sub); refusal != nil {
			r.Result, r.Reason = everyRefused, refusal.Error()
		} else {
			targets[len(out.Results)] = sub
		}
		out.Results = append(out.Results, r)
	}
	if len(out.Results) == 0 {
		return invalidf("event %s is a %s@%d event, and no subscription that is not cancelled takes it: nothing to redeliver",
			ev.ID, ev.Type, ev.Version)
	}
	if len(targets) > 0 {
		tc, err := inv.dialTemporal()
		if err != nil {
			return err
		}
		defer tc.Close()
		for i := range out.Results {
			sub, ok := targets[i]
			if !ok {
				continue
			}
			r := &out.Results[i]
			answer, err := redeliverTo(inv, tc, sub, ev, req)
			switch {
			case err != nil:
				r.Result, r.Reason = everyError, err.Error()
				continue
			case answer.SignalledAfterStart:
				r.Result = everySignalled
			case answer.Result == nil:
				r.Result, r.Reason = everyUnchanged, "rejected by the workflow: "+answer.Rejected
			case !answer.Result.Changed:
				r.Result, r.Reason = everyUnchanged, reasonText(answer.Result.Reason)
			default:
				r.Result = everyRequeued
			}
			r.Answer = &answer
		}
	}
	if err := printEvery(inv, out); err != nil {
		return err
	}
	took, failed := 0, 0
	for _, r := range out.Results {
		switch r.Result {
		case everyRequeued, everySignalled:
			took++
		case everyError:
			failed++
		}
	}
	switch {
	case failed > 0:
		return &reportedError{code: ExitError}
	case took == 0:
		return &reportedError{code: ExitInvalid}
	}
	return nil
}

// printEvery prints the result of redeliver --event ID alone.
func printEvery(inv *invocation, out redeliverEveryJSON) error {
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	w := inv.stdout
	fmt.Fprintf(w, "redeliver event %s (seq %d, %s@%d from %s, subject key %s) to every subscription of its type:\n",
		out.EventID, out.EventSeq, out.Type, out.Version, out.SourceApp, cleanCell(out.Subject))
	t := newTable(w, "  SUBSCRIPTION", "STATE", "RESULT")
	for _, r := range out.Results {
		result := r.Result
		if r.Reason != "" {
			result += ": " + r.Reason
		}
		t.row("  "+r.Subscription, r.State, result)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Each key records what it did in the audit trail: starter audit --action %s --target WORKFLOW-ID\n",
		workflows.AuditDeliveryRedelivered)
	return nil
}
