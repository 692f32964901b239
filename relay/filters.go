package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"herald/filter"
	"herald/store"
)

// Bounds of the content-filter phase of a dispatch round (docs/design.md,
// "Content filters"). Subscriptions are judged filterParallel at a time, each
// on its own events in sequence order, every evaluation under
// filter.Deadline. A subscription stops after filterSubscriptionBudget of a
// round once its evaluations spent filterWorkedCost (a filter that waited
// for a CPU rather than worked is not cut short), or at its first timeout;
// the phase as a whole ends after filterRoundBudget. A filter that ran out
// of its own time rests for filterCooldown: its events are not evaluated
// meanwhile. Pairs left unjudged are delivered (reason timeout), so a slow
// or hostile filter holds one round in filterCooldown by at most
// filterSubscriptionBudget plus one evaluation, and other subscriptions'
// filters keep their slots.
const (
	filterParallel           = 4
	filterSubscriptionBudget = 100 * time.Millisecond
	filterRoundBudget        = 500 * time.Millisecond
	filterCooldown           = 10 * time.Second
	filterWorkedCost         = filter.CostLimit
	// filterErrorStreak is the evaluations in a row, over any number of
	// rounds, that a filter may run into the cost limit or the deadline
	// before it rests for filterCooldown too: a hostile filter costs its
	// full budget per evaluation, and a paced stream of its events (a few
	// per round) would never add up to filterSubscriptionBudget in one
	// round.
	filterErrorStreak = 5
	// filterAuditInterval spaces a subscription's subscription.filter_error
	// audit rows: the errors between two rows are counted in the later one.
	filterAuditInterval = time.Minute
)

// FilterErrorObserver, when the relay's Observer is one, counts the
// (subscription, event) pairs whose content filter failed, by reason (the
// filter.Reason constants). Those events are delivered.
type FilterErrorObserver interface {
	FilterErrors(subscriptionID, reason string, n int)
}

// Codes of a filtered outcome.
const (
	// CodeFilterNoMatch: the filter yielded false.
	CodeFilterNoMatch = "filter_no_match"
)

// filterJob is one subscription's filtered events in one round.
type filterJob struct {
	sub    store.Deliverable
	events []int // indexes into the round's events, in sequence order
}

// filterTally is what went wrong with one subscription's filter: errors by
// reason and the first one's text.
type filterTally struct {
	text    string // the filter of the first error
	byCause map[string]int
	first   string
	since   time.Time
}

func (t *filterTally) add(reason, text string, err error) {
	if t.byCause == nil {
		t.byCause = map[string]int{}
		t.first, t.text = scrub(err, text), text
	}
	t.byCause[reason]++
}

func (t *filterTally) total() int {
	n := 0
	for _, c := range t.byCause {
		n += c
	}
	return n
}

// parsed is an event's envelope read into filter variables, once for
// every subscription that filters it; ok is false when no subscription
// evaluates it (their filters rest), so it was not read.
type parsed struct {
	vars map[string]any
	err  error
	ok   bool
}

// judge evaluates the content filters of a round's (subscription, event)
// pairs and returns the pairs a filter did not let through, with their code.
// A pair whose filter fails (an error, the cost limit, a timeout, a filter
// this version refuses) is delivered: the subscriber chose the filter, and
// an extra event is better than a lost one. The failures are logged,
// counted and audited (noteFilterErrors).
func (r *Relay) judge(ctx context.Context, evs []store.PendingEvent, targets [][]store.Deliverable) (map[store.Dispatch]string, int) {
	jobs := map[string]*filterJob{}
	var order []*filterJob
	for i, ev := range evs {
		for _, s := range targets[i] {
			if s.FilterAt(ev.ReceivedAt) == "" {
				continue
			}
			j := jobs[s.ID]
			if j == nil {
				j = &filterJob{sub: s}
				jobs[s.ID] = j
				order = append(order, j)
			}
			j.events = append(j.events, i)
		}
	}
	if len(order) == 0 {
		return nil, 0
	}
	// Envelopes are read before any budget runs: their size is bounded by
	// the publish limit, not by a filter; an envelope only resting filters
	// would see is not read at all.
	// So are the filters compiled (each text once, cached).
	vars := make([]parsed, len(evs))
	seen := make([]bool, len(evs))
	var needed []int
	texts := map[string]bool{}
	now := time.Now()
	for _, j := range order {
		for _, i := range j.events {
			text := j.sub.FilterAt(evs[i].ReceivedAt)
			texts[text] = true
			if _, rests := r.resting(j.sub.ID, text, now); !seen[i] && !rests {
				seen[i] = true
				needed = append(needed, i)
			}
		}
	}
	forEach(needed, filterParallel, func(i int) bool {
		v, err := filter.Variables(evs[i].Envelope)
		vars[i] = parsed{vars: v, err: err, ok: true}
		return true
	})
	for text := range texts {
		_, _ = r.compiled(text) // a refusal is cached and reported per pair
	}
	rctx, cancel := context.WithTimeout(ctx, filterRoundBudget)
	defer cancel()
	filtered := map[store.Dispatch]string{}
	tallies := map[string]*filterTally{}
	var mu sync.Mutex
	forEach(order, filterParallel, func(j *filterJob) bool {
		codes, tally := r.judgeSubscription(rctx, j, evs, vars)
		mu.Lock()
		defer mu.Unlock()
		for k, c := range codes {
			filtered[k] = c
		}
		if tally.byCause != nil {
			tallies[j.sub.ID] = tally
		}
		return true
	})
	failed := 0
	for id, t := range tallies {
		failed += t.total()
		r.noteFilterErrors(id, t)
	}
	return filtered, failed
}

