package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/reason"
	"herald/workflows/payload"
)

// PostgreSQL is the state of record of every key (QueueFromLogVersion).
// What a key owes is its outcome rows that are queued or failed, in
// sequence order; a run's queue is a cache of them:
//
//   - every run (a fresh start, a continue-as-new, a reset, a start after a
//     terminate) begins with StartActivity, which reads the rows and the
//     worker's settings, before it delivers anything; values in the input
//     other than the key's identity, and the relay's hints on how the run
//     ends once it owes nothing (Params.Busy, Params.Quiet, which the read
//     hands back so that the run decides by its recorded result), are
//     ignored;
//   - an event signal is a hint: the events it names become claims, which
//     take no queue space; the queue grows only from rows read with
//     KeyQueue (a cursor over the key's sequence numbers), and claims that
//     name no row of the key are refused and audited once per read, with a
//     count;
//   - an operator's pause is a row too (paused_keys), which StartActivity
//     reads: a run the pause did not happen in still holds the key;
//   - a run completes only once the rows say the key owes nothing;
//   - what a local attempt delivered in a workflow task the run lost (its
//     worker died before the task completed) is counted from the rows: the
//     task runs again, and the rows above the run's cursor that a local
//     execution of the run delivered, and the claims it delivered, come
//     back as KeyQueue's DeliveredHere (countDeliveredHere).
//
// Whatever ends or feeds a run, the next one reads the same rows, so order
// holds and nothing is stranded; the relay re-drives keys whose workflow is
// gone (relay.Redrive).

// maxClaims bounds the signalled events a run keeps to check.
const maxClaims = 10000

// queueReadOptions are those of the local activities that read the rows.
func queueReadOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		// A read that fails is tried again by the run's loop, every 5 s,
		// with the key shown blocked: not here, inside one workflow task.
		ScheduleToCloseTimeout: 20 * time.Second,
		StartToCloseTimeout:    10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 500 * time.Millisecond, MaximumAttempts: 2,
			NonRetryableErrorTypes: []string{activities.CodeSignalRejected},
		},
	})
}

// keyQueueActivity is the registered name of (*activities.Activities).KeyQueue.
const keyQueueActivity = "KeyQueue"

// start reads the worker's settings and what the key owes. When the read
// fails the run delivers nothing until refillFromLog has read the rows.
func (d *delivery) start(ctx workflow.Context) {
	d.loadTried = workflow.Now(ctx)
	identity := d.p
	d.p = Params{SubscriptionID: identity.SubscriptionID, SubscriberApp: identity.SubscriberApp,
		EventType: identity.EventType, SubjectKey: identity.SubjectKey}.WithDefaults()
	var res StartResult
	// The input's hints, kept from newDelivery for a later try of the read
	// (refillFromLog): only the read's recorded result decides by them.
	in := StartInput{SubscriptionID: identity.SubscriptionID, SubjectKey: identity.SubjectKey,
		Busy: d.hints.Busy, Quiet: d.hints.Quiet}
	if d.deliverInStart && !d.carried && d.signals == 0 && len(d.Queue) == 0 && d.nothingSignalled() &&
		d.updatesCame == 0 {
		// A fresh bare run that nothing signalled yet and no Update reached:
		// its read may deliver the head as this task's local attempt would,
		// by the same deadline and timeout. An operator's signal or Update
		// that came with the task is applied before any delivery, as in a
		// run that reads first. (An Update's handler has run by now: the
		// SDK's SetUpdateHandler lets Updates waiting for their handler run
		// before setUpdateHandlers returns, and the handler counts itself.)
		deadline := d.localDeadline(ctx)
		in.First = &FirstInput{SubscriberApp: identity.SubscriberApp, Deadline: deadline,
			Timeout: max(deadline.Sub(workflow.Now(ctx)), 0) + localGrace}
	}
	if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), StartActivity, in).Get(ctx, &res); err != nil {
		d.logger.Warn("read the key's outcome rows and the worker's settings", "error", err)
		return
	}
	d.p = res.Settings
	d.p.SubscriptionID, d.p.SubscriberApp = identity.SubscriptionID, identity.SubscriberApp
	d.p.EventType, d.p.SubjectKey = identity.EventType, identity.SubjectKey
	d.p.Carry = nil
	d.p = d.p.WithDefaults()
	if d.errorPolicy {
		d.applyPolicy(res.Policy)
	}
	d.loadAll(ctx, res.Queue)
	// An operator's pause is the key's, not the run's: a run that starts
	// after a terminate, by hand, by the relay's re-drive or by a
	// continue-as-new holds the key while its row says so, until a resume.
	// The row only adds a pause: a carried one stays. Runs recorded before
	// the rows said so read no pause.
	if res.Queue.Paused {
		d.KeyPaused = true
	}
	// The read delivered (StartInput.First): applyFirst applies the
	// result as a local attempt's is, before anything else can act on the
	// head it settled. Recorded, so a replay applies it too.
	d.first = res.First
}

