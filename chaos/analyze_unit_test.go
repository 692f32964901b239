package chaos_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The analysis is tested on made-up runs: one subscription "s", one key "k",
// events k#1..k#n with ids "e1".."en", times in seconds from t0.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func pubs(n int) []published {
	var out []published
	for i := 1; i <= n; i++ {
		out = append(out, published{Key: "k", N: i, ID: fmt.Sprintf("e%d", i), Seq: int64(i * 10), At: at(0)})
	}
	return out
}

// arr builds an arrival of event n: outcome, attempt, start and end.
func arr(n int, o outcome, attempt int, start, end float64) arrival {
	a := arrival{Sub: "s", Key: "k", EventID: fmt.Sprintf("e%d", n), N: n, Attempt: attempt,
		Outcome: o, Start: at(start), End: at(end)}
	if o == outcomeAck || o == outcomeLost {
		a.Processed = at(start + 0.01)
	}
	return a
}

func TestAnalyze(t *testing.T) {
	kill := fault{Name: "kill", Start: at(3.5), End: at(5), LosesAnswers: true, Kind: kindWorker}
	pgRestart := fault{Name: "pg", Start: at(3.5), End: at(5)}
	// A terminate of s/k while it held e2 (its result unrecorded) and e3.
	terminate := fault{Name: "terminate", Start: at(3.5), End: at(5), Kind: kindTerminate,
		Targets: []target{{Sub: "s", Key: "k", Status: "delivering", InFlight: []string{"e2", "e3"}}}}
	otherKey := terminate
	otherKey.Targets = []target{{Sub: "s", Key: "other", InFlight: []string{"e2"}}}
	reset := terminate
	reset.Kind = kindReset
	tests := []struct {
		name     string
		events   int
		arrivals []arrival
		faults   []fault
		// want lists the checks that must report a problem (exactly these).
		want         []string
		dupAfterLost int
		replays      int
		repeats      int
		exhausted    int
	}{
		{name: "in order, once each", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3)}},
		{name: "an event never acknowledged is lost", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeNack, 1, 2, 3)},
			want:     []string{"loss"}},
		{name: "a later event acknowledged before an earlier one", events: 2,
			arrivals: []arrival{arr(2, outcomeAck, 1, 0, 0.5), arr(1, outcomeAck, 1, 1, 2)},
			want:     []string{"order"}},
		{name: "a later event tried, even failing, before an earlier one's 2xx", events: 2,
			arrivals: []arrival{arr(1, outcomeNack, 1, 0, 0.5), arr(2, outcomeNack, 1, 0.6, 0.7), arr(1, outcomeAck, 2, 1, 2), arr(2, outcomeAck, 2, 3, 4)},
			want:     []string{"order"}},
		{name: "a later event overlapping the earlier one's 2xx", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 2), arr(2, outcomeAck, 1, 1.5, 3)},
			want:     []string{"order"}},
		{name: "redelivery after a lost answer is allowed", events: 2,
			arrivals:     []arrival{arr(1, outcomeLost, 1, 0, 3), arr(1, outcomeAck, 2, 2.2, 2.3), arr(2, outcomeAck, 1, 4, 5)},
			dupAfterLost: 1},
		{name: "a batch re-sent after a kill is attributed to it", events: 3,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3),
				arr(1, outcomeAck, 2, 35, 36), arr(2, outcomeAck, 1, 36, 37), arr(3, outcomeAck, 1, 38, 39)},
			faults: []fault{kill}, replays: 2, repeats: 0},
		{name: "a re-sent event with no fault is an unexplained duplicate", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3), arr(2, outcomeAck, 2, 35, 36)},
			want:     []string{"duplicate"}, replays: 1},
		{name: "a re-sent event the terminated workflow held is attributed to the terminate", events: 3,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3),
				arr(2, outcomeAck, 1, 65, 66), arr(3, outcomeAck, 1, 67, 68)},
			faults: []fault{terminate}, replays: 1},
		{name: "a re-sent event the reset workflow held is attributed to the reset", events: 3,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3),
				arr(2, outcomeAck, 1, 6, 7), arr(3, outcomeAck, 1, 8, 9)},
			faults: []fault{reset}, replays: 1},
		{name: "a terminate explains no re-sent event its workflow had settled", events: 3,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3),
				arr(1, outcomeAck, 1, 65, 66), arr(3, outcomeAck, 1, 67, 68)},
			faults: []fault{terminate}, want: []string{"duplicate"}, replays: 1},
		{name: "a terminate explains no re-sent event of another key", events: 3,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3),
				arr(2, outcomeAck, 1, 65, 66), arr(3, outcomeAck, 1, 67, 68)},
			faults: []fault{otherKey}, want: []string{"duplicate"}, replays: 1},
		{name: "forged signals explain no re-sent event", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 2, 3), arr(2, outcomeAck, 2, 6, 7)},
			faults: []fault{{Name: "forged", Start: at(3.5), End: at(4), Kind: kindForged,
				Targets: []target{{Sub: "s", Key: "k", Forged: 300}}}},
			want: []string{"duplicate"}, replays: 1},
		{name: "a fault that loses no answers explains no re-sent event", events: 1,
			arrivals: []arrival{arr(1, outcomeAck, 1, 3, 4), arr(1, outcomeAck, 2, 20, 21)},
			faults:   []fault{pgRestart}, want: []string{"duplicate"}, replays: 1},
		{name: "a re-sent event long before the fault is not attributed to it", events: 1,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(1, outcomeAck, 2, 80, 81)},
			faults:   []fault{{Name: "late kill", Start: at(60), End: at(61), LosesAnswers: true}},
			want:     []string{"duplicate"}, replays: 1},
		{name: "attempts going down before the 2xx", events: 1,
			arrivals: []arrival{arr(1, outcomeNack, 2, 0, 1), arr(1, outcomeAck, 1, 2, 3)},
			want:     []string{"attempts"}},
		{name: "an attempt past the last", events: 1,
			arrivals: []arrival{arr(1, outcomeAck, maxAttempts+1, 0, 1)},
			want:     []string{"attempts"}},
		{name: "an attempt number used twice is counted, not a violation", events: 1,
			arrivals: []arrival{arr(1, outcomeNack, 1, 0, 1), arr(1, outcomeAck, 1, 2, 3)},
			repeats:  1},
		{name: "a delivery refused by verification", events: 1,
			arrivals: []arrival{{Sub: "s", EventID: "e1", Attempt: 1, Outcome: outcomeInvalid, Start: at(0), End: at(0.1)}, arr(1, outcomeAck, 2, 1, 2)},
			want:     []string{"verification"}},
		{name: "an event that was never published", events: 1,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(7, outcomeAck, 1, 2, 3)},
			want:     []string{"unknown event"}},
		{name: "content that does not match the published event", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), {Sub: "s", Key: "k", EventID: "e2", N: 5, Attempt: 1, Outcome: outcomeAck, Start: at(2), End: at(3)}},
			want:     []string{"content"}},
		{name: "a wait longer than the base is listed for explainWaits", events: 2,
			arrivals: []arrival{arr(1, outcomeAck, 1, 0, 1), arr(2, outcomeAck, 1, 1+baseWait.Seconds()+1, 1+baseWait.Seconds()+2)}},
		{name: "exhausted attempts are counted for the audit check", events: 1,
			arrivals: func() []arrival {
				var as []arrival
				for i := 1; i <= maxAttempts; i++ {
					as = append(as, arr(1, outcomeNack, i, float64(i), float64(i)+0.5))
				}
				return append(as, arr(1, outcomeAck, maxAttempts, 20, 21))
			}(),
			exhausted: 1, repeats: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			an := analyze([]string{"s"}, pubs(tc.events), tc.arrivals, tc.faults, t0)
			got := map[string]bool{}
			for _, p := range an.Problems {
				check, _, _ := strings.Cut(p, ":")
				got[check] = true
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Errorf("no %q problem; problems: %q", w, an.Problems)
				}
				delete(got, w)
			}
			if len(got) > 0 {
				t.Errorf("unexpected problems: %q", an.Problems)
			}
			if an.DupAfterLost != tc.dupAfterLost || an.Replays != tc.replays || an.AttemptRepeats != tc.repeats || an.Exhausted != tc.exhausted {
				t.Errorf("dupAfterLost %d, replays %d, repeats %d, exhausted %d; want %d, %d, %d, %d",
					an.DupAfterLost, an.Replays, an.AttemptRepeats, an.Exhausted, tc.dupAfterLost, tc.replays, tc.repeats, tc.exhausted)
			}
		})
	}
}

