package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"herald/workflows"
)

// Faults on the key workflows themselves, through Temporal's API, as an
// operator (or a bug in one) could cause them: terminate, reset, and signals
// that Herald's relay never sent. They are on in make chaos unless
// HERALD_CHAOS_WORKFLOW_FAULTS=0.
const workflowFaultsEnv = "HERALD_CHAOS_WORKFLOW_FAULTS"

// workflowFaults reports whether the run injects the key-workflow faults.
func workflowFaults() bool {
	v, err := strconv.ParseBool(os.Getenv(workflowFaultsEnv))
	return err != nil || v
}

// chaosReason is the reason given to Temporal for a terminate or a reset.
const chaosReason = "chaos"

// redriveWait is how long a key whose workflow was terminated may wait for
// the relay to notice and drive it again (the relay re-drives such keys
// within a minute, issue 25). redriveDrain is what the end of the run allows
// on top of its usual drain when a workflow was terminated: one re-drive
// and the deliveries it resumes.
const (
	redriveWait  = time.Minute
	redriveDrain = 90 * time.Second
)

// target is one key workflow a fault acted on.
type target struct {
	Sub, Key string
	RunID    string // the run terminated or reset
	// Status is the state query's status of that run when it ended (for
	// forged signals: the HeraldStatus of the workflow signalled).
	Status string
	// Held is true for a terminated workflow picked as held up by its
	// head (by its HeraldStatus), false for one picked as busy.
	Held bool `json:",omitempty"`
	// InFlight lists the events being posted to the key just before the
	// fault, and the head and queue of the run when it ended: the events
	// whose results the workflow may not have recorded, the only ones the
	// fault may make Herald send again.
	InFlight []string `json:",omitempty"`
	// Forged counts the events of forged signals sent to it.
	Forged int `json:",omitempty"`
	// Pending is when the earliest activity attempt the run had under way
	// when it was terminated started (zero: none). An attempt whose answer
	// an earlier fault lost stays under way until its heartbeat timeout,
	// and a terminate before that keeps it out of every history: the wait
	// it caused is explained from here (explain).
	Pending time.Time `json:",omitempty"`
}

func (t target) name() string { return t.Sub + "/" + t.Key }

// held reports whether a status is one of a key held up by its head.
func held(status string) bool {
	return status == workflows.StatusFailed || status == workflows.StatusRetrying || status == workflows.StatusUnreachable
}

// targets returns a matcher for the fault's keys, for the wait it explains.
func targets(ts []target) func(sub, key string) bool {
	return func(sub, key string) bool {
		return slices.ContainsFunc(ts, func(t target) bool { return t.Sub == sub && t.Key == key })
	}
}

// holdsUp is how long after its end a fault can still hold up a key: a key
// whose workflow it terminated waits for the relay's re-drive.
func (f fault) holdsUp(sub, key string) time.Duration {
	if f.Kind == kindTerminate && targets(f.Targets)(sub, key) {
		return redriveWait
	}
	return 0
}

// attributeKey returns the index of the terminate or reset that struck the
// key's workflow while the event was in flight there (a result the workflow
// may never have recorded), when the event's first 2xx lies from
// replayLookback before that fault to replayGrace after it; -1 if none.
// The closest such fault wins, the later one on a tie.
func attributeKey(faults []fault, sub, key, eventID string, ack time.Time) int {
	found, best := -1, time.Duration(0)
	for i, f := range faults {
		if f.Kind != kindTerminate && f.Kind != kindReset {
			continue
		}
		if ack.Before(f.Start.Add(-replayLookback)) || ack.After(f.End.Add(replayGrace)) {
			continue
		}
		if !slices.ContainsFunc(f.Targets, func(t target) bool {
			return t.Sub == sub && t.Key == key && slices.Contains(t.InFlight, eventID)
		}) {
			continue
		}
		var d time.Duration
		switch {
		case ack.Before(f.Start):
			d = f.Start.Sub(ack)
		case ack.After(f.End):
			d = ack.Sub(f.End)
		}
		if found < 0 || d <= best {
			found, best = i, d
		}
	}
	return found
}

// keyWorkflow is one running Delivery workflow as visibility lists it.
type keyWorkflow struct {
	Sub, Key string
	Status   string
}

// keyWorkflows lists the run's running Delivery workflows with their
// HeraldStatus (visibility lags them by a moment).
func (r *run) keyWorkflows(c client.Client) []keyWorkflow {
	r.t.Helper()
	byID := map[string]subKey{}
	for _, s := range subscriptionIDs {
		for _, key := range r.stream.keys {
			byID[workflows.DeliveryID(s, key)] = subKey{s, key}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc := converter.GetDefaultDataConverter()
	var out []keyWorkflow
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         `WorkflowType = 'Delivery' AND ExecutionStatus = 'Running'`,
			NextPageToken: token,
		})
		if err != nil {
			r.t.Errorf("list delivery workflows: %v", err)
			return out
		}
		for _, ex := range resp.Executions {
			sk, ok := byID[ex.GetExecution().GetWorkflowId()]
			if !ok {
				continue
			}
			kw := keyWorkflow{Sub: sk.Sub, Key: sk.Key}
			if p, ok := ex.GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]; ok {
				_ = dc.FromPayload(p, &kw.Status)
			}
			out = append(out, kw)
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return out
		}
	}
}