// applyFirst applies the delivery the start's read made, if it made one:
// once the run has set itself up (setup), or at once when a later turn
// read the rows (refillFromLog).
func (d *delivery) applyFirst(ctx workflow.Context) {
	if first := d.first; first != nil {
		d.first = nil
		d.deliverHead(ctx, first)
	}
}

// loadAll makes the queue what the rows say the key owes: the carried
// queue's items that are still owed, in their order, with what this key
// remembers of their attempts, and every other row in sequence order.
func (d *delivery) loadAll(ctx workflow.Context, q activities.QueueResult) {
	owed := make(map[activities.Event]activities.HeldEvent, len(q.Events))
	for _, h := range q.Events {
		owed[activities.Event{ID: h.Event.ID, Seq: h.Event.Seq}] = h
	}
	kept := d.Queue[:0]
	for _, it := range d.Queue {
		if _, ok := owed[activities.Event{ID: it.Event.ID, Seq: it.Event.Seq}]; ok {
			kept = append(kept, it)
		}
	}
	d.Queue = kept
	d.BacklogAfter = 0
	d.Backlog = false
	d.addRows(ctx, q)
	d.countDeliveredHere(ctx, q.DeliveredHere)
	d.loaded = true
}

// countDeliveredHere counts the events a local attempt of this run
// delivered in a workflow task the run lost (its worker died before the
// task completed): the task runs again, and the rows, not its memory, say
// what went. Each is counted once: the run remembers what it delivered.
// No command: runs recorded before the rows reported such events above the
// cursor replay as they were recorded.
func (d *delivery) countDeliveredHere(ctx workflow.Context, evs []activities.Event) {
	for _, ev := range evs {
		if !d.recent[ev.ID] {
			d.Counters.Delivered++
			d.outcome(ctx, QueueItem{Event: ev}, "delivered", "")
			d.delivered(ev.ID)
		}
	}
}

// addRows puts the rows not queued yet in the queue, in sequence order,
// and moves the cursor past them.
func (d *delivery) addRows(ctx workflow.Context, q activities.QueueResult) {
	now := workflow.Now(ctx)
	queued := make(map[activities.Event]bool, len(d.Queue))
	for _, it := range d.Queue {
		queued[activities.Event{ID: it.Event.ID, Seq: it.Event.Seq}] = true
	}
	for _, h := range q.Events {
		if k := (activities.Event{ID: h.Event.ID, Seq: h.Event.Seq}); !queued[k] {
			queued[k] = true
			d.insert(d.insertPos(h.Event.Seq), heldItem(h, now, d.canRearm(), d.p.RearmCooldown))
		}
		d.BacklogAfter = max(d.BacklogAfter, h.Event.Seq)
	}
	if q.More {
		d.Backlog = true
	}
	d.expiryKnown = false
}

// heldItem is the queue item of a row.
func heldItem(h activities.HeldEvent, now time.Time, rearm bool, cooldown time.Duration) QueueItem {
	it := QueueItem{Event: activities.Event{ID: h.Event.ID, Seq: h.Event.Seq}, QueuedAt: h.QueuedAt,
		Attempts: h.Attempts, Code: h.Code, LastCode: h.LastCode, LastError: h.LastError}
	if it.QueuedAt.IsZero() || it.QueuedAt.After(now) {
		it.QueuedAt = now // the hold expiry counts from a time that makes sense here
	}
	if h.Failed {
		it.Failed, it.FailedAt = true, minTime(h.FailedAt, now)
		if it.FailedAt.IsZero() {
			it.FailedAt = now
		}
		if rearm {
			it.NextAttemptAt = it.FailedAt.Add(cooldown)
		}
	}
	return it
}

