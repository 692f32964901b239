package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"go.temporal.io/api/serviceerror"

	"herald/keyops"
	"herald/store"
	"herald/workflows"
)

// Problem codes of the operations API's actions.
const (
	// CodeNothingToDo (409): the action changed nothing; result holds the
	// key's answer (its reason says why), as the Workflow Update gave it.
	CodeNothingToDo = "nothing_to_do"
	// CodeBadRequest (400): the body is not an action's JSON, or the key's
	// workflow refused the request as malformed.
	CodeBadRequest = "bad_request"
)

// KeyActions are the actions of POST /v1/ops/keys/{action}: the Workflow
// Updates of a delivery key (docs/design.md#the-delivery-workflow).
var KeyActions = []string{workflows.UpdateRedeliver, workflows.UpdateCancel, workflows.UpdatePause, workflows.UpdateResume}

// maxActionBody caps an action's request body.
const maxActionBody = 16 << 10

// KeyAction is the body of POST /v1/ops/keys/{action}.
type KeyAction struct {
	Subscription string `json:"subscription"`
	Subject      string `json:"subject"`
	// EventID (cancel only) names a queued event instead of the failed head.
	EventID string `json:"eventId,omitempty"`
	// All (cancel only) cancels everything queued for the key.
	All    bool   `json:"all,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SubscriptionAction is the body of POST /v1/ops/subscriptions/{action}.
type SubscriptionAction struct {
	Subscription string `json:"subscription"`
	Reason       string `json:"reason,omitempty"`
}

// serveOpsAction answers POST /v1/ops/keys/{action} and
// /v1/ops/subscriptions/{action}. An app token acts only on its own
// subscriptions (as subscriber) and their keys; anything else is 404, as an
// unknown key is. The actor of every audit row is the token's name.
func (h *Handler) serveOpsAction(w http.ResponseWriter, r *http.Request, cred store.TokenCredential, kind, action string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	if err != nil {
		writeProblem(w, newProblem(http.StatusBadRequest, CodeBadRequest, "the body could not be read, or is over 16 KiB"))
		return
	}
	switch kind {
	case "keys":
		var a KeyAction
		if err := decodeStrict(body, &a); err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, CodeBadRequest, "the body is not a key action: "+err.Error()))
			return
		}
		h.keyAction(r.Context(), w, cred, action, a)
	case "subscriptions":
		if action == "replay" {
			var req ReplayRequest
			if err := decodeStrict(body, &req); err != nil {
				writeProblem(w, newProblem(http.StatusBadRequest, CodeBadRequest, "the body is not a replay window: "+err.Error()))
				return
			}
			h.replay(r.Context(), w, cred, req)
			return
		}
		var a SubscriptionAction
		if err := decodeStrict(body, &a); err != nil {
			writeProblem(w, newProblem(http.StatusBadRequest, CodeBadRequest, "the body is not a subscription action: "+err.Error()))
			return
		}
		h.subscriptionAction(r.Context(), w, cred, action, a)
	}
}

// decodeStrict decodes one JSON object with no unknown member.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// ownSubscription returns the subscription id that cred may act on, or
// false (answered 404) when it is unknown or not the token's app's.
func (h *Handler) ownSubscription(ctx context.Context, w http.ResponseWriter, cred store.TokenCredential, id string) (store.Subscription, bool) {
	if id == "" {
		badParameter(w, "subscription", "required")
		return store.Subscription{}, false
	}
	if !validSubscription(id) {
		badParameter(w, "subscription", "not a subscription id (<subscriber-app>:<event-type>@<version>)")
		return store.Subscription{}, false
	}
	sub, err := h.store.GetSubscription(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound(w, "subscription "+id)
		return sub, false
	case err != nil:
		h.fail(w, "action", err)
		return sub, false
	case !cred.Operator && sub.App != cred.App:
		notFound(w, "subscription "+id)
		return sub, false
	}
	return sub, true
}

// keyAction runs one Workflow Update on a key and answers what it did: 200
// with the Update's answer when something changed, 409 nothing_to_do with
// the same answer under result when nothing did.
func (h *Handler) keyAction(ctx context.Context, w http.ResponseWriter, cred store.TokenCredential, action string, a KeyAction) {
	if !slices.Contains(KeyActions, action) {
		notFound(w, "action "+action)
		return
	}
	sub, ok := h.ownSubscription(ctx, w, cred, a.Subscription)
	if !ok {
		return
	}
	switch {
	case !validSubjectKey(a.Subject):
		badParameter(w, "subject", "required: a subject key (1 to 200 bytes of printable UTF-8)")
		return
	case a.EventID != "" && action != workflows.UpdateCancel:
		badParameter(w, "eventId", "only cancel takes an event id (starter redeliver --event delivers an event of the log again)")
		return
	case a.All && action != workflows.UpdateCancel:
		badParameter(w, "all", "only cancel takes all")
		return
	case a.All && a.EventID != "":
		badParameter(w, "all", "give eventId or all, not both")
		return
	}
	var payload any
	switch action {
	case workflows.UpdateRedeliver:
		payload = workflows.RedeliverSignal{Actor: cred.Name, Reason: a.Reason}
	case workflows.UpdateCancel:
		payload = workflows.CancelSignal{EventID: a.EventID, All: a.All, Actor: cred.Name, Reason: a.Reason}
	default:
		payload = workflows.ControlSignal{Actor: cred.Name, Reason: a.Reason}
	}
	if h.temporal == nil {
		h.fail(w, "key action", errors.New("the API was started without a Temporal client"))
		return
	}
	id := workflows.DeliveryID(sub.ID, a.Subject)
	// The same Update, answered the same way, as `starter
	// redeliver|cancel|pause|resume` sends.
	// A key with no run gets one that takes a resume or a pause when
	// PostgreSQL says so (keyops.StartsKey).
	ask := keyops.StartsKey(action)
	res, err := keyops.Act(ctx, h.temporal, id, action, payload, func(ctx context.Context) (workflows.Params, bool, error) {
		ok, err := ask(h.store, ctx, sub.ID, a.Subject)
		return keyops.IdentityParams(sub, a.Subject), ok, err
	})
	var rejected *keyops.RejectedError
	var missing *serviceerror.NotFound
	switch {
	case errors.As(err, &missing) && action == workflows.UpdatePause:
		notFound(w, "the key "+id+" (the log holds no event of it for a subscription that is not cancelled)")
		return
	case errors.As(err, &missing):
		notFound(w, "the key's workflow "+id+" (it runs while the key holds events)")
		return
	case errors.As(err, &rejected):
		writeProblem(w, newProblem(http.StatusBadRequest, CodeBadRequest, "the key refused the request: "+rejected.Msg))
		return
	case err != nil:
		h.fail(w, "key action", fmt.Errorf("%s %s: %w", action, id, err))
		return
	}
	if !res.Changed {
		p := newProblem(http.StatusConflict, CodeNothingToDo, fmt.Sprintf("%s changed nothing: %s", action, res.Reason))
		p.Result = &res
		writeProblem(w, p)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// subscriptionAction pauses or resumes a subscription, as `starter
// subscriptions pause|resume` does: 200 with the subscription afterwards,
// 409 nothing_to_do when it was so already or may not be (a cancelled one).
func (h *Handler) subscriptionAction(ctx context.Context, w http.ResponseWriter, cred store.TokenCredential, action string, a SubscriptionAction) {
	if action != "pause" && action != "resume" {
		notFound(w, "action "+action)
		return
	}
	before, ok := h.ownSubscription(ctx, w, cred, a.Subscription)
	if !ok {
		return
	}
	after, err := h.store.SetSubscriptionPaused(ctx, before.ID, action == "pause", cred.Name, a.Reason)
	var state *store.StateError
	switch {
	case errors.As(err, &state):
		writeProblem(w, newProblem(http.StatusConflict, CodeNothingToDo, state.Error()))
		return
	case err != nil:
		h.fail(w, "subscription action", err)
		return
	case before.State == after.State && before.Reason == after.Reason:
		writeProblem(w, newProblem(http.StatusConflict, CodeNothingToDo,
			fmt.Sprintf("subscription %s is %s already", after.ID, after.State)))
		return
	}
	writeJSON(w, http.StatusOK, after)
}