// errBudget is the error of a pair left unjudged when its subscription's
// or the round's filter budget ran out, or after a timeout of the same
// filter in this round.
var errBudget = errors.New("not evaluated: the filter's time in this dispatch round ran out")

// errResting is the error of a pair left unjudged while its filter rests
// after running out of time, or after filterErrorStreak evaluations in a
// row that ran into the cost limit or the deadline (filterCooldown).
var errResting = fmt.Errorf("not evaluated: the filter ran out of time or hit its cost limit %d times in a row "+
	"in earlier rounds and rests for %v", filterErrorStreak, filterCooldown)

// restingFilter is why and until when a filter rests.
type restingFilter struct {
	until  time.Time
	reason string // filter.ReasonTimeout or filter.ReasonCost
}

// resting reports whether the filter text of subscription id rests (it ran
// out of time, or into the cost limit filterErrorStreak times in a row,
// less than filterCooldown ago), and the reason its events are counted
// under meanwhile.
func (r *Relay) resting(id, text string, now time.Time) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest, ok := r.restUntil[id+"\x00"+text]
	if ok && !now.Before(rest.until) {
		delete(r.restUntil, id+"\x00"+text)
		return "", false
	}
	return rest.reason, ok
}

// rest makes the filter text of subscription id rest for filterCooldown;
// its events are counted under reason meanwhile.
func (r *Relay) rest(id, text, reason string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restUntil == nil || len(r.restUntil) > 1000 {
		r.restUntil = map[string]restingFilter{} // stale ones of removed subscriptions
	}
	r.restUntil[id+"\x00"+text] = restingFilter{until: now.Add(filterCooldown), reason: reason}
	delete(r.streaks, id+"\x00"+text)
}

// costly counts an evaluation of the filter text of subscription id that
// ran into the cost limit or the deadline (costly true) or did not, and
// reports whether the filter has now done so filterErrorStreak times in a
// row.
func (r *Relay) costly(id, text string, costly bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := id + "\x00" + text
	if !costly {
		delete(r.streaks, k)
		return false
	}
	if r.streaks == nil || len(r.streaks) > 1000 {
		r.streaks = map[string]int{}
	}
	r.streaks[k]++
	return r.streaks[k] >= filterErrorStreak
}

// judgeSubscription evaluates one subscription's filter on its events in
// order, within filterSubscriptionBudget and the round's budget, stopping
// at the first timeout; a filter that ran out of time rests.
func (r *Relay) judgeSubscription(round context.Context, j *filterJob, evs []store.PendingEvent, vars []parsed) (map[store.Dispatch]string, *filterTally) {
	deadline := time.Now().Add(filterSubscriptionBudget)
	codes := map[store.Dispatch]string{}
	tally := &filterTally{since: time.Now()}
	var spent uint64
	stopped := false
	// stop ends the subscription's round; the filter rests when it ran out
	// of its own time, not when the round's budget ended first.
	stop := func(text, reason string) {
		if !stopped && round.Err() == nil {
			r.rest(j.sub.ID, text, reason, time.Now())
		}
		stopped = true
	}
	for _, i := range j.events {
		ev := evs[i]
		text := j.sub.FilterAt(ev.ReceivedAt)
		pair := store.Dispatch{SubscriptionID: j.sub.ID, EventID: ev.ID}
		f, err := r.compiled(text)
		if err != nil {
			tally.add(filter.ReasonRefused, text, err)
			continue
		}
		if reason, rests := r.resting(j.sub.ID, text, time.Now()); rests || !vars[i].ok {
			// Not read: its filter rested when the round began.
			tally.add(cmp.Or(reason, filter.ReasonTimeout), text, errResting)
			continue
		}
		if !stopped && (round.Err() != nil || spent >= filterWorkedCost && !time.Now().Before(deadline)) {
			stop(text, filter.ReasonTimeout)
		}
		if stopped {
			tally.add(filter.ReasonTimeout, text, errBudget)
			continue
		}
		if err := vars[i].err; err != nil {
			tally.add(filter.ReasonEvent, text, err)
			continue
		}
		ok, cost, err := f.MatchCost(round, vars[i].vars)
		spent += cost
		reason := filter.ReasonOf(err)
		streak := r.costly(j.sub.ID, text, err != nil && (reason == filter.ReasonCost || reason == filter.ReasonTimeout))
		switch {
		case err != nil:
			tally.add(reason, text, err)
			if reason == filter.ReasonTimeout || streak {
				stop(text, reason)
			}
		case !ok:
			codes[pair] = CodeFilterNoMatch
		}
	}
	return codes, tally
}