func TestRecovery(t *testing.T) {
	f := fault{Name: "kill", Start: at(9), End: at(10), LosesAnswers: true, Kind: kindWorker}
	evs := []published{
		{Key: "a", N: 1, ID: "a1", Seq: 1, At: at(1)},
		{Key: "b", N: 1, ID: "b1", Seq: 2, At: at(5)},
		{Key: "c", N: 1, ID: "c1", Seq: 3, At: at(12)}, // after the fault: not stalled
	}
	as := []arrival{
		{Sub: "s", Key: "a", EventID: "a1", N: 1, Attempt: 1, Outcome: outcomeAck, Start: at(2), End: at(3), Processed: at(2)},
		{Sub: "s", Key: "b", EventID: "b1", N: 1, Attempt: 2, Outcome: outcomeAck, Start: at(41), End: at(42), Processed: at(41)},
		{Sub: "s", Key: "c", EventID: "c1", N: 1, Attempt: 1, Outcome: outcomeAck, Start: at(12.5), End: at(13), Processed: at(12.5)},
	}
	an := analyze([]string{"s"}, evs, as, []fault{f}, t0)
	if len(an.Problems) != 0 {
		t.Fatalf("problems: %q", an.Problems)
	}
	r := an.Recovery[0]
	if r.FirstAck != 3*time.Second || r.Stalled != 1 || r.Resumed != 32*time.Second || r.Slowest != "s/b" {
		t.Fatalf("recovery %+v; want first 2xx after 3s, 1 stalled key (s/b) resumed after 32s", r)
	}
}