// runState reads what one run of a key workflow held: its state query,
// answered for a closed run by replaying its history, within limit.
func runState(c client.Client, id, runID string, limit time.Duration) (workflows.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var st workflows.State
	v, err := c.QueryWorkflow(ctx, id, runID, workflows.QueryState)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// currentRun returns the id of a workflow's current run and whether it is
// still running (a run that ended quiet may be the current one).
func currentRun(c client.Client, id string) (string, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return "", false, fmt.Errorf("describe %s: %w", id, err)
	}
	return desc.WorkflowExecution.RunID, desc.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// runID returns the id of a workflow's current run.
func runID(c client.Client, id string) (string, error) {
	run, _, err := currentRun(c, id)
	return run, err
}

// posting returns, per key workflow, the events the subscriber is being
// sent right now.
func (r *run) posting() map[subKey][]string {
	keyOf := map[string]string{}
	for _, e := range r.stream.accepted() {
		keyOf[e.ID] = e.Key
	}
	out := map[subKey][]string{}
	for _, pk := range r.rec.postingNow() {
		if key, ok := keyOf[pk[1]]; ok {
			sk := subKey{pk[0], key}
			out[sk] = append(out[sk], pk[1])
		}
	}
	return out
}

// struck completes a target after its run ended (terminated or reset): the
// events being posted to it just before, and its head and queue as the
// ended run's state query shows them.
func struck(c client.Client, t target, posting []string) target {
	t.InFlight = append(t.InFlight, posting...)
	st, err := runState(c, workflows.DeliveryID(t.Sub, t.Key), t.RunID, 10*time.Second)
	if err != nil {
		t.Status = "unknown (" + err.Error() + ")"
		return t
	}
	t.Status = st.Status
	if st.Head != nil && !slices.Contains(t.InFlight, st.Head.EventID) {
		t.InFlight = append(t.InFlight, st.Head.EventID)
	}
	for _, q := range st.Queued {
		if !slices.Contains(t.InFlight, q.EventID) {
			t.InFlight = append(t.InFlight, q.EventID)
		}
	}
	return t
}

// pendingSince returns when the earliest activity attempt the run has
// under way started, zero when it has none or the run cannot be described.
func pendingSince(c client.Client, id, runID string) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, id, runID)
	if err != nil || d.RawResponse == nil {
		return time.Time{}
	}
	var since time.Time
	for _, a := range d.RawResponse.GetPendingActivities() {
		if a.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED || a.GetLastStartedTime() == nil {
			continue
		}
		if at := a.GetLastStartedTime().AsTime(); since.IsZero() || at.Before(since) {
			since = at
		}
	}
	return since
}

// pick returns up to n of the workflows that satisfy ok, at random.
func pick(kws []keyWorkflow, n int, ok func(keyWorkflow) bool) []keyWorkflow {
	var out []keyWorkflow
	for _, i := range rand.Perm(len(kws)) {
		if len(out) == n {
			break
		}
		if ok(kws[i]) {
			out = append(out, kws[i])
		}
	}
	return out
}