// claim takes the events of a signal as claims: the queue grows only from
// the rows. A re-sent event already queued, or delivered by this run, is
// dropped at once.
func (d *delivery) claim(s EventSignal) {
	queued := make(map[activities.Event]bool, len(d.Queue))
	for _, it := range d.Queue {
		queued[activities.Event{ID: it.Event.ID, Seq: it.Event.Seq}] = true
	}
	for _, ev := range s.Events {
		if queued[activities.Event{ID: ev.ID, Seq: ev.Seq}] || d.recent[ev.ID] {
			continue
		}
		if ev.Seq > d.BacklogAfter {
			d.Backlog = true // the rows may hold more than the queue
		}
		if len(d.claims) >= maxClaims {
			d.unchecked++
			continue
		}
		d.claims = append(d.claims, activities.Event{ID: ev.ID, Seq: ev.Seq})
	}
}

// refillFromLog reads the rows the queue does not hold yet, once it has
// room for them, and checks the claims.
func (d *delivery) refillFromLog(ctx workflow.Context) {
	if !d.loaded {
		// At most one try every 5 s, however many signals wake the run.
		if now := workflow.Now(ctx); now.Before(d.loadTried.Add(5 * time.Second)) {
			return
		}
		d.start(ctx)
		if !d.loaded {
			return
		}
		d.applyFirst(ctx)
	}
	limit := 0
	if d.Backlog && d.normalQueued() <= d.readLimit() {
		limit = d.readLimit()
	}
	if limit == 0 && len(d.claims) == 0 && d.unchecked == 0 {
		return
	}
	claims, unchecked := d.claims, d.unchecked
	d.claims, d.unchecked = nil, 0
	if unchecked > 0 {
		d.logger.Warn("event signals named more events than a key checks; the rest were not queued",
			"unchecked", unchecked)
	}
	if limit == 0 && len(claims) == 0 {
		return
	}
	in := activities.QueueInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		After: d.BacklogAfter, Limit: limit, Claims: claims, Uncounted: true}
	var q activities.QueueResult
	if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), keyQueueActivity, in).Get(ctx, &q); err != nil {
		// Tried again on the next turn; the claims stay unchecked.
		d.logger.Warn("read the key's outcome rows", "error", err)
		d.claims = claims
		return
	}
	if limit > 0 && !q.More {
		d.Backlog = false
	}
	d.addRows(ctx, q)
	d.countDeliveredHere(ctx, q.DeliveredHere)
	if q.Unknown > 0 {
		d.audit(ctx, AuditSignalRejected, "", "failed", activities.CodeSignalRejected, "", map[string]any{
			payload.MetaSignal: SignalEvent, payload.MetaReason: reason.EventNotOwed, payload.MetaCount: q.Unknown, payload.MetaEventIDs: q.UnknownIDs,
		})
	}
}

// readLimit is how many rows a read of the key's backlog or outcome rows
// takes once the run has started: half the queue, so that a refill, made
// only when the queue is at most half full, takes no more than the room it
// has. The refills from the log, the backlog's and the read before a run
// completes (its own, or the one a delivery makes for it,
// DeliverInput.ThenRead) take this many; the start reads a whole queue.
func (d *delivery) readLimit() int {
	return d.p.MaxQueue / 2
}

// owesNothing reports whether the rows confirm that the key owes nothing,
// before its run completes; what they still hold is queued instead.
func (d *delivery) owesNothing(ctx workflow.Context) bool {
	if !d.fromLog {
		return true
	}
	var q activities.QueueResult
	if owed := d.owed; owed != nil && d.quiet() && d.owedTask == workflow.GetInfo(ctx).GetCurrentHistoryLength() {
		// The delivery that emptied the queue read the rows after writing
		// its own (DeliverInput.ThenRead), in this workflow task, and the
		// run has taken nothing since: that read decides.
		d.owed = nil
		q = *owed
	} else {
		in := activities.QueueInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
			Limit: d.readLimit()}
		if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), keyQueueActivity, in).Get(ctx, &q); err != nil {
			d.logger.Warn("read the key's outcome rows before completing", "error", err)
			d.wait(ctx, workflow.Now(ctx).Add(5*time.Second))
			return false
		}
	}
	if len(q.Events) == 0 {
		return true
	}
	d.addRows(ctx, q)
	return false
}

