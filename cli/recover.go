package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"herald/keyops"
	"herald/reason"
	"herald/workflows"
)

// signalOp is one of the operator signals of docs/design.md#the-delivery-workflow as a starter command.
type signalOp struct {
	// name is both the command and the signal name.
	name string
	// event and all tell whether the command takes --event and --all;
	// allFailed whether it takes --subscription ID --all-failed; window
	// whether it takes a replay window (--since, --until, --dry-run).
	event, all, allFailed, window bool
}

var (
	opRedeliver = signalOp{name: workflows.SignalRedeliver, event: true, allFailed: true, window: true}
	opCancel    = signalOp{name: workflows.SignalCancel, event: true, all: true, allFailed: true}
	opPause     = signalOp{name: workflows.SignalPause}
	opResume    = signalOp{name: workflows.SignalResume}
)

func runRedeliver(inv *invocation, args []string) error { return runSignal(inv, opRedeliver, args) }
func runCancel(inv *invocation, args []string) error    { return runSignal(inv, opCancel, args) }
func runPause(inv *invocation, args []string) error     { return runSignal(inv, opPause, args) }
func runResume(inv *invocation, args []string) error    { return runSignal(inv, opResume, args) }

// signalRequest is a parsed operator signal command.
type signalRequest struct {
	op           signalOp
	subscription string
	subject      string
	eventID      string
	all          bool
	allFailed    bool
	actor        string
	reason       string
	// window is the replay window of redeliver --since; nil otherwise.
	window *replayWindow
	// everySubscription is redeliver --event ID without --subscription and
	// --subject: the event goes again to every subscription of its type,
	// for its own subject key. app is then its source app (--app), when
	// events of several apps have the id.
	everySubscription bool
	app               string
}

// payload is the signal's JSON payload.
func (r signalRequest) payload() any {
	switch r.op.name {
	case workflows.SignalRedeliver:
		return workflows.RedeliverSignal{EventID: r.eventID, Actor: r.actor, Reason: r.reason}
	case workflows.SignalCancel:
		return workflows.CancelSignal{EventID: r.eventID, All: r.all, Actor: r.actor, Reason: r.reason}
	}
	return workflows.ControlSignal{Actor: r.actor, Reason: r.reason}
}

// runSignal parses and carries out one operator signal command.
func runSignal(inv *invocation, op signalOp, args []string) error {
	req, err := inv.parseSignal(op, args)
	if err != nil {
		return err
	}
	// Both read the event log first, and start the key's workflow when it
	// does not run.
	switch {
	case req.window != nil:
		return redeliverWindow(inv, req)
	case req.everySubscription:
		return redeliverEventEverywhere(inv, req)
	case op.name == workflows.SignalRedeliver && req.eventID != "":
		return redeliverEvent(inv, req)
	case op.name == workflows.SignalRedeliver:
		// A paused or blocked subscription's key would take the
		// redelivery and wait unseen: refuse it first (exit 2).
		if err := checkRedeliverable(inv, req.subscription); err != nil {
			return err
		}
	}
	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	if req.allFailed {
		return updateAllFailed(inv, tc, req)
	}
	return updateOne(inv, tc, req)
}

