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
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"herald/manifest"
	"herald/publish"
	"herald/store"
	"herald/workflows"
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
	// Answers hold the token's deliveries and errors, as the console's
	// pages do: no cache keeps them.
	w.Header().Set("Cache-Control", "no-store")
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
	// A key's action waits for its workflow, not for the database.
	if !isOpsAction(parts) || parts[0] != "keys" {
		if p, busy := h.takeApp(r.Context(), cred); busy {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, p)
			return
		}
		if !h.acquireReader(r.Context()) {
			h.leaveApp(cred)
			return // the client went away
		}
		release := sync.OnceFunc(func() { h.releaseReader(); h.leaveApp(cred) })
		defer release()
		// A replay gives its slot back before it signals (readerDone).
		r = r.WithContext(context.WithValue(r.Context(), readerKey{}, release))
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
	apps, err := h.appsInScope(r.Context(), scope, one)
	if err != nil {
		h.readFailed(w, "list apps", "app "+strconv.Quote(one), err)
		return
	}
	if one != "" {
		writeJSON(w, http.StatusOK, apps[0])
		return
	}
	writeJSON(w, http.StatusOK, OpsApps{Apps: apps})
}

// appsInScope lists the apps in scope with their subscriptions; with one,
// only that app, or store.ErrNotFound.
func (h *Handler) appsInScope(ctx context.Context, scope, one string) ([]OpsApp, error) {
	if one != "" && scope != "" && one != scope {
		return nil, store.ErrNotFound
	}
	apps, err := h.store.ListApps(ctx)
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	subs, err := h.store.ScopedSubscriptions(ctx, scope, "", "")
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	out := []OpsApp{}
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
		out = append(out, oa)
	}
	if one != "" && len(out) == 0 {
		return nil, store.ErrNotFound
	}
	return out, nil
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
	ev, err := h.eventInScope(r.Context(), scope, r.URL.Query().Get("app"), id)
	if err != nil {
		h.readFailed(w, "get event", "event "+strconv.Quote(id), err)
		return
	}
	writeJSON(w, http.StatusOK, ev)
}