func TestAttribute(t *testing.T) {
	faults := []fault{
		{Name: "kill", Start: at(10), End: at(12), LosesAnswers: true},
		{Name: "pg", Start: at(20), End: at(21)},
		{Name: "reset", Start: at(30), End: at(38), LosesAnswers: true},
	}
	tests := []struct {
		at   float64
		want int
	}{
		{at: 11, want: 0},  // inside the kill
		{at: 13, want: 0},  // closer to the kill's end than to the reset's start
		{at: 25, want: 2},  // closer to the reset
		{at: 5, want: 0},   // before the kill, within the look-back
		{at: 60, want: -1}, // after every grace period
		{at: -25, want: -1},
	}
	for _, tc := range tests {
		if got := attribute(faults, at(tc.at)); got != tc.want {
			t.Errorf("attribute at %vs = %d, want %d", tc.at, got, tc.want)
		}
	}
}

func TestAttributeKey(t *testing.T) {
	faults := []fault{
		{Name: "kill", Start: at(10), End: at(12), LosesAnswers: true, Kind: kindWorker},
		{Name: "terminate", Start: at(20), End: at(22), Kind: kindTerminate,
			Targets: []target{{Sub: "s", Key: "k", InFlight: []string{"e1"}}}},
		{Name: "reset", Start: at(40), End: at(41), Kind: kindReset,
			Targets: []target{{Sub: "s", Key: "k", InFlight: []string{"e1", "e2"}}}},
		{Name: "forged", Start: at(20), End: at(21), Kind: kindForged,
			Targets: []target{{Sub: "s", Key: "k", Forged: 300}}},
	}
	tests := []struct {
		sub, key, id string
		at           float64
		want         int
	}{
		{"s", "k", "e1", 21, 1},   // held by the terminated workflow
		{"s", "k", "e1", 33, 2},   // closer to the reset
		{"s", "k", "e2", 21, 2},   // held at the reset only, within its look-back
		{"s", "k", "e3", 21, -1},  // held by neither
		{"s", "x", "e1", 21, -1},  // another key
		{"t", "k", "e1", 21, -1},  // another subscription
		{"s", "k", "e1", -15, -1}, // before every look-back
		{"s", "k", "e1", 11, 1},   // the kill is not attributeKey's
	}
	for _, tc := range tests {
		if got := attributeKey(faults, tc.sub, tc.key, tc.id, at(tc.at)); got != tc.want {
			t.Errorf("attributeKey(%s/%s %s at %vs) = %d, want %d", tc.sub, tc.key, tc.id, tc.at, got, tc.want)
		}
	}
	if got := attribute(faults, at(21)); got != 0 {
		t.Errorf("attribute at 21s = %d, want the kill (0): terminate, reset and forged signals lose no answers of other keys", got)
	}
}

