package keyops

import (
	"herald/store"
	"herald/workflows"
)

// IDsPerSignal is how many event ids one redeliver signal of a replay
// window carries: a key with more gets several signals, in order.
const IDsPerSignal = 500

// WindowKey is one key of a replay window (`starter redeliver --since` and
// POST /v1/ops/subscriptions/replay report the same).
type WindowKey struct {
	Subject    string `json:"subject"`
	WorkflowID string `json:"workflowId"`
	Events     int    `json:"events"`
	FirstSeq   int64  `json:"firstSeq"`
	LastSeq    int64  `json:"lastSeq"`
	// Signals is how many redeliver signals were sent (one per
	// IDsPerSignal events); 0 in a dry run.
	Signals int `json:"signals"`
	// Result is "queued" (every signal sent), "dry-run", "error" (a signal
	// failed; later signals of the key were not sent) or "skipped" (not
	// tried: the replay stopped early).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// PlanWindow is the plan of a replay window of a subscription: one
// WindowKey per key, in the order given, each "skipped" until tried, and
// the number of events.
func PlanWindow(subscriptionID string, keys []store.KeyEvents) ([]WindowKey, int) {
	out := make([]WindowKey, len(keys))
	events := 0
	for i, k := range keys {
		events += len(k.Events)
		out[i] = WindowKey{Subject: k.Subject, WorkflowID: workflows.DeliveryID(subscriptionID, k.Subject),
			Events: len(k.Events), FirstSeq: k.Events[0].Seq, LastSeq: k.Events[len(k.Events)-1].Seq, Result: "skipped"}
	}
	return out, events
}

// QueueKey sends a key's events again, in order, IDsPerSignal ids a signal,
// through send, and records on r what happened: "queued", or "error" at the
// first failed signal (the key's later events are not sent: they would be
// queued without the ones before them). queued, when set, is told the ids
// of each signal sent. It returns the events queued.
func QueueKey(k store.KeyEvents, r *WindowKey, send func(ids []string) error, queued func(n int)) int {
	n := 0
	for start := 0; start < len(k.Events); start += IDsPerSignal {
		chunk := k.Events[start:min(start+IDsPerSignal, len(k.Events))]
		ids := make([]string, len(chunk))
		for j, e := range chunk {
			ids[j] = e.ID
		}
		if err := send(ids); err != nil {
			r.Result, r.Error = "error", err.Error()
			return n
		}
		r.Signals++
		n += len(ids)
		if queued != nil {
			queued(len(ids))
		}
	}
	r.Result = "queued"
	return n
}
