package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"herald/workflows"
)

// signalOp is one of the operator signals of SPEC §5 as a starter command.
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
	case op.name == workflows.SignalRedeliver && req.eventID != "":
		return redeliverEvent(inv, req)
	}
	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	if req.allFailed {
		return signalAllFailed(inv, tc, req)
	}
	return signalOne(inv, tc, req)
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

// signalJSON is the JSON of a single signal command.
type signalJSON struct {
	WorkflowID      string `json:"workflowId"`
	Signal          string `json:"signal"`
	Payload         any    `json:"payload"`
	TemporalCommand string `json:"temporalCommand"`
}

// signalOne sends the signal to one key's workflow.
func signalOne(inv *invocation, tc *temporalConn, req signalRequest) error {
	id := workflows.DeliveryID(req.subscription, req.subject)
	payload := req.payload()
	if err := tc.signal(inv.ctx, id, req.op.name, payload); err != nil {
		return temporalError("signal "+req.op.name+" to", id, err)
	}
	command := tc.signalCommand(id, req.op.name, payload)
	if inv.json {
		return writeJSON(inv.stdout, signalJSON{WorkflowID: id, Signal: req.op.name, Payload: payload, TemporalCommand: command})
	}
	w := inv.stdout
	fmt.Fprintf(w, "sent %s to %s\n", req.op.name, id)
	fmt.Fprintf(w, "  payload: %s\n", compactPayload(payload))
	fmt.Fprintf(w, "The workflow records what it did in the audit trail: starter audit --target %s\n", shellQuote(id))
	fmt.Fprintf(w, "Same with the Temporal CLI:\n  %s\n", command)
	return nil
}

// keyResult is the outcome of one signal of a bulk command.
type keyResult struct {
	WorkflowID string `json:"workflowId"`
	Subject    string `json:"subject"`
	// Result is "ok", "gone" (the workflow completed meanwhile: nothing left
	// to do) or "error".
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// bulkJSON is the JSON of redeliver|cancel --all-failed.
type bulkJSON struct {
	Subscription    string      `json:"subscription"`
	Signal          string      `json:"signal"`
	Payload         any         `json:"payload"`
	Keys            []keyResult `json:"keys"`
	TemporalCommand string      `json:"temporalCommand"`
}

// signalAllFailed sends the signal to every key of the subscription whose
// HeraldStatus is failed. Safe to re-run: a key that recovered meanwhile is
// no longer listed, and a workflow that completed meanwhile is reported as
// gone. It fails (exit 1) only when a signal could not be sent.
func signalAllFailed(inv *invocation, tc *temporalConn, req signalRequest) error {
	query := deliveryFilter{Subscription: req.subscription, Status: workflows.StatusFailed}.query()
	keys, _, err := tc.listDeliveries(inv.ctx, query, 0)
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
			results[i] = keyResult{WorkflowID: k.WorkflowID, Subject: k.Subject, Result: "ok"}
			switch err := tc.signal(inv.ctx, k.WorkflowID, req.op.name, payload); {
			case err == nil:
			case isNotFound(err):
				results[i].Result = "gone"
			default:
				results[i].Result, results[i].Error = "error", err.Error()
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, r := range results {
		if r.Result == "error" {
			failed++
		}
	}
	command := tc.batchSignalCommand(query, req.op.name, payload, req.reason)
	if inv.json {
		if err := writeJSON(inv.stdout, bulkJSON{Subscription: req.subscription, Signal: req.op.name,
			Payload: payload, Keys: nonNil(results), TemporalCommand: command}); err != nil {
			return err
		}
	} else {
		printBulk(inv, req, results, failed, command)
	}
	if failed > 0 {
		return &reportedError{code: ExitError}
	}
	return nil
}

func printBulk(inv *invocation, req signalRequest, results []keyResult, failed int, command string) {
	w := inv.stdout
	if len(results) == 0 {
		fmt.Fprintf(w, "no failed keys in %s (Temporal's list lags a second or two behind status changes)\n", req.subscription)
		return
	}
	fmt.Fprintf(w, "%s to the failed keys of %s, payload %s:\n", req.op.name, req.subscription, compactPayload(req.payload()))
	t := newTable(w, "  SUBJECT", "RESULT")
	for _, r := range results {
		switch r.Result {
		case "gone":
			t.row("  "+r.Subject, "gone (the workflow completed meanwhile; nothing to do)")
		case "error":
			t.row("  "+r.Subject, "error: "+r.Error)
		default:
			t.row("  "+r.Subject, r.Result)
		}
	}
	_ = t.flush()
	fmt.Fprintf(w, "%s signalled, %d failed\n", plural(len(results)-failed, "key"), failed)
	fmt.Fprintf(w, "Same with the Temporal CLI (a batch job):\n  %s\n", command)
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