func TestProblemsCapKeepsCount(t *testing.T) {
	var p problems
	for i := range maxProblemsPerCheck + 3 {
		p.add("order", "violation %d", i)
	}
	p.add("loss", "one")
	out := p.done()
	if len(out) != maxProblemsPerCheck+2 || out[len(out)-1] != "order: 3 more" || p.total() != maxProblemsPerCheck+4 {
		t.Fatalf("problems: %q, total %d", out, p.total())
	}
}

func TestBounds(t *testing.T) {
	if got := retries(4); got != 3700*time.Millisecond {
		t.Errorf("retries(4) = %v, want 3.7s (200ms+500ms+1s+2s)", got)
	}
	for _, tc := range []struct{ down, want time.Duration }{
		{2 * time.Second, 5 * time.Second},   // back before the first look-up again
		{14 * time.Second, 10 * time.Second}, // 5 s, then the 10 s step under way
		{31 * time.Second, 20 * time.Second}, // 5 + 10, then 20
		{5 * time.Minute, time.Minute},       // capped at the re-check interval
	} {
		if got := lookupWait(tc.down); got != tc.want {
			t.Errorf("lookupWait(%v) = %v, want %v", tc.down, got, tc.want)
		}
	}
	kill := fault{Start: at(0), End: at(2), Kind: kindWorker}
	if got, _ := kill.explains(1); got != heartbeatTimeout+400*time.Millisecond+stickyTimeout {
		t.Errorf("a kill explains %v, want the heartbeat timeout + 400ms + the sticky timeout", got)
	}
}

func TestExplain(t *testing.T) {
	w := headWait{Sub: "s", Key: "k", N: 2, Start: at(10), Ack: at(60)}
	// A heartbeat timeout of 32 s and a sticky timeout of 5 s leave 13 s.
	hist := []span{{at(12), at(44), mechHeartbeat}, {at(44), at(49), mechSticky}}
	x := explain(w, hist, nil)
	if x.Covered != 37*time.Second || x.Unexplained != 13*time.Second || x.Unexplained > baseWait {
		t.Errorf("covered %v, unexplained %v; want 37s and 13s (within the base)", x.Covered, x.Unexplained)
	}
	// Overlapping spans count once.
	x = explain(w, append(hist, span{at(20), at(30), mechTaskTO}), nil)
	if x.Covered != 37*time.Second {
		t.Errorf("overlapping spans: covered %v, want 37s", x.Covered)
	}
	// Nothing explains a 50 s wait.
	if x = explain(w, nil, nil); x.Unexplained != 50*time.Second {
		t.Errorf("no spans: unexplained %v, want 50s", x.Unexplained)
	}
	// A fault covers its own duration, on the keys it can hold up only.
	other := fault{Start: at(15), End: at(45), Kind: kindSubscriber, Rule: rule{Match: func(_, key string) bool { return key != "k" }}}
	mine := fault{Start: at(15), End: at(45), Kind: kindWorker}
	if x = explain(w, nil, []fault{other}); x.Covered != 0 {
		t.Errorf("a fault on other keys covered %v", x.Covered)
	}
	if x = explain(w, nil, []fault{mine}); x.Covered != 30*time.Second {
		t.Errorf("a fault on the key covered %v, want 30s", x.Covered)
	}
	// A terminated workflow's key is held until the relay's re-drive; a key
	// the terminate's rule failed but whose workflow it left is not.
	ts := []target{{Sub: "s", Key: "k"}}
	term := fault{Start: at(15), End: at(20), Kind: kindTerminate, Targets: ts, Rule: rule{Match: allKeys}}
	if x = explain(w, nil, []fault{term}); x.Covered != 45*time.Second {
		t.Errorf("a terminate of the key covered %v, want 45s (its 5s and the rest of the wait, under the %v re-drive)", x.Covered, redriveWait)
	}
	term.Targets = []target{{Sub: "s", Key: "other"}}
	if x = explain(w, nil, []fault{term}); x.Covered != 5*time.Second {
		t.Errorf("a terminate of another key covered %v, want its own 5s", x.Covered)
	}
	// An attempt under way since 11 s when the key's run was terminated at
	// 15 s (its answer lost to an earlier fault; no history shows it)
	// covers 11-15 s; one on another key, or under way for longer than a
	// heartbeat timeout and the longest back-off, does not, or only so far.
	term.Targets = []target{{Sub: "s", Key: "k", Pending: at(11)}}
	if x = explain(w, nil, []fault{term}); x.Covered != 49*time.Second {
		t.Errorf("a terminate that cut off an attempt under way covered %v, want 49s (11 s to the ack)", x.Covered)
	}
	term.Targets = []target{{Sub: "s", Key: "other", Pending: at(11)}}
	if x = explain(w, nil, []fault{term}); x.Covered != 5*time.Second {
		t.Errorf("an attempt cut off on another key covered %v, want the terminate's own 5s", x.Covered)
	}
	long := headWait{Sub: "s", Key: "k", N: 2, Start: at(0), Ack: at(100)}
	late := fault{Start: at(80), End: at(81), Kind: kindTerminate, Targets: []target{{Sub: "s", Key: "k", Pending: at(10)}}, Rule: rule{Match: allKeys}}
	if x = explain(long, nil, []fault{late}); x.By[mechHeartbeat] != attemptLimit() {
		t.Errorf("an attempt under way for 70 s before the terminate covered %v, want at most %v", x.By[mechHeartbeat], attemptLimit())
	}
}

