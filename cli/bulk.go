package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"herald/keyops"
	"herald/reason"
	"herald/workflows"
)

// Results of one key of a bulk command.
const (
	bulkChanged = "changed"
	bulkNothing = "nothing"
	bulkGone    = "gone"
	bulkError   = "error"
)

// keyResult is the outcome of one key of a bulk command.
type keyResult struct {
	WorkflowID string `json:"workflowId"`
	Subject    string `json:"subject"`
	// Result is "changed", "nothing" (nothing to do; Reason says why),
	// "gone" (the workflow completed meanwhile: nothing left to do) or
	// "error" (the Update failed or was rejected; Error says why).
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Answer is the workflow's answer, when it gave one.
	Answer *workflows.OpResult `json:"answer,omitempty"`
}

// bulkJSON is the JSON of redeliver|cancel --all-failed.
type bulkJSON struct {
	Subscription string      `json:"subscription"`
	Update       string      `json:"update"`
	Payload      any         `json:"payload"`
	Keys         []keyResult `json:"keys"`
	// Counts per result.
	Changed int `json:"changed"`
	Nothing int `json:"nothing"`
	Gone    int `json:"gone"`
	Errors  int `json:"errors"`
	// TemporalCommand is the same action as a Temporal batch job of
	// signals (the temporal CLI has no batch Update; it does not answer).
	TemporalCommand string `json:"temporalCommand"`
}

// updateAllFailed runs the Update on every key of the subscription whose
// HeraldStatus is failed or exhausted and reports each key's answer. Safe to re-run: a
// key that recovered meanwhile is no longer listed, or answers that there is
// nothing to do. Exit 1 when an Update failed, else 0 when a key changed,
// else 2.
func updateAllFailed(inv *invocation, tc *temporalConn, req signalRequest) error {
	query := deliveryFilter{Subscription: req.subscription, AnyStatus: heldStatuses}.query()
	keys, err := tc.listDeliveries(inv.ctx, query)
	if err != nil {
		return err
	}
	payload := req.payload()
	results := make([]keyResult, len(keys))
	sem := make(chan struct{}, stateQueryParallelism)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = bulkOne(inv.ctx, tc, k, req.op.name, payload)
		}()
	}
	wg.Wait()
	out := bulkJSON{Subscription: req.subscription, Update: req.op.name, Payload: payload, Keys: nonNil(results),
		TemporalCommand: tc.batchSignalCommand(query, req.op.name, payload, req.reason)}
	for _, r := range results {
		switch r.Result {
		case bulkChanged:
			out.Changed++
		case bulkNothing:
			out.Nothing++
		case bulkGone:
			out.Gone++
		default:
			out.Errors++
		}
	}
	if inv.json {
		if err := writeJSON(inv.stdout, out); err != nil {
			return err
		}
	} else {
		printBulk(inv, out)
	}
	switch {
	case out.Errors > 0:
		return &reportedError{code: ExitError}
	case out.Changed == 0:
		return &reportedError{code: ExitInvalid}
	}
	return nil
}

// bulkOne runs the Update of a bulk command on one listed key.
func bulkOne(ctx context.Context, tc *temporalConn, k deliveryKey, name string, payload any) keyResult {
	r := keyResult{WorkflowID: k.WorkflowID, Subject: k.Subject}
	res, err := keyops.Update(ctx, tc, k.WorkflowID, name, payload)
	var rejected *keyops.RejectedError
	switch {
	case err == nil && res.Changed:
		r.Result, r.Answer = bulkChanged, &res
	case err == nil:
		r.Result, r.Reason, r.Answer = bulkNothing, string(res.Reason), &res
	case isNotFound(err):
		r.Result = bulkGone
	case errors.As(err, &rejected):
		r.Result, r.Error = bulkError, "rejected: "+rejected.Msg
	case isDeadline(err):
		r.Result, r.Error = bulkError, "no answer in time (is a Herald worker running?)"
	default:
		r.Result, r.Error = bulkError, err.Error()
	}
	return r
}

func printBulk(inv *invocation, out bulkJSON) {
	w := inv.stdout
	if len(out.Keys) == 0 {
		fmt.Fprintf(w, "no failed keys in %s: nothing to do (Temporal's list lags a second or two behind status changes)\n", out.Subscription)
		return
	}
	fmt.Fprintf(w, "%s on the failed keys of %s, payload %s:\n", out.Update, out.Subscription, compactPayload(out.Payload))
	t := newTable(w, "  SUBJECT", "RESULT", "KEY NOW")
	for _, r := range out.Keys {
		now := "-"
		if r.Answer != nil {
			now = fmt.Sprintf("%s, %d queued", dash(r.Answer.Status), r.Answer.Queued)
		}
		switch r.Result {
		case bulkNothing:
			t.row("  "+r.Subject, "nothing to do: "+reasonText(reason.Code(r.Reason)), now)
		case bulkGone:
			t.row("  "+r.Subject, "gone (the workflow completed meanwhile; nothing to do)", now)
		case bulkError:
			t.row("  "+r.Subject, "error: "+r.Error, now)
		default:
			t.row("  "+r.Subject, r.Result, now)
		}
	}
	_ = t.flush()
	fmt.Fprintf(w, "%d changed, %d with nothing to do, %d gone, %d failed\n", out.Changed, out.Nothing, out.Gone, out.Errors)
	fmt.Fprintf(w, "Same as a Temporal batch job of signals (no per-key answer; the temporal CLI has no batch update):\n  %s\n",
		out.TemporalCommand)
}