// compiledFilter is a cached compilation: the filter, or why this version
// refuses it.
type compiledFilter struct {
	f   *filter.Filter
	err error
}

// compiled returns the filter of text, compiling it once. A filter that apply
// accepted and this version refuses (an older Herald stored it, or another
// CEL version) is not run: its events are delivered, as for any filter error.
func (r *Relay) compiled(text string) (*filter.Filter, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.filters[text]; ok {
		return c.f, c.err
	}
	f, err := filter.Compile(text)
	if r.filters == nil || len(r.filters) > 1000 {
		r.filters = map[string]compiledFilter{}
	}
	r.filters[text] = compiledFilter{f: f, err: err}
	return f, err
}

// noteFilterErrors logs and counts one round's filter errors of a
// subscription and keeps them for its next audit row.
func (r *Relay) noteFilterErrors(subscriptionID string, t *filterTally) {
	reasons := make([]string, 0, len(t.byCause))
	for reason := range t.byCause {
		reasons = append(reasons, reason)
	}
	sort.Strings(reasons)
	r.Logger.Warn("content filter failed; its events are delivered unfiltered",
		zap.String("subscription", subscriptionID), zap.Int("events", t.total()),
		zap.Strings("reasons", reasons), zap.String("first_error", t.first), zap.String("filter", t.text))
	if o, ok := r.Observer.(FilterErrorObserver); ok {
		for _, reason := range reasons {
			o.FilterErrors(subscriptionID, reason, t.byCause[reason])
		}
	}
	r.auditMu.Lock()
	defer r.auditMu.Unlock()
	if r.filterErrs == nil {
		r.filterErrs = map[string]*filterTally{}
	}
	p := r.filterErrs[subscriptionID]
	if p == nil {
		r.filterErrs[subscriptionID] = t
		return
	}
	for reason, n := range t.byCause {
		p.byCause[reason] += n
	}
}

// auditFilterErrors writes one subscription.filter_error audit row for
// each subscription with filter errors not yet audited whose last row is
// filterAuditInterval old: the count by reason since the previous row and
// the first error. The once key (subscription and minute) keeps two relays
// from writing twice in one minute.
func (r *Relay) auditFilterErrors(ctx context.Context) {
	r.auditMu.Lock()
	defer r.auditMu.Unlock()
	now := time.Now()
	for id, at := range r.filterAudited {
		if _, pending := r.filterErrs[id]; !pending && now.Sub(at) >= filterAuditInterval {
			delete(r.filterAudited, id) // its next error is audited at once
		}
	}
	for id, t := range r.filterErrs {
		if last, ok := r.filterAudited[id]; ok && now.Sub(last) < filterAuditInterval {
			continue
		}
		if r.filterAudited == nil {
			r.filterAudited = map[string]time.Time{}
		}
		r.filterAudited[id] = now
		err := r.Store.Audit(ctx, store.AuditEntry{
			Action: store.ActionSubscriptionFilterError, TargetType: store.TargetSubscription, TargetID: id,
			Outcome: store.OutcomeFailed, ErrorCode: CodeFilterErrorAudit,
			Metadata: map[string]any{"count": t.total(), "reasons": t.byCause, "firstError": t.first,
				"filter": t.text, "since": t.since.UTC().Format(time.RFC3339Nano), "delivered": true},
			OnceKey: fmt.Sprintf("%s:%s:%d", store.ActionSubscriptionFilterError, id, now.Unix()/60),
		})
		if err != nil {
			r.Logger.Warn("audit filter errors", zap.String("subscription", id), zap.Error(err))
			continue // counted in the next row
		}
		delete(r.filterErrs, id)
	}
}

// CodeFilterErrorAudit is the error code of a subscription.filter_error
// audit row.
const CodeFilterErrorAudit = "filter_error"

// quoted matches a quoted part of an error message: CEL quotes the values
// it could not convert or parse (Go's regexp package in backquotes), which
// come from the event.
var quoted = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")

// noSuchKey matches CEL's error for a missing map key, which names the key:
// the filter's own text (data.coupon) or a value of the event (m[data.k]).
var noSuchKey = regexp.MustCompile(`no such key: (.*)$`)

// scrub makes an evaluation error of filter text fit for logs and the
// audit trail: quoted values (event data) are elided, and so is a missing
// key that the filter's text does not name; the text is capped.
func scrub(err error, text string) string {
	s := quoted.ReplaceAllString(err.Error(), `"…"`)
	if m := noSuchKey.FindStringSubmatchIndex(s); m != nil && !strings.Contains(text, s[m[2]:m[3]]) {
		s = s[:m[2]] + "…"
	}
	if len(s) > 300 {
		n := 300
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}
