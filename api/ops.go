package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"herald/manifest"
	"herald/publish"
	"herald/store"
)

// OpsPrefix starts every path of the operations API
// (docs/operations-api.md), served on the publishing API's listener.
const OpsPrefix = "/v1/ops/"

// Problem codes of the operations API.
const (
	// CodeBadParameter (400) names the query parameter it refuses.
	CodeBadParameter = "bad_parameter"
	// CodeForbidden (403): an operator token may not publish.
	CodeForbidden = "forbidden"
)

// Bounds of the operations API's lists.
const (
	DefaultKeyLimit = 100
	// MaxKeyLimit is the largest page of keys; a bigger limit is clamped.
	MaxKeyLimit = 1000
	// MaxAuditLimit is the largest page of audit rows; a bigger limit is clamped.
	MaxAuditLimit = store.MaxAuditLimit
)

// scopeOf is what cred may see: "" for an operator token, else its app.
func scopeOf(cred store.TokenCredential) string {
	if cred.Operator {
		return ""
	}
	return cred.App
}

// serveOps answers the operations API for cred: its reads (GET) and
// actions (POST).
func (h *Handler) serveOps(w http.ResponseWriter, r *http.Request, cred store.TokenCredential) {
	scope := scopeOf(cred)
	var err error
	// Split the escaped path, so that an escaped "/" stays in its segment.
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), OpsPrefix), "/")
	for i, p := range parts {
		if parts[i], err = url.PathUnescape(p); err != nil {
			writeProblem(w, newProblem(http.StatusNotFound, CodeNotFound, "no such resource of the operations API"))
			return
		}
	}
	switch {
	case isOpsAction(parts):
		h.serveOpsAction(w, r, cred, parts[0], parts[1])
	case len(parts) == 1 && parts[0] == "apps":
		h.opsApps(w, r, scope, "")
	case len(parts) == 2 && parts[0] == "apps" && parts[1] != "":
		h.opsApps(w, r, scope, parts[1])
	case len(parts) == 2 && parts[0] == "events" && parts[1] != "":
		h.opsEvent(w, r, scope, parts[1])
	case len(parts) == 1 && parts[0] == "deliveries":
		h.opsDeliveries(w, r, scope)
	case len(parts) == 1 && parts[0] == "keys":
		h.opsKeys(w, r, scope)
	case len(parts) == 1 && parts[0] == "audit":
		h.opsAudit(w, r, scope)
	default:
		writeProblem(w, newProblem(http.StatusNotFound, CodeNotFound, "no such resource of the operations API"))
	}
}

// isOpsAction reports whether the path's segments (after OpsPrefix) name
// an action: keys/{action} or subscriptions/{action}, which are POSTs; the
// rest are reads (GET).
func isOpsAction(parts []string) bool {
	return len(parts) == 2 && (parts[0] == "keys" || parts[0] == "subscriptions") && parts[1] != ""
}

// opsMethod is the one method the operations API's (escaped) path takes.
func opsMethod(path string) string {
	if isOpsAction(strings.Split(strings.TrimPrefix(path, OpsPrefix), "/")) {
		return http.MethodPost
	}
	return http.MethodGet
}

// notFound answers 404 for an unknown id or one out of the token's scope:
// the answer is the same, so a token learns nothing of other apps.
func notFound(w http.ResponseWriter, what string) {
	writeProblem(w, newProblem(http.StatusNotFound, CodeNotFound, what+" is unknown, or not visible to this token"))
}

// badParameter answers 400 naming the parameter.
func badParameter(w http.ResponseWriter, name, detail string) {
	p := newProblem(http.StatusBadRequest, CodeBadParameter, name+": "+detail)
	p.Parameter = name
	writeProblem(w, p)
}

// OpsApp is an app as the operations API shows it.
type OpsApp struct {
	store.App
	// Subscriptions are the app's own (as subscriber), with their state.
	Subscriptions []store.Subscription `json:"subscriptions"`
	// Subscribers are the subscriptions to the event types the app
	// publishes, with their state.
	Subscribers []store.Subscription `json:"subscribers"`
}

// OpsApps is the answer of GET /v1/ops/apps.
type OpsApps struct {
	Apps []OpsApp `json:"apps"`
}