// terminateKeys terminates, mid-run, nHeld key workflows held up by their
// head (HeraldStatus retrying, unreachable or failed) and nBusy with a POST
// under way, picked at random. To have keys held, the subscriber answers
// 500 to attempts 1-4 of every 5th key from 2 s before until the
// terminations are done; to have POSTs under way, it answers another 5th of
// the keys slowly (0.3-0.9 s) meanwhile. Each target's events are read
// after its run ended, from the ended run's state query, so that nothing
// waits for a workflow task under way.
func (r *run) terminateKeys(name string, nHeld, nBusy int) {
	failing := rule{Mode: modeFail, Match: keysOf(5, 2), UpTo: 4}
	slow := rule{Mode: modeSlow, Match: keysOf(5, 4), UpTo: maxAttempts}
	var ts []target
	r.inject(fault{Name: name, Kind: kindTerminate, Rule: failing}, func() string {
		c := r.temporal()
		defer c.Close()
		r.rec.setRule(name, failing)
		defer r.rec.clearRule(name)
		r.rec.setRule(name+"/slow", slow)
		defer r.rec.clearRule(name + "/slow")
		time.Sleep(2 * time.Second)
		taken := func(sk subKey) bool {
			return slices.ContainsFunc(ts, func(t target) bool { return t.Sub == sk.Sub && t.Key == sk.Key })
		}
		terminate := func(sk subKey, held bool, seen string) bool {
			id := workflows.DeliveryID(sk.Sub, sk.Key)
			run, err := runID(c, id)
			if err != nil {
				r.t.Logf("%s: %v", name, err)
				return false
			}
			posting := r.posting()[sk]
			pending := pendingSince(c, id, run)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = c.TerminateWorkflow(ctx, id, run, chaosReason)
			cancel()
			if endedQuiet(err) {
				r.t.Logf("%s: %s/%s ended quiet before its terminate: %v", name, sk.Sub, sk.Key, err)
				return false
			}
			if err != nil {
				r.t.Errorf("%s: terminate %s/%s: %v", name, sk.Sub, sk.Key, err)
				return false
			}
			t := struck(c, target{Sub: sk.Sub, Key: sk.Key, RunID: run, Held: held, Pending: pending}, posting)
			r.t.Logf("%s: terminated %s (run %s, picked %s; state then %s, %d events held, %d being posted)",
				name, t.name(), run, seen, t.Status, len(t.InFlight), len(posting))
			ts = append(ts, t)
			return true
		}
		kws := r.keyWorkflows(c)
		for _, kw := range pick(kws, nHeld, func(kw keyWorkflow) bool { return held(kw.Status) }) {
			terminate(subKey{kw.Sub, kw.Key}, true, "as held: HeraldStatus "+kw.Status)
		}
		busy := 0
		for deadline := time.Now().Add(5 * time.Second); busy < nBusy && time.Now().Before(deadline); {
			var free []subKey
			for sk := range r.posting() {
				if !taken(sk) {
					free = append(free, sk)
				}
			}
			if len(free) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if terminate(free[rand.N(len(free))], false, "as busy: a POST under way") {
				busy++
			}
		}
		return fmt.Sprintf("terminated %s (of %d running)", describeTargets(ts), len(kws))
	})
	r.setTargets(ts, func(sub, key string) bool { return failing.Match(sub, key) || slow.Match(sub, key) })
}

// resetKey resets one key workflow, one with a POST under way if there is
// one (answers to every 5th key are slow from 2 s before), to its current
// run's first workflow task: Temporal ends the run and starts a new one
// from that point, with the signals received since re-applied.
func (r *run) resetKey(name string) {
	slow := rule{Mode: modeSlow, Match: keysOf(5, 4), UpTo: maxAttempts}
	var ts []target
	r.inject(fault{Name: name, Kind: kindReset}, func() string {
		c := r.temporal()
		defer c.Close()
		r.rec.setRule(name+"/slow", slow)
		defer r.rec.clearRule(name + "/slow")
		time.Sleep(2 * time.Second)
		// A run can be reset to its first completed workflow task only: a
		// run that ends quiet (HERALD_END_QUIET_KEYS) posts in its first
		// task, so a key whose run has none yet, or has ended, is passed
		// over.
		resettable := func(sk subKey) (run string, first int64, ok bool) {
			id := workflows.DeliveryID(sk.Sub, sk.Key)
			run, running, err := currentRun(c, id)
			if err != nil || !running {
				return "", 0, false
			}
			first, err = firstTaskCompleted(c, id, run)
			return run, first, err == nil
		}
		var (
			sk    subKey
			run   string
			first int64
		)
		seen := "as busy: a POST under way"
		for deadline := time.Now().Add(5 * time.Second); sk.Sub == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for k := range r.posting() {
				if rn, f, ok := resettable(k); ok {
					sk, run, first = k, rn, f
					break
				}
			}
		}
		if sk.Sub == "" {
			kws := r.keyWorkflows(c)
			for _, kw := range pick(kws, len(kws), func(keyWorkflow) bool { return true }) {
				if rn, f, ok := resettable(subKey{kw.Sub, kw.Key}); ok {
					sk, run, first, seen = subKey{kw.Sub, kw.Key}, rn, f, "at random: no POST under way"
					break
				}
			}
			if sk.Sub == "" {
				// Every key's run ended quiet or is in its first task: a
				// quiet stretch of the stream, nothing to reset.
				r.t.Logf("%s: skipped: no running key workflow with a completed workflow task", name)
				return "skipped: no running key workflow with a completed workflow task"
			}
		}
		id := workflows.DeliveryID(sk.Sub, sk.Key)
		posting := r.posting()[sk]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := c.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
			Namespace:                 "default",
			WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: run},
			Reason:                    chaosReason,
			WorkflowTaskFinishEventId: first,
			RequestId:                 uuid.NewString(),
		})
		if err != nil {
			r.t.Errorf("%s: reset %s/%s: %v", name, sk.Sub, sk.Key, err)
			return ""
		}
		t := struck(c, target{Sub: sk.Sub, Key: sk.Key, RunID: run}, posting)
		ts = append(ts, t)
		note := fmt.Sprintf("reset %s (picked %s; state then %s, %d events held) to event %d; new run %s",
			t.name(), seen, t.Status, len(t.InFlight), first, resp.GetRunId())
		r.t.Logf("%s: %s", name, note)
		return note
	})
	r.setTargets(ts, slow.Match)
}