func (inv *invocation) parseSignal(op signalOp, args []string) (signalRequest, error) {
	req := signalRequest{op: op}
	fs := inv.newFlags(op.name)
	fs.StringVar(&req.subscription, "subscription", "", "the subscription id")
	fs.StringVar(&req.subject, "subject", "", "the subject key")
	if op.event {
		usage := "cancel this queued event instead of the failed head"
		if op.name == workflows.SignalRedeliver {
			usage = "deliver this event of the log again, before the queue (starts the key's workflow if it is not running)"
		}
		fs.StringVar(&req.eventID, "event", "", usage)
	}
	if op.all {
		fs.BoolVar(&req.all, "all", false, "cancel everything queued for the key")
	}
	if op.allFailed {
		fs.BoolVar(&req.allFailed, "all-failed", false, "act on every failed key of --subscription (instead of --subject)")
	}
	if op.name == workflows.SignalRedeliver {
		fs.StringVar(&req.app, "app", "", "with --event alone: the event's source app, when events of several apps have the id")
	}
	var since, until string
	var dryRun bool
	if op.window {
		fs.StringVar(&since, "since", "", "replay every event of --subscription received since TIME (RFC 3339, or a duration back from now such as 2h)")
		fs.StringVar(&until, "until", "", "with --since: only events received before TIME (default now)")
		fs.BoolVar(&dryRun, "dry-run", false, "with --since: show what would be queued again, send nothing")
	}
	fs.StringVar(&req.reason, "reason", "", "why (recorded in the audit trail)")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return req, err
	}
	if err := wantArgs(op.name, rest); err != nil {
		return req, err
	}
	req.actor = inv.actor(*actor)
	if set := setFlags(fs); set["app"] && (req.eventID == "" || req.subscription != "" || req.subject != "") {
		return req, usagef(op.name, "%s: --app goes with --event ID alone (the subscription names the app otherwise)", op.name)
	}
	if op.window {
		set := setFlags(fs)
		if set["since"] {
			w, err := parseWindow(op.name, req, since, until, time.Now())
			if err != nil {
				return req, err
			}
			w.dryRun = dryRun
			req.window = &w
			return req, nil
		}
		switch {
		case set["until"]:
			return req, usagef(op.name, "%s: --until needs --since (a replay window is --since TIME [--until TIME])", op.name)
		case set["dry-run"]:
			return req, usagef(op.name, "%s: --dry-run goes with a replay window (--since TIME)", op.name)
		}
	}
	switch {
	case op.name == workflows.SignalRedeliver && req.eventID != "" && req.subscription == "" && req.subject == "" &&
		!req.allFailed:
		req.everySubscription = true
		return req, nil
	case req.allFailed && req.subscription == "":
		return req, usagef(op.name, "%s: --all-failed needs --subscription", op.name)
	case req.allFailed && (req.subject != "" || req.eventID != "" || req.all):
		return req, usagef(op.name, "%s: --all-failed acts on the failed head of every failed key; it takes no --subject, --event or --all", op.name)
	case req.allFailed:
		return req, checkSubscriptionFlag(op.name, req.subscription)
	case req.all && req.eventID != "":
		return req, usagef(op.name, "%s: give --event or --all, not both", op.name)
	}
	_, err = deliveryIDFromFlags(op.name, req.subscription, req.subject)
	return req, err
}

// opJSON is the JSON of a single-key operator command.
type opJSON struct {
	WorkflowID string `json:"workflowId"`
	Update     string `json:"update"`
	Payload    any    `json:"payload"`
	// Result is the workflow's answer; nil when it rejected the request.
	Result *workflows.OpResult `json:"result,omitempty"`
	// Rejected is the workflow's reason for refusing a malformed request.
	Rejected string `json:"rejected,omitempty"`
	// TemporalCommand runs the same Update with the temporal CLI;
	// SignalCommand sends the same action as a signal (no answer).
	TemporalCommand string `json:"temporalCommand"`
	SignalCommand   string `json:"signalCommand"`
}

// updateOne runs the operator Update on one key's workflow and reports what
// it did: exit 0 when something changed, 2 when there was nothing to do or
// the workflow rejected the request.
func updateOne(inv *invocation, tc *temporalConn, req signalRequest) error {
	id := workflows.DeliveryID(req.subscription, req.subject)
	payload := req.payload()
	out := opJSON{WorkflowID: id, Update: req.op.name, Payload: payload,
		TemporalCommand: tc.updateCommand(id, req.op.name, payload),
		SignalCommand:   tc.signalCommand(id, req.op.name, payload)}
	// A key with no run gets one that takes a resume or a pause when
	// PostgreSQL says so (keyops.StartsKey).
	ask := keyops.StartsKey(req.op.name)
	res, err := keyops.Act(inv.ctx, tc, id, req.op.name, payload, func(ctx context.Context) (workflows.Params, bool, error) {
		params, ok, err := keyStart(ctx, inv, req.subscription, req.subject, ask)
		if ok {
			// The same with the temporal CLI starts the run too.
			out.TemporalCommand = tc.updateWithStartCommand(id, req.op.name, payload, params)
		}
		return params, ok, err
	})
	var rejected *keyops.RejectedError
	switch {
	case errors.As(err, &rejected) && rejected.UnknownUpdate():
		return fmt.Errorf("%s %s: the workflow took no %s update (%s): a run started by an operator takes updates "+
			"once it has its settings, one of an older Herald never; try again, or send the signal (no answer): %s",
			req.op.name, id, req.op.name, rejected.Msg, out.SignalCommand)
	case errors.As(err, &rejected):
		out.Rejected = rejected.Msg
	case errors.As(err, new(*databaseError)):
		return fmt.Errorf("%s %s: %w", req.op.name, id, err)
	case req.op.name == workflows.SignalPause && isNotFound(err):
		return invalidf("no delivery workflow %s, and none was started: the log holds no event of this key "+
			"for a subscription that is not cancelled (check --subscription and --subject)", id)
	case err != nil:
		return temporalError(req.op.name+" (update)", id, err)
	default:
		out.Result = &res
	}
	return reportOp(inv, out)
}