// eventInScope is the event id (of the source app app, when given) with
// its deliveries in scope, or store.ErrNotFound, or a *paramError.
func (h *Handler) eventInScope(ctx context.Context, scope, app, id string) (OpsEvent, error) {
	if app != "" && !manifest.ValidAppID(app) {
		return OpsEvent{}, &paramError{"app", "not an app id"}
	}
	ev, err := h.store.ScopedEvent(ctx, scope, app, id)
	switch {
	case errors.Is(err, store.ErrAmbiguousEvent):
		return OpsEvent{}, &paramError{"app", "the event id names events of several apps (ids are unique per source app): give the source app"}
	case err != nil:
		return OpsEvent{}, err
	}
	outs, err := h.store.EventOutcomesOf(ctx, ev.ID, ev.Type, ev.Version)
	if err != nil {
		return OpsEvent{}, fmt.Errorf("outcomes of event: %w", err)
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
	return out, nil
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
	page, err := h.deliveriesInScope(r.Context(), scope, r.URL.Query())
	if err != nil {
		h.readFailed(w, "list deliveries", "", err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// deliveriesInScope lists the deliveries in scope that the query's
// filters (those of GET /v1/ops/deliveries) match, or a *paramError.
func (h *Handler) deliveriesInScope(ctx context.Context, scope string, q url.Values) (OpsDeliveries, error) {
	f := store.DeliveryFilter{Scope: scope, App: q.Get("app"), Subscription: q.Get("subscription"),
		EventType: q.Get("type"), Subject: q.Get("subject"), PageToken: q.Get("page_token")}
	switch {
	case f.App != "" && !manifest.ValidAppID(f.App):
		return OpsDeliveries{}, &paramError{"app", "not an app id"}
	case f.Subscription != "" && !validSubscription(f.Subscription):
		return OpsDeliveries{}, &paramError{"subscription", "not a subscription id (<subscriber-app>:<event-type>@<version>)"}
	case f.EventType != "" && !validEventType(f.EventType):
		return OpsDeliveries{}, &paramError{"type", "not an event type (<app>.<name>)"}
	case f.Subject != "" && !validSubjectKey(f.Subject):
		return OpsDeliveries{}, &paramError{"subject", "not a subject key (1 to 200 bytes of printable UTF-8)"}
	}
	if s := q.Get("status"); s != "" {
		for _, st := range strings.Split(s, ",") {
			if !slices.Contains(store.OutcomeStatuses, st) {
				return OpsDeliveries{}, &paramError{"status", fmt.Sprintf("%q is not one of %s", st, strings.Join(store.OutcomeStatuses, ", "))}
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
				return OpsDeliveries{}, &paramError{p.name, "not an RFC 3339 time (2006-01-02T15:04:05Z)"}
			}
			*p.into = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return OpsDeliveries{}, &paramError{"until", "must be after since"}
	}
	limit, err := limitParam(q, store.DefaultDeliveryLimit, store.MaxDeliveryLimit)
	if err != nil {
		return OpsDeliveries{}, err
	}
	f.Limit = limit
	if f.PageToken != "" && store.ValidatePageToken(f.PageToken) != nil {
		return OpsDeliveries{}, &paramError{"page_token", "not a page token of this listing"}
	}
	page, err := h.store.ListDeliveries(ctx, f)
	if errors.Is(err, store.ErrBadPageToken) {
		return OpsDeliveries{}, &paramError{"page_token", "a page token of a listing with other filters: give the same filters"}
	}
	if err != nil {
		return OpsDeliveries{}, fmt.Errorf("list deliveries: %w", err)
	}
	return OpsDeliveries{Deliveries: page.Deliveries, Total: page.Total, TotalExact: page.TotalExact,
		Limit: limit, NextPageToken: page.NextPageToken}, nil
}

// paramError is a query parameter a read refuses (400 bad_parameter).
type paramError struct{ name, detail string }

func (e *paramError) Error() string { return e.name + ": " + e.detail }

// readFailed answers a read's error: 400 naming the parameter, 404 for
// store.ErrNotFound (what names the missing thing), else 500.
func (h *Handler) readFailed(w http.ResponseWriter, op, what string, err error) {
	var bad *paramError
	switch {
	case errors.As(err, &bad):
		badParameter(w, bad.name, bad.detail)
	case errors.Is(err, store.ErrNotFound):
		notFound(w, what)
	default:
		h.fail(w, op, err)
	}
}

// limitParam reads the limit parameter: def when absent, clamped to max, a
// number of at least 1; else a *paramError.
func limitParam(q url.Values, def, max int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
			return max, nil
		}
		return 0, &paramError{"limit", "must be a whole number of at least 1"}
	}
	return min(n, max), nil
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

// opsAudit lists the audit trail of one target, newest first.
func (h *Handler) opsAudit(w http.ResponseWriter, r *http.Request, scope string) {
	q := r.URL.Query()
	trail, err := h.auditInScope(r.Context(), scope, q.Get("target"), q)
	if err != nil {
		h.readFailed(w, "audit", "target "+strconv.Quote(q.Get("target")), err)
		return
	}
	writeJSON(w, http.StatusOK, trail)
}

// auditInScope is the audit trail of target, newest first, up to the
// query's limit. An app token may read the trail of its app, of a
// subscription in its scope, of a key of one, and of an event it may see;
// another target is store.ErrNotFound.
func (h *Handler) auditInScope(ctx context.Context, scope, target string, q url.Values) (OpsAudit, error) {
	if target == "" {
		return OpsAudit{}, &paramError{"target", "required: an app, subscription, delivery workflow or event id"}
	}
	if strings.ContainsRune(target, '*') {
		return OpsAudit{}, &paramError{"target", "an exact target id; no wildcard"}
	}
	limit, err := limitParam(q, store.DefaultAuditLimit, MaxAuditLimit)
	if err != nil {
		return OpsAudit{}, err
	}
	f, visible, err := h.targetInScope(ctx, scope, target)
	if err != nil {
		return OpsAudit{}, fmt.Errorf("audit: %w", err)
	}
	if !visible {
		return OpsAudit{}, store.ErrNotFound
	}
	f.Limit = limit
	rows, err := h.store.ListAudit(ctx, f)
	if err != nil {
		return OpsAudit{}, fmt.Errorf("audit: %w", err)
	}
	return OpsAudit{Target: target, Rows: nonNil(rows)}, nil
}

// targetInScope reports whether an audit target id is the scope's to read,
// and the filter of the rows it may read: those of the target type for
// which the id is in scope. Ids of different target types may be equal:
// an app and the schema (the database's rows), a Retention workflow
// started under any id, an event id (its publisher chose it) and an
// operator token's. For an event id, only the rows of the events scope
// may see: event ids are unique per source app only, and a row about an
// event carries that event's type. The filter is the query's, so that a
// page holds as many rows as the limit allows when there are that many.
func (h *Handler) targetInScope(ctx context.Context, scope, target string) (store.AuditFilter, bool, error) {
	f := store.AuditFilter{TargetID: target}
	// A subscription id of an app named "deliver" starts as a key's
	// workflow id does, but does not split as one.
	sub, _, isKey := workflows.SplitDeliveryID(target)
	switch {
	case scope == "":
		return f, true, nil
	case target == scope:
		f.TargetType = store.TargetApp
		return f, true, nil
	case isKey:
		f.TargetType = store.TargetDelivery
		return f, store.InScope(scope, sub), nil
	case strings.Contains(target, ":"):
		f.TargetType = store.TargetSubscription
		return f, store.InScope(scope, target), nil
	case strings.HasPrefix(target, scope+"."):
		f.TargetType = store.TargetDeclaration // <type>@<version> of the app's
		return f, true, nil
	}
	evs, err := h.store.ScopedEvents(ctx, scope, target)
	if errors.Is(err, store.ErrNotFound) {
		return f, false, nil
	} else if err != nil {
		return f, false, err
	}
	f.TargetType, f.EventTypes = store.TargetEvent, []string{}
	for _, ev := range evs {
		f.EventTypes = append(f.EventTypes, ev.Type)
	}
	return f, true, nil
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
