package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"herald/keyops"
	"herald/store"
	"herald/workflows"
)

// Bounds of a replay window over HTTP.
const (
	// MaxReplayEvents caps the events one replay request may queue again;
	// a bigger window is refused (starter redeliver --since has no cap).
	MaxReplayEvents = 10000
	// signalTimeout bounds one signal-with-start.
	signalTimeout = 10 * time.Second
)

// ReplayRequest is the body of POST /v1/ops/subscriptions/replay.
type ReplayRequest struct {
	Subscription string `json:"subscription"`
	// Since and Until (default now) bound when the events were received.
	Since time.Time  `json:"since"`
	Until *time.Time `json:"until,omitempty"`
	// Subject limits the window to one key.
	Subject string `json:"subject,omitempty"`
	// DryRun lists what would be queued again and sends nothing.
	DryRun bool   `json:"dryRun,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ReplayKey is one key of a replay window, as starter reports it.
type ReplayKey = keyops.WindowKey

// ReplayResult is the answer of a replay window.
type ReplayResult struct {
	Subscription string      `json:"subscription"`
	Subject      string      `json:"subject,omitempty"`
	Since        time.Time   `json:"since"`
	Until        time.Time   `json:"until"`
	DryRun       bool        `json:"dryRun"`
	Events       int         `json:"events"`
	Queued       int         `json:"queued"`
	Keys         []ReplayKey `json:"keys"`
}

// replay queues again, per subject key in key order, every event of the
// subscription received in [since, until), in sequence order, as `starter
// redeliver --subscription S --since TIME` does: one redeliver
// signal-with-start per 500 events of a key, with the token's name as
// actor. With dryRun it sends nothing and lists what it would.
func (h *Handler) replay(ctx context.Context, w http.ResponseWriter, cred store.TokenCredential, req ReplayRequest) {
	sub, ok := h.ownSubscription(ctx, w, cred, req.Subscription)
	if !ok {
		return
	}
	now := time.Now()
	until := now
	if req.Until != nil {
		until = *req.Until
	}
	switch {
	case req.Since.IsZero():
		badParameter(w, "since", "required: an RFC 3339 time")
		return
	case req.Since.After(now):
		badParameter(w, "since", "is in the future")
		return
	case !req.Since.Before(until):
		badParameter(w, "until", "must be after since")
		return
	case req.Subject != "" && !validSubjectKey(req.Subject):
		badParameter(w, "subject", "not a subject key (1 to 200 bytes of printable UTF-8)")
		return
	case sub.State == store.StateCancelled:
		writeProblem(w, newProblem(http.StatusConflict, CodeNothingToDo, "subscription "+sub.ID+" is cancelled: nothing is delivered to it any more"))
		return
	}
	// Counted first: a window over the cap is refused without reading it.
	n, err := h.store.CountWindowEvents(ctx, sub.ID, req.Subject, req.Since, until, MaxReplayEvents+1)
	if err != nil {
		h.fail(w, "replay", err)
		return
	}
	if n > MaxReplayEvents {
		badParameter(w, "since", fmt.Sprintf("the window holds more than %d events: replay it in smaller windows, or with starter redeliver --since",
			MaxReplayEvents))
		return
	}
	keys, err := h.store.WindowEvents(ctx, sub.ID, req.Subject, req.Since, until)
	if err != nil {
		h.fail(w, "replay", err)
		return
	}
	out := ReplayResult{Subscription: sub.ID, Subject: req.Subject, Since: req.Since, Until: until, DryRun: req.DryRun}
	out.Keys, out.Events = keyops.PlanWindow(sub.ID, keys)
	switch {
	case out.Events == 0:
		writeProblem(w, newProblem(http.StatusConflict, CodeNothingToDo,
			fmt.Sprintf("no events of %s were received in the window: nothing to replay", sub.ID)))
		return
	case out.Events > MaxReplayEvents:
		badParameter(w, "since", fmt.Sprintf("the window holds %d events, more than %d: replay it in smaller windows, or with starter redeliver --since",
			out.Events, MaxReplayEvents))
		return
	case req.DryRun:
		for i := range out.Keys {
			out.Keys[i].Result = "dry-run"
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if h.temporal == nil {
		h.fail(w, "replay", errors.New("the API was started without a Temporal client"))
		return
	}
	// The window is read: the signals need no connection of the API's, so
	// a replay of up to replayBudget does not hold a readers' slot, which
	// three replays of one app would take from every other app's reads.
	readerDone(ctx)
	out.Queued = h.queueWindow(ctx, cred, req.Reason, sub, keys, out.Keys)
	if out.Queued < out.Events {
		h.log.Warn("api: replay stopped early", zap.String("subscription", sub.ID),
			zap.Int("events", out.Events), zap.Int("queued", out.Queued))
	}
	writeJSON(w, http.StatusOK, out)
}

// Bounds of a replay's signals: keys are sent replayParallel at a time
// (each key's signals in order), and no key is begun once the request has
// run for replayBudget, so the answer (which says which keys were queued
// and which skipped) goes out before the server's WriteTimeout cuts it.
const (
	replayParallel = 16
	replayBudget   = WriteTimeout / 2
)

// queueWindow sends the window's keys their redeliver signals, in parallel
// across keys and in order within one, recording each key's result on
// results; keys not begun within the budget, or after a key's signal
// failed (Temporal is most likely unreachable), stay skipped. It returns
// the events queued.
func (h *Handler) queueWindow(ctx context.Context, cred store.TokenCredential, reason string, sub store.Subscription,
	keys []store.KeyEvents, results []keyops.WindowKey) int {
	deadline := h.now().Add(h.replayBudget)
	var queued atomic.Int64
	var failed atomic.Bool
	sem := make(chan struct{}, replayParallel)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		if failed.Load() || !h.now().Before(deadline) {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := &results[i]
			params := keyops.IdentityParams(sub, k.Subject)
			n := keyops.QueueKey(k, r, func(ids []string) error {
				payload := workflows.RedeliverSignal{EventIDs: ids, Actor: cred.Name, Reason: reason}
				return h.signalWithStart(ctx, r.WorkflowID, payload, params)
			}, nil)
			queued.Add(int64(n))
			if r.Result == "error" {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	return int(queued.Load())
}

// signalWithStart sends a redeliver signal to a key's workflow, starting it
// first when it is not running, as starter does.
func (h *Handler) signalWithStart(ctx context.Context, id string, payload any, params workflows.Params) error {
	ctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	return keyops.SignalWithStart(ctx, h.temporal, id, workflows.SignalRedeliver, payload, params)
}
