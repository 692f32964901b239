package api

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"herald/store"
	"herald/workflows"
)

// The console's pages: each reads what the operations API's read of the
// same name reads, in the token's scope, and renders it.

// consoleKeyDeliveries and consoleKeyAudit bound the lists of a key's page.
const (
	consoleKeyDeliveries = 20
	consoleKeyAudit      = 50
)

func (c *console) appsPage(w http.ResponseWriter, r *http.Request, pc *pageCtx) {
	apps, err := c.h.appsInScope(r.Context(), pc.scope, "")
	if err != nil {
		c.readFailed(w, r, pc, "the apps", err)
		return
	}
	v := appsView{Apps: apps}
	seen := map[string]bool{}
	for _, a := range apps {
		for _, s := range append(a.Subscriptions, a.Subscribers...) {
			if !seen[s.ID] {
				seen[s.ID] = true
				v.Subscriptions = append(v.Subscriptions, s)
			}
		}
	}
	slices.SortFunc(v.Subscriptions, func(a, b store.Subscription) int { return strings.Compare(a.ID, b.ID) })
	c.render(w, r, pc, http.StatusOK, "apps", view{Title: "Apps", Data: v})
}

// appsView is the apps page's data: the apps in scope and every
// subscription in scope, once.
type appsView struct {
	Apps          []OpsApp
	Subscriptions []store.Subscription
}

func (c *console) appPage(w http.ResponseWriter, r *http.Request, pc *pageCtx, app string) {
	apps, err := c.h.appsInScope(r.Context(), pc.scope, app)
	if err != nil {
		c.readFailed(w, r, pc, "App "+app, err)
		return
	}
	c.render(w, r, pc, http.StatusOK, "app", view{Title: "App " + app, Data: apps[0]})
}

// keysView is the keys page's data.
type keysView struct {
	OpsKeys
	Statuses     []string
	App          string
	Subscription string
	// Next links the next page; empty on the last.
	Next template.URL
}

func (c *console) keysPage(w http.ResponseWriter, r *http.Request, pc *pageCtx) {
	q := r.URL.Query()
	if q.Get("status") == "" {
		q.Set("status", workflows.StatusFailed)
	}
	keys, err := c.h.keysInScope(r.Context(), pc.scope, q)
	if err != nil {
		c.readFailed(w, r, pc, "the keys", err)
		return
	}
	v := keysView{OpsKeys: keys, Statuses: KeyStatuses, App: q.Get("app"), Subscription: q.Get("subscription")}
	if keys.NextPageToken != "" {
		v.Next = nextPage("/keys", q, keys.NextPageToken)
	}
	c.render(w, r, pc, http.StatusOK, "keys", view{Title: "Keys " + keys.Status, Data: v})
}

// nextPage links the console's page path with the query q and page_token
// set to token.
func nextPage(path string, q url.Values, token string) template.URL {
	next := url.Values{}
	for k, v := range q {
		next[k] = v
	}
	next.Set("page_token", token)
	return template.URL(ConsolePrefix + path + "?" + next.Encode()) // encoded by url.Values
}

// keyView is a key's page's data.
type keyView struct {
	WorkflowID   string
	Subscription string
	Subject      string
	// Running: the key's workflow runs (it runs while the key holds
	// events); Status and RunID are its own then.
	Running    bool
	Status     string
	RunID      string
	Head       *store.KeyHead
	Deliveries OpsDeliveries
	Audit      []store.AuditRow
}