// keyStart says, by ask's answer from PostgreSQL, whether the key's
// workflow is to be started for an operator's Update and, if so, the input
// to start it with (keyops.KeyStart).
func keyStart(ctx context.Context, inv *invocation, subscription, subject string, ask keyops.KeyQuestion) (workflows.Params, bool, error) {
	st, err := inv.openStore()
	if err != nil {
		return workflows.Params{}, false, &databaseError{err}
	}
	defer st.Close()
	ok, err := ask(st, ctx, subscription, subject)
	if err != nil || !ok {
		return workflows.Params{}, false, wrapDatabase(err)
	}
	sub, err := st.GetSubscription(ctx, subscription)
	if err != nil {
		return workflows.Params{}, false, &databaseError{err}
	}
	return keyops.IdentityParams(sub, subject), true, nil
}

// databaseError is PostgreSQL's failure to answer whether a key with no
// run is to get one: reported as the database's, never as Temporal's or a
// worker's (its deadline is a connection's, not an Update's).
type databaseError struct{ err error }

func (e *databaseError) Error() string { return "PostgreSQL: " + e.err.Error() }
func (e *databaseError) Unwrap() error { return e.err }

// wrapDatabase is err as a databaseError; nil stays nil.
func wrapDatabase(err error) error {
	if err == nil {
		return nil
	}
	return &databaseError{err}
}

// reportOp prints the answer of one key's Update and returns the command's
// outcome.
func reportOp(inv *invocation, out opJSON) error {
	if inv.json {
		if err := writeJSON(inv.stdout, out); err != nil {
			return err
		}
		if out.Result == nil || !out.Result.Changed {
			return &reportedError{code: ExitInvalid}
		}
		return nil
	}
	if out.Result == nil {
		return invalidf("%s %s: rejected by the workflow, nothing was done: %s", out.Update, out.WorkflowID, out.Rejected)
	}
	res := out.Result
	if !res.Changed {
		return invalidf("%s %s: nothing to do: %s; the key is %s with %s queued", out.Update, out.WorkflowID,
			reasonText(res.Reason), dash(res.Status), plural(res.Queued, "event"))
	}
	w := inv.stdout
	fmt.Fprintf(w, "%s %s: done\n", out.Update, out.WorkflowID)
	if len(res.Requeued) > 0 {
		fmt.Fprintf(w, "  requeued:  %s (%s)\n", plural(len(res.Requeued), "event"), listIDs(res.Requeued))
	}
	if len(res.Cancelled) > 0 {
		fmt.Fprintf(w, "  cancelled: %s (%s)\n", plural(len(res.Cancelled), "event"), listIDs(res.Cancelled))
	}
	if len(res.Refused) > 0 {
		fmt.Fprintf(w, "  refused:   %s\n", refusedText(res.Refused))
	}
	fmt.Fprintf(w, "  key now:   %s, %s queued\n", dash(res.Status), plural(res.Queued, "event"))
	fmt.Fprintf(w, "Audit trail: starter audit --target %s\n", shellQuote(out.WorkflowID))
	fmt.Fprintf(w, "Same with the Temporal CLI:\n  %s\n", out.TemporalCommand)
	return nil
}

// listedIDs caps the event ids printed in one line.
const listedIDs = 5

// listIDs joins the first event ids of a list.
func listIDs(ids []string) string {
	if len(ids) <= listedIDs {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:listedIDs], ", ") + fmt.Sprintf(", … %d more", len(ids)-listedIDs)
}

// refusedText lists refused event ids with why, in id order.
func refusedText(refused map[string]reason.Code) string {
	ids := slices.Sorted(maps.Keys(refused))
	parts := make([]string, 0, min(len(ids), listedIDs))
	for _, id := range ids[:min(len(ids), listedIDs)] {
		parts = append(parts, id+": "+string(refused[id]))
	}
	if len(ids) > listedIDs {
		parts = append(parts, fmt.Sprintf("… %d more", len(ids)-listedIDs))
	}
	return strings.Join(parts, ", ")
}

// signalCommand is the temporal CLI command line that sends the same signal.
func (tc *temporalConn) signalCommand(id, name string, payload any) string {
	return "temporal workflow signal" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --name " + name + " --input " + shellQuote(compactPayload(payload))
}

// batchSignalCommand is the temporal CLI command line that sends the same
// signal to every workflow matching query, as a batch job.
func (tc *temporalConn) batchSignalCommand(query, name string, payload any, reason string) string {
	s := "temporal workflow signal" + tc.temporalFlags() +
		" --query " + shellQuote(query) + " --name " + name + " --input " + shellQuote(compactPayload(payload))
	if reason != "" {
		s += " --reason " + shellQuote(reason)
	}
	return s + " --yes"
}

// compactPayload is a signal payload as one line of JSON.
func compactPayload(payload any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(payload); err != nil {
		return "{}" // the payload types are plain structs of strings and bools
	}
	return string(bytes.TrimSpace(b.Bytes()))
}