func TestSpans(t *testing.T) {
	ev := func(id string, sec float64, typ string) historyEvent {
		return historyEvent{EventID: id, EventTime: at(sec), EventType: "EVENT_TYPE_" + typ}
	}
	sticky := ev("3", 6, "WORKFLOW_TASK_TIMED_OUT")
	sticky.WorkflowTaskTimedOut = &struct {
		ScheduledEventID string `json:"scheduledEventId"`
		StartedEventID   string `json:"startedEventId"`
		TimeoutType      string `json:"timeoutType"`
	}{ScheduledEventID: "2", TimeoutType: "TIMEOUT_TYPE_SCHEDULE_TO_START"}
	started := ev("5", 45, "ACTIVITY_TASK_STARTED")
	started.ActivityTaskStarted = &struct {
		ScheduledEventID string `json:"scheduledEventId"`
		Attempt          int    `json:"attempt"`
		LastFailure      *struct {
			Message string `json:"message"`
		} `json:"lastFailure"`
	}{ScheduledEventID: "4", Attempt: 2, LastFailure: &struct {
		Message string `json:"message"`
	}{Message: "activity Heartbeat timeout"}}
	got := spans([]historyEvent{ev("2", 1, "WORKFLOW_TASK_SCHEDULED"), sticky, ev("4", 10, "ACTIVITY_TASK_SCHEDULED"), started})
	// One failed attempt covers at most its heartbeat timeout and the longest retry delay (34 s).
	want := []span{{at(1), at(6), mechSticky}, {at(11), at(45), mechHeartbeat}}
	if len(got) != len(want) {
		t.Fatalf("spans = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].From.Equal(want[i].From) || !got[i].To.Equal(want[i].To) || got[i].What != want[i].What {
			t.Errorf("span %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestForgedSignal(t *testing.T) {
	sig := forgedSignal(forgedPerSignal)
	small, huge := 0, 0
	for _, ev := range sig.Events {
		switch {
		case ev.Seq >= 1 && ev.Seq <= 1000:
			small++
		case ev.Seq >= 1<<50:
			huge++
		}
	}
	if len(sig.Events) != forgedPerSignal || small != forgedPerSignal/2 || huge != forgedPerSignal/2 {
		t.Errorf("%d forged events, %d with seq 1-1000, %d from 2^50; want %d, half and half", len(sig.Events), small, huge, forgedPerSignal)
	}
}

func TestWorkflowFaultCounts(t *testing.T) {
	faults := []fault{
		{Kind: kindTerminate, Targets: []target{{Held: true}, {Held: true}, {}}},
		{Kind: kindTerminate, Targets: []target{{}}},
		{Kind: kindReset, Targets: []target{{}}},
		{Kind: kindForged, Targets: []target{{Forged: 300}, {Forged: 300}}},
		{Kind: kindWorker},
	}
	want := "4 terminated in 2 faults (2 held, 2 busy); 1 reset to their first workflow task; 2 forged event signals in 1 faults (600 unknown events)"
	if got := workflowFaultCounts(faults); got != want {
		t.Errorf("workflowFaultCounts = %q, want %q", got, want)
	}
}