// keyPage shows one key: its workflow's status with a link to it in the
// Temporal UI, its head, its latest deliveries and its audit trail.
func (c *console) keyPage(w http.ResponseWriter, r *http.Request, pc *pageCtx, id string) {
	ctx := r.Context()
	sub, subject, ok := workflows.SplitDeliveryID(id)
	what := "Key " + id
	if !ok || !validSubscription(sub) || !validSubjectKey(subject) || !store.InScope(pc.scope, sub) {
		c.notFound(w, r, pc, what)
		return
	}
	subs, err := c.h.store.ScopedSubscriptions(ctx, pc.scope, "", sub)
	if err != nil || len(subs) == 0 {
		if err == nil {
			err = store.ErrNotFound
		}
		c.readFailed(w, r, pc, what, err)
		return
	}
	v := keyView{WorkflowID: id, Subscription: sub, Subject: subject}
	if v.Running, v.Status, v.RunID, err = c.h.runningKey(ctx, id); err != nil {
		c.readFailed(w, r, pc, what, err)
		return
	}
	heads, err := c.h.store.KeyHeads(ctx, []string{sub}, []string{subject})
	if err != nil {
		c.readFailed(w, r, pc, what, err)
		return
	}
	if hd, ok := heads[[2]string{sub, subject}]; ok {
		v.Head = &hd
	}
	q := url.Values{"subscription": {sub}, "subject": {subject}, "limit": {fmt.Sprint(consoleKeyDeliveries)}}
	if v.Deliveries, err = c.h.deliveriesInScope(ctx, pc.scope, q); err != nil {
		c.readFailed(w, r, pc, what, err)
		return
	}
	f := store.AuditFilter{TargetID: id, TargetExact: true, Limit: consoleKeyAudit}
	if pc.scope != "" {
		// A Retention workflow may run under a key's workflow id: its rows
		// are an operator's (auditInScope).
		f.TargetType = store.TargetDelivery
	}
	if v.Audit, err = c.h.store.ListAudit(ctx, f); err != nil {
		c.readFailed(w, r, pc, what, err)
		return
	}
	c.render(w, r, pc, http.StatusOK, "key", view{Title: "Key " + subject + " of " + sub, Data: v})
}

// runningKey asks Temporal for the workflow id's latest run: its status
// and run when it runs, or running false. A describe, not a visibility
// query: no visibility lag, and no query syntax for a subject key's quotes
// to break.
func (h *Handler) runningKey(ctx context.Context, id string) (running bool, status, runID string, err error) {
	if h.temporal == nil {
		return false, "", "", fmt.Errorf("key %s: the API was started without a Temporal client", id)
	}
	callCtx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	resp, err := h.temporal.DescribeWorkflowExecution(callCtx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, "", "", nil
	}
	if err != nil {
		return false, "", "", fmt.Errorf("key %s: %w", id, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return false, "", "", nil
	}
	if p := info.GetSearchAttributes().GetIndexedFields()[workflows.SAStatus.GetName()]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &status)
	}
	return true, status, info.GetExecution().GetRunId(), nil
}

// eventView is an event's page's data.
type eventView struct {
	OpsEvent
	// App is the source app the request named (for ids several apps used).
	App string
}

func (c *console) eventPage(w http.ResponseWriter, r *http.Request, pc *pageCtx, id string) {
	app := r.URL.Query().Get("app")
	ev, err := c.h.eventInScope(r.Context(), pc.scope, app, id)
	if err != nil {
		c.readFailed(w, r, pc, "Event "+id, err)
		return
	}
	c.render(w, r, pc, http.StatusOK, "event", view{Title: "Event " + ev.ID, Data: eventView{OpsEvent: ev, App: app}})
}

// deliveriesView is the deliveries page's data: the listing and the
// filters as given.
type deliveriesView struct {
	OpsDeliveries
	Statuses []string
	Filter   map[string]string
	Next     template.URL
}

func (c *console) deliveriesPage(w http.ResponseWriter, r *http.Request, pc *pageCtx) {
	q := r.URL.Query()
	// An empty field of the filter form is no filter.
	for k, v := range q {
		if len(v) == 1 && v[0] == "" {
			q.Del(k)
		}
	}
	page, err := c.h.deliveriesInScope(r.Context(), pc.scope, q)
	if err != nil {
		c.readFailed(w, r, pc, "the deliveries", err)
		return
	}
	v := deliveriesView{OpsDeliveries: page, Statuses: store.OutcomeStatuses, Filter: map[string]string{}}
	for _, k := range []string{"status", "app", "subscription", "type", "subject", "since", "until", "limit"} {
		v.Filter[k] = q.Get(k)
	}
	if page.NextPageToken != "" {
		v.Next = nextPage("/deliveries", q, page.NextPageToken)
	}
	c.render(w, r, pc, http.StatusOK, "deliveries", view{Title: "Deliveries", Data: v})
}

func (c *console) auditPage(w http.ResponseWriter, r *http.Request, pc *pageCtx) {
	q := r.URL.Query()
	target := q.Get("target")
	trail, err := c.h.auditInScope(r.Context(), pc.scope, target, q)
	if err != nil {
		c.readFailed(w, r, pc, "Target "+target, err)
		return
	}
	c.render(w, r, pc, http.StatusOK, "audit", view{Title: "Audit trail of " + target, Data: trail})
}