// recheckHead reads the failed head's row: still failed, the key holds on
// it; queued again (redelivered after the point a reset went back to), it
// gets fresh attempts; settled or gone, it leaves the queue. A failed read
// changes nothing.
func (d *delivery) recheckHead(ctx workflow.Context) {
	head := d.head()
	in := activities.QueueInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		After: max(d.BacklogAfter, head.Event.Seq), Claims: []activities.Event{{ID: head.Event.ID, Seq: head.Event.Seq}}}
	var q activities.QueueResult
	if err := workflow.ExecuteLocalActivity(queueReadOptions(ctx), keyQueueActivity, in).Get(ctx, &q); err != nil {
		d.logger.Warn("read the failed head's row", "error", err)
		return
	}
	head = d.head()
	if head == nil || head.Event.ID != in.Claims[0].ID {
		return // an operator's action changed the head meanwhile
	}
	for _, h := range q.Events {
		if h.Event.ID != head.Event.ID {
			continue
		}
		if !h.Failed {
			d.freshAttempts(head)
			head.Attempts = h.Attempts
		}
		return
	}
	d.logger.Warn("the failed head is settled in its row; leaving it", "eventId", head.Event.ID)
	d.Queue = d.Queue[1:]
	d.WaitUntil, d.Unreachable, d.Rearms = time.Time{}, 0, 0
	d.expiryKnown = false
}

func (d *delivery) onEvent(ctx workflow.Context, s EventSignal) {
	d.signals++
	if d.fromLog {
		d.claim(s)
		return
	}
	now := workflow.Now(ctx)
	// Keyed by id and seq: a forged copy of an event with a wrong seq must
	// not shadow the genuine one (it is rejected when its turn comes).
	type idSeq struct {
		id  string
		seq int64
	}
	queued := make(map[idSeq]bool, len(d.Queue)+len(s.Events))
	for _, it := range d.Queue {
		queued[idSeq{it.Event.ID, it.Event.Seq}] = true
	}
	normal := -1 // counted when first needed
	for _, ev := range s.Events {
		k := idSeq{ev.ID, ev.Seq}
		if queued[k] || d.recent[ev.ID] {
			continue // a re-sent event: the relay may send again after a crash
		}
		if d.Backlog {
			continue // its outcome row is queued: read back in order with the backlog
		}
		if normal < 0 {
			normal = d.normalQueued()
		}
		if normal >= d.p.MaxQueue {
			// The queue is full: from here on the key's events stay in
			// PostgreSQL (the relay wrote their rows before signalling) and
			// are read back in order as the queue drains.
			d.Backlog, d.BacklogAfter = true, d.lastNormalSeq()
			continue
		}
		normal++
		queued[k] = true
		// Anything else is queued as it came; the deliver activity checks
		// it against the event log before anything is sent, skips what is
		// already settled and rejects what is not this key's.
		ev.Again = false
		d.insert(d.insertPos(ev.Seq), QueueItem{Event: ev, QueuedAt: now})
	}
}

// lastNormalSeq is the highest seq of the queued events that are not
// redeliveries.
func (d *delivery) lastNormalSeq() int64 {
	var last int64
	for i := range d.Queue {
		if !d.Queue[i].Event.Again && d.Queue[i].Event.Seq > last {
			last = d.Queue[i].Event.Seq
		}
	}
	return last
}

// dropBacklog settles the backlog too (cancel --all, removal) and returns
// how many events it held.
func (d *delivery) dropBacklog(ctx workflow.Context, status, code string) int {
	if !d.Backlog && !d.mayHaveUnsignalled(ctx) {
		return 0
	}
	in := activities.BacklogInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		After: d.BacklogAfter, Status: status, Code: code}
	var n int
	if err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).DropBacklog, in).Get(ctx, &n); err != nil {
		d.logger.Warn("drop the backlog", "error", err)
		return 0
	}
	d.Backlog = false
	d.Counters.Cancelled += n
	return n
}

// insertPos is where an event with this sequence number goes: in sequence
// order, behind operators' redeliveries, and never in front of the head or
// of the events a delivery in flight covers.
func (d *delivery) insertPos(seq int64) int {
	n := len(d.Queue)
	if n > 0 && n > d.inflight && !d.Queue[n-1].Event.Again && d.Queue[n-1].Event.Seq < seq {
		return n // the usual case: the relay sends a key's events in order
	}
	i := 0
	if n > 0 {
		i = max(1, d.inflight)
		if d.fromLog && d.inflight == 0 && d.untouched(&d.Queue[0]) {
			i = 0 // a head nothing was sent of yet is no head to keep
		}
	}
	for i < len(d.Queue) && (d.Queue[i].Event.Again || d.Queue[i].Event.Seq < seq) {
		i++
	}
	return i
}