// firstTaskCompleted returns the id of the first WorkflowTaskCompleted
// event of a run: a reset to the first workflow task names it.
func firstTaskCompleted(c client.Client, id, runID string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return 0, fmt.Errorf("history of %s: %w", id, err)
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return ev.GetEventId(), nil
		}
	}
	return 0, fmt.Errorf("history of %s: no completed workflow task", id)
}

// endedQuiet reports whether err says the workflow picked as running had
// completed by the time it was acted on: with HERALD_END_QUIET_KEYS a key's
// run completes once it owes nothing, between the listing and the action.
// Without the setting that is a failure like any other.
func endedQuiet(err error) bool {
	var notFound *serviceerror.NotFound
	return err != nil && endQuietKeys() && errors.As(err, &notFound)
}

// Forged signals: each names forgedPerSignal unknown event ids (random UUIDs),
// half with small sequence numbers (1-1000, below the stream's), half with
// huge ones (2^50 and up, far beyond it).
const forgedPerSignal = 300

// forgeSignals sends an event signal of unknown events to n running key
// workflows picked at random, as anyone who can reach Temporal could.
func (r *run) forgeSignals(name string, n int) {
	var ts []target
	r.inject(fault{Name: name, Kind: kindForged}, func() string {
		c := r.temporal()
		defer c.Close()
		for _, kw := range pick(r.keyWorkflows(c), n, func(keyWorkflow) bool { return true }) {
			sig := forgedSignal(forgedPerSignal)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.SignalWorkflow(ctx, workflows.DeliveryID(kw.Sub, kw.Key), "", workflows.SignalEvent, sig)
			cancel()
			if endedQuiet(err) {
				r.t.Logf("%s: %s/%s ended quiet before its signal: %v", name, kw.Sub, kw.Key, err)
				continue
			}
			if err != nil {
				r.t.Errorf("%s: signal %s/%s: %v", name, kw.Sub, kw.Key, err)
				continue
			}
			ts = append(ts, target{Sub: kw.Sub, Key: kw.Key, Status: kw.Status, Forged: len(sig.Events)})
		}
		r.t.Logf("%s: %s", name, describeTargets(ts))
		return fmt.Sprintf("%d unknown events each to %s", forgedPerSignal, describeTargets(ts))
	})
	r.setTargets(ts, nil)
}

// forgedSignal builds an event signal of n unknown events.
func forgedSignal(n int) workflows.EventSignal {
	var sig workflows.EventSignal
	for i := range n {
		seq := int64(1 + rand.N(1000))
		if i%2 == 1 {
			seq = 1<<50 + int64(i)
		}
		sig.Events = append(sig.Events, workflows.Event{ID: uuid.NewString(), Seq: seq})
	}
	return sig
}

// setTargets records the workflows the last fault acted on, and makes it
// explain waits on their keys (and on also's, if not nil).
func (r *run) setTargets(ts []target, also func(sub, key string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &r.faults[len(r.faults)-1]
	f.Targets = ts
	match := targets(ts)
	f.Rule.Match = match
	if also != nil {
		f.Rule.Match = func(sub, key string) bool { return match(sub, key) || also(sub, key) }
	}
}

func describeTargets(ts []target) string {
	if len(ts) == 0 {
		return "no key workflow"
	}
	var names []string
	for _, t := range ts {
		names = append(names, t.name()+" ("+t.Status+")")
	}
	return fmt.Sprintf("%d: %s", len(ts), strings.Join(names, ", "))
}

// workflowFaultCounts summarises the key-workflow faults for the summary.
func workflowFaultCounts(faults []fault) string {
	var terms, termed, heldN, resets, forgeries, signals, events int
	for _, f := range faults {
		switch f.Kind {
		case kindTerminate:
			terms++
			termed += len(f.Targets)
			for _, t := range f.Targets {
				if t.Held {
					heldN++
				}
			}
		case kindReset:
			resets += len(f.Targets)
		case kindForged:
			forgeries++
			signals += len(f.Targets)
			for _, t := range f.Targets {
				events += t.Forged
			}
		}
	}
	return fmt.Sprintf("%d terminated in %d faults (%d held, %d busy); %d reset to their first workflow task; %d forged event signals in %d faults (%d unknown events)",
		termed, terms, heldN, termed-heldN, resets, signals, forgeries, events)
}