// opsApps lists the apps in scope with their subscriptions, or shows one.
func (h *Handler) opsApps(w http.ResponseWriter, r *http.Request, scope, one string) {
	ctx := r.Context()
	if one != "" && scope != "" && one != scope {
		notFound(w, "app "+strconv.Quote(one))
		return
	}
	apps, err := h.store.ListApps(ctx)
	if err != nil {
		h.fail(w, "list apps", err)
		return
	}
	subs, err := h.store.ScopedSubscriptions(ctx, scope, "", "")
	if err != nil {
		h.fail(w, "list subscriptions", err)
		return
	}
	out := OpsApps{Apps: []OpsApp{}}
	for _, a := range apps {
		if (scope != "" && a.ID != scope) || (one != "" && a.ID != one) {
			continue
		}
		oa := OpsApp{App: a, Subscriptions: []store.Subscription{}, Subscribers: []store.Subscription{}}
		for _, s := range subs {
			if s.App == a.ID {
				oa.Subscriptions = append(oa.Subscriptions, s)
			}
			if owner, _, _ := strings.Cut(s.Type, "."); owner == a.ID {
				oa.Subscribers = append(oa.Subscribers, s)
			}
		}
		out.Apps = append(out.Apps, oa)
	}
	if one != "" {
		if len(out.Apps) == 0 {
			notFound(w, "app "+strconv.Quote(one))
			return
		}
		writeJSON(w, http.StatusOK, out.Apps[0])
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// OpsEvent is the answer of GET /v1/ops/events/{id}: the event and its
// delivery to each subscription in scope.
type OpsEvent struct {
	ID           string          `json:"id"`
	Seq          int64           `json:"seq"`
	SourceApp    string          `json:"sourceApp"`
	Type         string          `json:"type"`
	Version      int             `json:"version"`
	Subject      string          `json:"subject"`
	State        string          `json:"state"`
	ReceivedAt   time.Time       `json:"receivedAt"`
	DispatchedAt *time.Time      `json:"dispatchedAt,omitempty"`
	CloudEvent   json.RawMessage `json:"cloudEvent"`
	// Deliveries are the event's outcome for each subscription in scope.
	Deliveries []store.EventOutcome `json:"deliveries"`
}

// opsEvent shows one event with its deliveries.
func (h *Handler) opsEvent(w http.ResponseWriter, r *http.Request, scope, id string) {
	ctx := r.Context()
	q := r.URL.Query()
	app := q.Get("app")
	if app != "" && !manifest.ValidAppID(app) {
		badParameter(w, "app", "not an app id")
		return
	}
	ev, err := h.store.ScopedEvent(ctx, scope, app, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound(w, "event "+strconv.Quote(id))
		return
	case errors.Is(err, store.ErrAmbiguousEvent):
		badParameter(w, "app", "the event id names events of several apps (ids are unique per source app): give the source app")
		return
	case err != nil:
		h.fail(w, "get event", err)
		return
	}
	outs, err := h.store.EventOutcomesOf(ctx, ev.ID, ev.Type, ev.Version)
	if err != nil {
		h.fail(w, "outcomes of event", err)
		return
	}
	out := OpsEvent{ID: ev.ID, Seq: ev.Seq, SourceApp: ev.SourceApp, Type: ev.Type, Version: ev.Version,
		Subject: ev.Subject, State: ev.State, ReceivedAt: ev.ReceivedAt, DispatchedAt: ev.DispatchedAt,
		CloudEvent: json.RawMessage(ev.Envelope), Deliveries: []store.EventOutcome{}}
	for _, o := range outs {
		// A publisher sees every subscriber's delivery of its event; a
		// subscriber only its own.
		if scope == "" || ev.SourceApp == scope || strings.HasPrefix(o.SubscriptionID, scope+":") {
			out.Deliveries = append(out.Deliveries, o)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// OpsDeliveries is the answer of GET /v1/ops/deliveries.
type OpsDeliveries struct {
	Deliveries []store.Delivery `json:"deliveries"`
	// Total counts what the filters match on every page, up to
	// store.DeliveryTotalCap; TotalExact is false when there are more.
	Total      int  `json:"total"`
	TotalExact bool `json:"totalExact"`
	// Limit is the page size used (an oversized limit is clamped).
	Limit         int    `json:"limit"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// opsDeliveries lists deliveries from the log with filters and a total.
func (h *Handler) opsDeliveries(w http.ResponseWriter, r *http.Request, scope string) {
	q := r.URL.Query()
	f := store.DeliveryFilter{Scope: scope, App: q.Get("app"), Subscription: q.Get("subscription"),
		EventType: q.Get("type"), Subject: q.Get("subject"), PageToken: q.Get("page_token")}
	switch {
	case f.App != "" && !manifest.ValidAppID(f.App):
		badParameter(w, "app", "not an app id")
		return
	case f.Subscription != "" && !validSubscription(f.Subscription):
		badParameter(w, "subscription", "not a subscription id (<subscriber-app>:<event-type>@<version>)")
		return
	case f.EventType != "" && !validEventType(f.EventType):
		badParameter(w, "type", "not an event type (<app>.<name>)")
		return
	case f.Subject != "" && !validSubjectKey(f.Subject):
		badParameter(w, "subject", "not a subject key (1 to 200 bytes of printable UTF-8)")
		return
	}
	if s := q.Get("status"); s != "" {
		for _, st := range strings.Split(s, ",") {
			if !slices.Contains(store.OutcomeStatuses, st) {
				badParameter(w, "status", fmt.Sprintf("%q is not one of %s", st, strings.Join(store.OutcomeStatuses, ", ")))
				return
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				badParameter(w, p.name, "not an RFC 3339 time (2006-01-02T15:04:05Z)")
				return
			}
			*p.into = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		badParameter(w, "until", "must be after since")
		return
	}
	limit, ok := limitParam(w, q, store.DefaultDeliveryLimit, store.MaxDeliveryLimit)
	if !ok {
		return
	}
	f.Limit = limit
	if f.PageToken != "" && store.ValidatePageToken(f.PageToken) != nil {
		badParameter(w, "page_token", "not a page token of this listing")
		return
	}
	page, err := h.store.ListDeliveries(r.Context(), f)
	if errors.Is(err, store.ErrBadPageToken) {
		badParameter(w, "page_token", "a page token of a listing with other filters: give the same filters")
		return
	}
	if err != nil {
		h.fail(w, "list deliveries", err)
		return
	}
	writeJSON(w, http.StatusOK, OpsDeliveries{Deliveries: page.Deliveries, Total: page.Total, TotalExact: page.TotalExact,
		Limit: limit, NextPageToken: page.NextPageToken})
}

// limitParam reads the limit parameter: def when absent, clamped to max, a
// number of at least 1.
func limitParam(w http.ResponseWriter, q url.Values, def, max int) (int, bool) {
	s := q.Get("limit")
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
			return max, true
		}
		badParameter(w, "limit", "must be a whole number of at least 1")
		return 0, false
	}
	return min(n, max), true
}

// validSubscription reports whether s is a subscription id.
func validSubscription(s string) bool {
	app, rest, ok := strings.Cut(s, ":")
	at := strings.LastIndexByte(rest, '@')
	if !ok || !manifest.ValidAppID(app) || at < 0 || !validEventType(rest[:at]) {
		return false
	}
	v, err := strconv.Atoi(rest[at+1:])
	return err == nil && v >= 1 && v <= manifest.MaxVersion && strconv.Itoa(v) == rest[at+1:]
}

// validSubjectKey reports whether s is a subject key: 1 to 200 bytes of
// printable UTF-8.
func validSubjectKey(s string) bool {
	return s != "" && len(s) <= publish.MaxSubjectBytes && utf8.ValidString(s) &&
		strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

// validEventType reports whether s is an event type: <app>.<name>.
func validEventType(s string) bool {
	app, name, ok := strings.Cut(s, ".")
	return ok && manifest.ValidAppID(app) && manifest.ValidEventName(name)
}

// OpsAudit is the answer of GET /v1/ops/audit.
type OpsAudit struct {
	Target string           `json:"target"`
	Rows   []store.AuditRow `json:"rows"`
}

// opsAudit lists the audit trail of one target, newest first. An app
// token may read the trail of its app, of a subscription in its scope, of
// a key of one, and of an event it may see.
func (h *Handler) opsAudit(w http.ResponseWriter, r *http.Request, scope string) {
	q := r.URL.Query()
	target := q.Get("target")
	if target == "" {
		badParameter(w, "target", "required: an app, subscription, delivery workflow or event id")
		return
	}
	if strings.ContainsRune(target, '*') {
		badParameter(w, "target", "an exact target id; no wildcard")
		return
	}
	limit, ok := limitParam(w, q, store.DefaultAuditLimit, MaxAuditLimit)
	if !ok {
		return
	}
	visible, err := h.targetInScope(r.Context(), scope, target)
	if err != nil {
		h.fail(w, "audit", err)
		return
	}
	if !visible {
		notFound(w, "target "+strconv.Quote(target))
		return
	}
	rows, err := h.store.ListAudit(r.Context(), store.AuditFilter{TargetID: target, Limit: limit})
	if err != nil {
		h.fail(w, "audit", err)
		return
	}
	writeJSON(w, http.StatusOK, OpsAudit{Target: target, Rows: nonNil(rows)})
}

// targetInScope reports whether an audit target id is the scope's to read.
func (h *Handler) targetInScope(ctx context.Context, scope, target string) (bool, error) {
	if scope == "" || target == scope {
		return true, nil
	}
	if sub, rest, ok := strings.Cut(target, ":"); ok && sub == "deliver" {
		// deliver:<subscription>:<subject>: the subscription ends at the
		// colon after its @version.
		at := strings.IndexByte(rest, '@')
		if at < 0 {
			return false, nil
		}
		end := strings.IndexByte(rest[at:], ':')
		if end < 0 {
			return false, nil
		}
		return store.InScope(scope, rest[:at+end]), nil
	}
	if strings.Contains(target, ":") {
		return store.InScope(scope, target), nil
	}
	if strings.HasPrefix(target, scope+".") {
		return true, nil // a declaration of the app's: <type>@<version>
	}
	if _, err := h.store.ScopedEvent(ctx, scope, "", target); err == nil || errors.Is(err, store.ErrAmbiguousEvent) {
		return true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	return false, nil
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