// untouched reports whether nothing of the head was sent or decided yet:
// no attempt, no failure, no wait, no local attempt.
func (d *delivery) untouched(head *QueueItem) bool {
	return head.Attempts == 0 && !head.Failed && head.NotBefore.IsZero() && !head.Event.Again &&
		d.localTried != head.Event.ID
}

// insert puts it at position i of the queue.
func (d *delivery) insert(i int, it QueueItem) {
	d.Queue = append(d.Queue, QueueItem{})
	copy(d.Queue[i+1:], d.Queue[i:])
	d.Queue[i] = it
	if d.expiryKnown && d.expiryAt.IsZero() {
		d.expiryAt = it.QueuedAt.Add(d.p.HoldExpiry)
	}
}

// cancelAt drops item i as cancelled or expired and returns its outcome row.
func (d *delivery) cancelAt(ctx workflow.Context, i int, status, code string) activities.OutcomeUpdate {
	it := d.Queue[i]
	d.Queue = append(d.Queue[:i], d.Queue[i+1:]...)
	d.Counters.Cancelled++
	if code == "" {
		code = it.Code
	}
	d.outcome(ctx, it, status, code)
	if i == 0 {
		d.WaitUntil = time.Time{}
		d.Unreachable = 0
		d.Rearms = 0
	}
	return activities.OutcomeUpdate{EventID: it.Event.ID, Seq: it.Event.Seq, Status: status, Code: code}
}

// cancelAll drops every queued event and returns their outcome rows.
func (d *delivery) cancelAll(ctx workflow.Context, status, code string) []activities.OutcomeUpdate {
	rows := make([]activities.OutcomeUpdate, 0, len(d.Queue))
	for len(d.Queue) > 0 {
		rows = append(rows, d.cancelAt(ctx, len(d.Queue)-1, status, code))
	}
	return rows
}

// findSeq is the position of the queued event with this id and seq, or -1;
// a zero seq (a result recorded before results carried it) matches by id.
func (d *delivery) findSeq(id string, seq int64) int {
	if seq == 0 {
		return d.find(id)
	}
	for i := range d.Queue {
		if d.Queue[i].Event.ID == id && d.Queue[i].Event.Seq == seq {
			return i
		}
	}
	return -1
}

func (d *delivery) find(id string) int {
	for i := range d.Queue {
		if d.Queue[i].Event.ID == id {
			return i
		}
	}
	return -1
}

// refill reads the next part of the backlog once the queue has room for it.
// The read blocks the loop, so no event signal is taken in meanwhile: one
// that arrives is handled after, against the refilled queue.
func (d *delivery) refill(ctx workflow.Context) {
	if !d.Backlog || d.normalQueued() > d.readLimit() {
		return
	}
	limit := d.readLimit()
	in := activities.BacklogInput{SubscriptionID: d.p.SubscriptionID, SubjectKey: d.p.SubjectKey,
		After: d.BacklogAfter, Limit: limit}
	var evs []activities.BacklogEvent
	if err := workflow.ExecuteActivity(d.shortActivity(ctx), (*activities.Activities).Backlog, in).Get(ctx, &evs); err != nil {
		d.logger.Warn("read the backlog", "error", err) // tried again on the next turn
		return
	}
	now := workflow.Now(ctx)
	for _, e := range evs {
		if e.QueuedAt.IsZero() || e.QueuedAt.After(now) {
			e.QueuedAt = now // the hold expiry counts from a time that makes sense here
		}
		if d.findSeq(e.Event.ID, e.Event.Seq) < 0 {
			d.insert(d.insertPos(e.Event.Seq), QueueItem{Event: e.Event, QueuedAt: e.QueuedAt})
		}
		d.BacklogAfter = e.Event.Seq
	}
	if len(evs) < limit {
		d.Backlog = false
	}
	d.expiryKnown = false // backlog events bring their own queue times
}

// normalQueued counts the queued events that are not operators' redeliveries.
func (d *delivery) normalQueued() int {
	n := 0
	for i := range d.Queue {
		if !d.Queue[i].Event.Again {
			n++
		}
	}
	return n
}

func (d *delivery) head() *QueueItem {
	if len(d.Queue) == 0 {
		return nil
	}
	return &d.Queue[0]
}
