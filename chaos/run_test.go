package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"herald/internal/testenv"
	"herald/workflows"
)

// run is one chaos run: an environment, the recording subscriber, the event
// stream and the faults injected so far.
type run struct {
	t      *testing.T
	env    *env
	rec    *recorder
	stream *stream
	t0     time.Time

	mu     sync.Mutex
	faults []fault
	notes  []string // conditions of the run, for the summary

	streamDone chan error
	load       string // the machine's load average when the stream started
}

// newRun starts the services, the subscriber and applies the manifests; the
// caller starts workers and then the stream.
func newRun(t *testing.T, keys int, rate float64) *run {
	t.Helper()
	e := newEnv(t)
	rec, err := newRecorder(e.keys, []string{"app:billing", "app:audit-log"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.refuse)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := applyManifests(ctx, e.store, rec.URL()); err != nil {
		t.Fatal(err)
	}
	return &run{t: t, env: e, rec: rec, stream: newStream(e.store, keys, rate)}
}

// startStream publishes in the background for d.
func (r *run) startStream(d time.Duration) {
	r.t0 = time.Now()
	r.load = load()
	r.streamDone = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	go func() { r.streamDone <- r.stream.run(ctx, d) }()
}

// at sleeps until d after the stream started.
func (r *run) at(d time.Duration) {
	if wait := time.Until(r.t0.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
}

// inject runs fn as the fault f (its name, kind, rule and whether it loses
// answers) and records its window; fn returns a note for the summary.
func (r *run) inject(f fault, fn func() string) {
	r.t.Helper()
	f.Start = time.Now()
	r.t.Logf("%s: fault %q", rel(f.Start, r.t0), f.Name)
	f.Note = fn()
	f.End = time.Now()
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

// note adds a line to the summary.
func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// subscriberFault makes the subscriber misbehave for d. Its answers that
// Herald misses (late or reset) are recorded as lost, not as 2xx, so the
// fault does not count as one that loses answers.
func (r *run) subscriberFault(name string, ru rule, d time.Duration) {
	r.inject(fault{Name: name, Kind: kindSubscriber, Rule: ru}, func() string {
		r.rec.setRule(name, ru)
		time.Sleep(d)
		r.rec.clearRule(name)
		return ""
	})
}

// killAndRestart SIGKILLs a worker in the middle of deliveries and starts it
// again. Slow answers for a moment make sure some deliveries are in flight.
func (r *run) killAndRestart(w *workerProc, name string) {
	r.inject(fault{Name: name, LosesAnswers: true, Kind: kindWorker}, func() string {
		n := r.midDelivery(name, func() { w.kill() })
		time.Sleep(time.Second)
		r.env.restart(w)
		return fmt.Sprintf("killed with %d deliveries in flight", n)
	})
}

// midDelivery makes every answer slow until at least 3 deliveries are in
// flight (at most 5 s), runs fn, and returns how many were in flight.
func (r *run) midDelivery(name string, fn func()) int {
	r.rec.setRule(name+"/slow", rule{Mode: modeSlow, Match: allKeys, UpTo: maxAttempts})
	n := r.rec.waitInflight(3, 5*time.Second)
	fn()
	r.rec.clearRule(name + "/slow")
	return n
}

// stopGracefully SIGTERMs a worker and checks it exits within limit.
func (r *run) stopGracefully(w *workerProc, limit time.Duration) string {
	took, exitErr, ok := w.term(limit)
	if !ok {
		r.t.Errorf("worker %s did not exit within %v of SIGTERM; log tail:\n%s", w.name, limit, tail(w.logPath, 20))
		return fmt.Sprintf("did NOT exit within %v", limit)
	}
	if exitErr != nil {
		r.t.Errorf("worker %s exited with %v after SIGTERM", w.name, exitErr)
	}
	return fmt.Sprintf("exit after SIGTERM took %.1fs", took.Seconds())
}

// keysOf returns a matcher for every k-th key (by its number), offset by off.
func keysOf(k, off int) func(sub, key string) bool {
	return func(_, key string) bool {
		var n int
		if _, err := fmt.Sscanf(key, "person-%d", &n); err != nil {
			return false
		}
		return n%k == off
	}
}

func allKeys(string, string) bool { return true }

// settle waits for the stream to end and then until every accepted event was
// acknowledged at every subscription, or the deadline passes. A run that
// terminated key workflows waits redriveDrain longer, for the relay to drive
// those keys again.
func (r *run) settle(deadline time.Duration) time.Duration {
	r.t.Helper()
	if err := <-r.streamDone; err != nil {
		r.t.Fatalf("stream: %v", err)
	}
	r.mu.Lock()
	if slices.ContainsFunc(r.faults, func(f fault) bool { return f.Kind == kindTerminate && len(f.Targets) > 0 }) {
		deadline += redriveDrain
	}
	r.mu.Unlock()
	start := time.Now()
	ids := r.stream.ids()
	for r.rec.missing(subscriptionIDs, ids) > 0 {
		if time.Since(start) > deadline {
			r.t.Errorf("%d of %d deliveries still missing %v after the stream ended",
				r.rec.missing(subscriptionIDs, ids), len(ids)*len(subscriptionIDs), deadline)
			r.describeStuck()
			return time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(start)
	r.t.Logf("settled %.1fs after the stream ended", took.Seconds())
	return took
}

// temporal dials the run's Temporal server.
func (r *run) temporal() client.Client {
	r.t.Helper()
	c, err := client.Dial(client.Options{HostPort: r.env.temporalAddr, Namespace: "default", Logger: testenv.QuietLogger{}})
	if err != nil {
		r.t.Fatalf("dial Temporal: %v", err)
	}
	return c
}

// describeStuck logs the state of every delivery workflow that still holds
// events, to explain a timeout.
func (r *run) describeStuck() {
	c := r.temporal()
	defer c.Close()
	n := 0
	for _, s := range subscriptionIDs {
		for _, key := range r.stream.keys {
			st, err := queryState(c, workflows.DeliveryID(s, key), "")
			if err != nil {
				r.t.Logf("query %s/%s: %v", s, key, err)
				continue
			}
			if st.Head == nil || n >= 10 {
				continue
			}
			n++
			r.t.Logf("stuck %s/%s: status %s, head %+v, %d queued", s, key, st.Status, *st.Head, len(st.Queued))
		}
	}
}

func queryState(c client.Client, id, runID string) (workflows.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var st workflows.State
	v, err := c.QueryWorkflow(ctx, id, runID, workflows.QueryState)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// countedRuns are the runs of workflow id whose counters end with them:
// every run but those that continued as new (their successor carries their
// counters on), from visibility.
func (r *run) countedRuns(ctx context.Context, c client.Client, id string) []string {
	r.t.Helper()
	all, err := listRuns(ctx, c, id)
	if err != nil {
		r.t.Fatal(err)
	}
	var runs []string
	for _, ex := range all {
		if ex.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			runs = append(runs, ex.GetExecution().GetRunId())
		}
	}
	return runs
}

// listRuns lists every run of workflow id, from visibility.
func listRuns(ctx context.Context, c client.Client, id string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	var runs []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         fmt.Sprintf("WorkflowId = '%s'", id),
			NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list the runs of %s: %w", id, err)
		}
		runs = append(runs, resp.Executions...)
		if token = resp.NextPageToken; len(token) == 0 {
			return runs, nil
		}
	}
}

// herald is what Herald itself says after the run.
type herald struct {
	Running   int            // Delivery workflows running
	Statuses  map[string]int // HeraldStatus of the running ones
	NotIdle   []string
	Delivered int // sum of the workflows' delivered counters
	Failed    int
	Cancelled int
	// Ended are the keys whose workflow life a terminate or reset ended:
	// their counters start again with the next run, so the counters above
	// leave them out; RowsDelivered counts every key's delivered outcome
	// rows, the state of record, and EndedDelivered those of ended keys.
	Ended          map[string]bool
	RowsDelivered  int
	EndedDelivered int
	AuditRows      map[string]int // by action
	Undispatched   int64
}

// heraldSide reads Temporal visibility, every delivery workflow's state
// query, the audit trail and the relay lag. Visibility is polled until no
// workflow is busy (it lags the workflows by a moment), up to 60 s.
func (r *run) heraldSide(faults []fault) herald {
	r.t.Helper()
	c := r.temporal()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := herald{AuditRows: map[string]int{}, Ended: map[string]bool{}}
	for _, f := range faults {
		if f.Kind == kindTerminate || f.Kind == kindReset {
			for _, t := range f.Targets {
				h.Ended[workflows.DeliveryID(t.Sub, t.Key)] = true
			}
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		h.Running, h.Statuses, h.NotIdle = 0, map[string]int{}, nil
		var token []byte
		for {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Query:         `WorkflowType = 'Delivery' AND ExecutionStatus = 'Running'`,
				NextPageToken: token,
			})
			if err != nil {
				r.t.Fatalf("list delivery workflows: %v", err)
			}
			for _, ex := range resp.Executions {
				status := "(none)"
				if p, ok := ex.GetSearchAttributes().GetIndexedFields()["HeraldStatus"]; ok {
					_ = converter.GetDefaultDataConverter().FromPayload(p, &status)
				}
				h.Running++
				h.Statuses[status]++
				if status != workflows.StatusIdle {
					h.NotIdle = append(h.NotIdle, ex.GetExecution().GetWorkflowId()+" is "+status)
				}
			}
			if token = resp.NextPageToken; len(token) == 0 {
				break
			}
		}
		if len(h.NotIdle) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, s := range subscriptionIDs {
		for _, key := range r.stream.keys {
			id := workflows.DeliveryID(s, key)
			if h.Ended[id] {
				continue
			}
			// A run's counters go on in the run it continues as new into. A
			// key's runs that ended quiet (HERALD_END_QUIET_KEYS) took theirs
			// with them: each such key's closed runs count too.
			runs := []string{""}
			if endQuietKeys() {
				runs = r.countedRuns(ctx, c, id)
			}
			for _, run := range runs {
				st, err := queryState(c, id, run)
				if err != nil {
					r.t.Errorf("query delivery workflow %s/%s run %q: %v", s, key, run, err)
					continue
				}
				h.Delivered += st.Counters.Delivered
				h.Failed += st.Counters.Failed
				h.Cancelled += st.Counters.Cancelled
			}
		}
	}
	delivered, err := r.env.store.Pool.Query(ctx, `
		SELECT subscription_id, subject, count(*) FROM outcomes WHERE status = 'delivered' GROUP BY 1, 2`)
	if err != nil {
		r.t.Fatalf("count delivered outcome rows: %v", err)
	}
	for delivered.Next() {
		var sub, key string
		var n int
		if err := delivered.Scan(&sub, &key, &n); err != nil {
			r.t.Fatalf("count delivered outcome rows: %v", err)
		}
		h.RowsDelivered += n
		if h.Ended[workflows.DeliveryID(sub, key)] {
			h.EndedDelivered += n
		}
	}
	if err := delivered.Err(); err != nil {
		r.t.Fatalf("count delivered outcome rows: %v", err)
	}
	rows, err := r.env.store.Pool.Query(ctx, `SELECT action, count(*) FROM audit GROUP BY action`)
	if err != nil {
		r.t.Fatalf("count audit rows: %v", err)
	}
	for rows.Next() {
		var action string
		var n int
		if err := rows.Scan(&action, &n); err != nil {
			r.t.Fatalf("count audit rows: %v", err)
		}
		h.AuditRows[action] = n
	}
	if err := rows.Err(); err != nil {
		r.t.Fatalf("count audit rows: %v", err)
	}
	lag, err := r.env.store.RelayLag(ctx)
	if err != nil {
		r.t.Fatalf("relay lag: %v", err)
	}
	h.Undispatched = lag.Undispatched
	return h
}

// verify runs every check of the run, prints the summary and fails the test
// on any violated guarantee.
func (r *run) verify(title string, settled time.Duration) {
	r.t.Helper()
	pubs := r.stream.accepted()
	r.mu.Lock()
	faults := append([]fault(nil), r.faults...)
	notes := append([]string(nil), r.notes...)
	r.mu.Unlock()
	arrivals := r.rec.snapshot()
	r.dump(pubs, arrivals, faults)
	an := analyze(subscriptionIDs, pubs, arrivals, faults, r.t0)
	h := r.heraldSide(faults)

	var problems []string // Herald's side; an.Problems are the subscriber's
	if len(h.NotIdle) > 0 {
		problems = append(problems, fmt.Sprintf("temporal: %d delivery workflows not idle after settling: %s",
			len(h.NotIdle), strings.Join(h.NotIdle[:min(len(h.NotIdle), 8)], "; ")))
	}
	// A key whose workflow a fault ended has one again only if it was owed
	// something afterwards; one whose last run ended quiet has none.
	if want := len(subscriptionIDs) * len(r.stream.keys); h.Running > want || (h.Running < want-len(h.Ended) && !endQuietKeys()) {
		problems = append(problems, fmt.Sprintf("temporal: %d delivery workflows running, want one per subscription and key (%d, of which %d ended by a fault may have none)",
			h.Running, want, len(h.Ended)))
	}
	if h.RowsDelivered != an.Expected {
		problems = append(problems, fmt.Sprintf("accounting: %d delivered outcome rows, want exactly %d (each accepted event once per subscription)", h.RowsDelivered, an.Expected))
	}
	if want := an.Expected - h.EndedDelivered; h.Delivered != want {
		problems = append(problems, fmt.Sprintf("accounting: the workflows of keys no fault ended counted %d deliveries, want exactly %d (their delivered outcome rows)", h.Delivered, want))
	}
	if h.Failed != 0 || h.Cancelled != 0 {
		problems = append(problems, fmt.Sprintf("accounting: the workflows counted %d failed and %d cancelled events, want none", h.Failed, h.Cancelled))
	}
	if n := h.AuditRows[workflows.AuditDeliveryFailed]; n != an.Exhausted || n != 0 {
		problems = append(problems, fmt.Sprintf("accounting: %d delivery.failed audit rows, while the subscriber saw %d events exhaust their %d attempts; want 0 and 0 (the subscriber never fails attempt %d or later)",
			n, an.Exhausted, maxAttempts, safeAttempt))
	}
	for _, a := range []string{workflows.AuditDeliveryCancelled, workflows.AuditDeliveryRearmed, workflows.AuditDeliveryRedelivered} {
		if n := h.AuditRows[a]; n != 0 {
			problems = append(problems, fmt.Sprintf("accounting: %d %s audit rows, want none", n, a))
		}
	}
	if h.Undispatched != 0 {
		problems = append(problems, fmt.Sprintf("relay: %d events still undispatched", h.Undispatched))
	}
	xs, histErrs := r.explainWaits(an.Waits, faults)
	longest := explanation{Wait: headWait{}, Unexplained: an.HeadWait}
	var over []explanation
	for _, x := range xs {
		if x.Wait.name() == an.HeadWaitOf {
			longest = x
		}
		if x.Unexplained > baseWait {
			over = append(over, x)
		}
	}
	slices.SortFunc(over, func(a, b explanation) int { return int(b.Unexplained - a.Unexplained) })
	for i, x := range over {
		if i == maxProblemsPerCheck {
			problems = append(problems, fmt.Sprintf("liveness: %d more", len(over)-i))
			break
		}
		problems = append(problems, fmt.Sprintf("liveness: %s waited %.1fs at the head of its key (%s to %s), more than its bound %.1fs: %s",
			x.Wait.name(), x.Wait.Ack.Sub(x.Wait.Start).Seconds(), rel(x.Wait.Start, r.t0), rel(x.Wait.Ack, r.t0), x.Bound().Seconds(), x))
	}

	var b strings.Builder
	writeSummary(&b, title, an, h, r.stream, settled, an.Violations+len(problems), r.t0)
	bound := baseWait
	if longest.Wait.Sub != "" {
		bound = longest.Bound()
	}
	fmt.Fprintf(&b, "longest head wait: %.1fs (%s); bound %.1fs = base %v + what its history shows lost to settings", an.HeadWait.Seconds(), an.HeadWaitOf, bound.Seconds(), baseWait)
	if longest.Wait.Sub != "" {
		fmt.Fprintf(&b, ": %s", longest)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "waits over base:   %d head waits longer than %v, %d of them beyond their bound%s\n", len(an.Waits), baseWait, len(over), histErrs)
	for _, n := range notes {
		fmt.Fprintf(&b, "note:              %s\n", n)
	}
	fmt.Fprintf(&b, "server:            %s\n", serverConfig())
	fmt.Fprintf(&b, "quiet keys end:    %v (%s)\n", endQuietKeys(), endQuietEnv)
	fmt.Fprintf(&b, "machine load:      %s at the start, %s at the end (1, 5, 15 min; %d CPUs)\n", r.load, load(), runtime.NumCPU())
	failures := r.env.persistenceFailures()
	total := 0
	var kinds []string
	for why, n := range failures {
		total += n
		kinds = append(kinds, fmt.Sprintf("%d %s", n, why))
	}
	slices.Sort(kinds)
	fmt.Fprintf(&b, "server writes:     %d workflow-state writes failed in the dev server (%s)\n", total, strings.Join(kinds, ", "))
	b.WriteString(derivation(faults, an.MaxAttempt))
	r.explainWait(&b, longest)
	b.WriteString("\n")
	fmt.Fprint(os.Stdout, b.String())
	for _, p := range slices.Concat(an.Problems, problems) {
		r.t.Error(p)
	}
}

// explainWaits reads the history of every key with a head wait longer than
// the base wait and measures how much of each wait the settings explain.
// It returns a note on histories it could not read.
func (r *run) explainWaits(waits []headWait, faults []fault) ([]explanation, string) {
	c := r.temporal()
	defer c.Close()
	type keyHistory struct {
		spans []span
		runs  []runHistory
		err   error
	}
	hist := map[subKey]keyHistory{}
	var failed []string
	var out []explanation
	for _, w := range waits {
		sk := subKey{w.Sub, w.Key}
		h, ok := hist[sk]
		if !ok {
			h.runs, h.err = r.env.histories(c, workflows.DeliveryID(w.Sub, w.Key))
			if h.err != nil {
				failed = append(failed, h.err.Error())
			}
			for _, run := range h.runs {
				h.spans = append(h.spans, spans(run.Events)...)
			}
			hist[sk] = h
		}
		x := explain(w, h.spans, faults)
		x.Runs, x.HistoryErr = h.runs, h.err
		out = append(out, x)
	}
	if len(failed) > 0 {
		return out, fmt.Sprintf(" (%d histories unreadable: %s)", len(failed), failed[0])
	}
	return out, ""
}

// explainWait prints the longest wait's timeline from its delivery
// workflow's runs, as explainWaits read them (kept in the run's
// directory).
func (r *run) explainWait(b *strings.Builder, x explanation) {
	w := x.Wait
	if w.Sub == "" {
		return
	}
	if x.HistoryErr != nil {
		fmt.Fprintf(b, "history of %s: %v\n", w.name(), x.HistoryErr)
		return
	}
	runs := x.Runs
	fmt.Fprintf(b, "where %s's %.1fs went (%s to %s; histories in the run's directory):\n", w.name(), w.Ack.Sub(w.Start).Seconds(), rel(w.Start, r.t0), rel(w.Ack, r.t0))
	for i, run := range runs {
		lines := timeline(run.Events, w.Start, w.Ack, r.t0)
		if len(lines) == 0 {
			continue
		}
		if len(runs) > 1 {
			fmt.Fprintf(b, "  run %d of %d (%s):\n", i+1, len(runs), run.RunID)
		}
		for _, line := range lines {
			fmt.Fprintf(b, "  %s\n", line)
		}
	}
}

// dump writes the run's records as JSON lines into its directory, which is
// kept when the test fails (or HERALD_CHAOS_KEEP is set), for a closer look.
func (r *run) dump(pubs []published, arrivals []arrival, faults []fault) {
	write := func(name string, rows int, row func(i int) any) {
		f, err := os.Create(filepath.Join(r.env.dir, name))
		if err != nil {
			r.t.Logf("dump %s: %v", name, err)
			return
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		for i := range rows {
			_ = enc.Encode(row(i))
		}
	}
	write("published.ndjson", len(pubs), func(i int) any { return pubs[i] })
	write("arrivals.ndjson", len(arrivals), func(i int) any { return arrivals[i] })
	write("faults.ndjson", len(faults), func(i int) any { return faults[i] })
}

// writeSummary prints the run's summary table.
func writeSummary(out io.Writer, title string, an analysis, h herald, s *stream, settled time.Duration, violations int, t0 time.Time) {
	fmt.Fprintf(out, "\n==== %s ====\n", title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tfault\tstart\tend\tfirst 2xx after\tstalled keys\tall resumed after\tslowest\tre-sent events\tnote")
	for i, r := range an.Recovery {
		first := "none"
		if r.FirstAck >= 0 {
			first = fmt.Sprintf("%.2fs", r.FirstAck.Seconds())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%.1fs\t%s\t%d\t%s\n", i+1, r.Fault.Name, rel(r.Fault.Start, t0), rel(r.Fault.End, t0),
			first, r.Stalled, r.Resumed.Seconds(), r.Slowest, r.Replays, r.Fault.Note)
	}
	_ = tw.Flush()
	s.mu.Lock()
	retries := s.retries
	s.mu.Unlock()
	statuses := make([]string, 0, len(h.Statuses))
	for st, n := range h.Statuses {
		statuses = append(statuses, fmt.Sprintf("%s %d", st, n))
	}
	slices.Sort(statuses)
	actions := make([]string, 0, len(h.AuditRows))
	for a, n := range h.AuditRows {
		actions = append(actions, fmt.Sprintf("%s %d", a, n))
	}
	slices.Sort(actions)
	fmt.Fprintf(out, "faults injected:   %d\n", len(an.Recovery))
	var faults []fault
	for _, r := range an.Recovery {
		faults = append(faults, r.Fault)
	}
	fmt.Fprintf(out, "key workflows:     %s\n", workflowFaultCounts(faults))
	fmt.Fprintf(out, "events:            %d accepted over %d keys (%d publish calls retried during outages)\n", an.Events, an.Keys, retries)
	fmt.Fprintf(out, "deliveries:        %d expected (events × %d subscriptions), %d acknowledged; settled %.1fs after the stream\n",
		an.Expected, len(subscriptionIDs), an.Delivered, settled.Seconds())
	fmt.Fprintf(out, "arrivals:          %d: %d 2xx, %d failed on purpose (500), %d answers lost (late or reset), %d refused by verification\n",
		an.Arrivals, an.ByOutcome[outcomeAck], an.ByOutcome[outcomeNack], an.ByOutcome[outcomeLost], an.ByOutcome[outcomeInvalid])
	fmt.Fprintf(out, "duplicates:        %d: %d after a lost answer, %d re-sent after a 2xx (each attributed to a fault)\n",
		an.DupAfterLost+an.Replays, an.DupAfterLost, an.Replays)
	fmt.Fprintf(out, "attempts:          highest %d of %d; %d attempt numbers re-used; %d events exhausted their attempts\n",
		an.MaxAttempt, maxAttempts, an.AttemptRepeats, an.Exhausted)
	fmt.Fprintf(out, "temporal:          %d delivery workflows running (%s); delivered counters sum %d; failed %d; cancelled %d\n",
		h.Running, strings.Join(statuses, ", "), h.Delivered, h.Failed, h.Cancelled)
	fmt.Fprintf(out, "audit rows:        %s\n", strings.Join(actions, ", "))
	fmt.Fprintf(out, "relay:             %d undispatched\n", h.Undispatched)
	fmt.Fprintf(out, "violations:        %d\n", violations)
}
