package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"herald/keyops"
	"herald/manifest"
	"herald/store"
	"herald/workflows"
)

// KeyStatuses are the statuses GET /v1/ops/keys lists keys by.
var KeyStatuses = []string{workflows.StatusFailed, workflows.StatusExhausted, workflows.StatusPaused, workflows.StatusRetrying, workflows.StatusUnreachable}

// temporalCallTimeout bounds one visibility call.
const temporalCallTimeout = 10 * time.Second

// OpsKey is a running delivery key and its head, as the log holds it.
type OpsKey struct {
	WorkflowID string `json:"workflowId"`
	// RunID is the run the console links to in the Temporal UI; not part
	// of the API's answer.
	RunID        string    `json:"-"`
	Subscription string    `json:"subscription"`
	Subject      string    `json:"subject"`
	Status       string    `json:"status"`
	StartedAt    time.Time `json:"startedAt"`
	// Head is the key's oldest queued or failed event; absent when the log
	// holds none for the key.
	Head *store.KeyHead `json:"head,omitempty"`
}

// OpsKeys is the answer of GET /v1/ops/keys.
type OpsKeys struct {
	Status        string   `json:"status"`
	Keys          []OpsKey `json:"keys"`
	Limit         int      `json:"limit"`
	NextPageToken string   `json:"nextPageToken,omitempty"`
}

// opsKeys lists the running keys in one status.
func (h *Handler) opsKeys(w http.ResponseWriter, r *http.Request, scope string) {
	keys, err := h.keysInScope(r.Context(), scope, r.URL.Query())
	if err != nil {
		h.readFailed(w, "list keys", "", err)
		return
	}
	writeJSON(w, http.StatusOK, keys)
}

// keysInScope lists the running keys in one status from Temporal's
// visibility (which lags status changes by a second or so), limited to the
// subscriptions in scope, each with its head from the log. The query holds
// the filters of GET /v1/ops/keys; a bad one is a *paramError.
func (h *Handler) keysInScope(ctx context.Context, scope string, q url.Values) (OpsKeys, error) {
	status := q.Get("status")
	if !slices.Contains(KeyStatuses, status) {
		return OpsKeys{}, &paramError{"status", "required: one of " + strings.Join(KeyStatuses, ", ")}
	}
	app, sub := q.Get("app"), q.Get("subscription")
	if app != "" && !manifest.ValidAppID(app) {
		return OpsKeys{}, &paramError{"app", "not an app id"}
	}
	if sub != "" && !validSubscription(sub) {
		return OpsKeys{}, &paramError{"subscription", "not a subscription id (<subscriber-app>:<event-type>@<version>)"}
	}
	limit, err := limitParam(q, DefaultKeyLimit, MaxKeyLimit)
	if err != nil {
		return OpsKeys{}, err
	}
	var token []byte
	if t := q.Get("page_token"); t != "" {
		if token, err = base64.RawURLEncoding.DecodeString(t); err != nil || len(token) == 0 {
			return OpsKeys{}, &paramError{"page_token", "not a page token of this listing"}
		}
	}
	if h.temporal == nil {
		return OpsKeys{}, errors.New("list keys: the API was started without a Temporal client")
	}
	subs, err := h.store.ScopedSubscriptions(ctx, scope, app, sub)
	if err != nil {
		return OpsKeys{}, fmt.Errorf("list keys: %w", err)
	}
	out := OpsKeys{Status: status, Keys: []OpsKey{}, Limit: limit}
	if len(subs) == 0 {
		return out, nil
	}
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = quoteQuery(s.ID)
	}
	query := fmt.Sprintf("WorkflowType = %s AND ExecutionStatus = 'Running' AND %s = %s",
		quoteQuery(workflows.DeliveryWorkflowType), workflows.SAStatus.GetName(), quoteQuery(status))
	if scope != "" || app != "" || sub != "" {
		query += fmt.Sprintf(" AND %s IN (%s)", workflows.SASubscription.GetName(), strings.Join(ids, ", "))
	}
	callCtx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	resp, err := h.temporal.ListWorkflow(callCtx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: h.namespace, Query: query, PageSize: int32(limit), NextPageToken: token,
	})
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) && len(token) > 0 {
		return OpsKeys{}, &paramError{"page_token", "Temporal refused it: give the token of the last page, with the same filters"}
	}
	if err != nil {
		return OpsKeys{}, fmt.Errorf("list keys: %w", err)
	}
	var keySubs, keySubjects []string
	for _, e := range resp.GetExecutions() {
		fields := e.GetSearchAttributes().GetIndexedFields()
		var subID string
		if p := fields[workflows.SASubscription.GetName()]; p != nil {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &subID)
		}
		id := e.GetExecution().GetWorkflowId()
		subject := strings.TrimPrefix(id, workflows.DeliveryID(subID, ""))
		if subID == "" || !store.InScope(scope, subID) {
			continue // not Herald's key, or visibility not yet updated
		}
		out.Keys = append(out.Keys, OpsKey{WorkflowID: id, RunID: e.GetExecution().GetRunId(), Subscription: subID,
			Subject: subject, Status: status, StartedAt: e.GetStartTime().AsTime()})
		keySubs, keySubjects = append(keySubs, subID), append(keySubjects, subject)
	}
	heads, err := h.store.KeyHeads(ctx, keySubs, keySubjects)
	if err != nil {
		return OpsKeys{}, fmt.Errorf("list keys: %w", err)
	}
	for i := range out.Keys {
		if hd, ok := heads[[2]string{out.Keys[i].Subscription, out.Keys[i].Subject}]; ok {
			out.Keys[i].Head = &hd
		}
	}
	slices.SortFunc(out.Keys, func(a, b OpsKey) int { return strings.Compare(a.WorkflowID, b.WorkflowID) })
	if next := resp.GetNextPageToken(); len(next) > 0 {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(next)
	}
	return out, nil
}

// quoteQuery quotes a string literal of a visibility query.
func quoteQuery(s string) string {
	return `"` + queryEscaper.Replace(s) + `"`
}

var queryEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// TemporalClient is what the operations API asks of Temporal: the
// visibility list of workflows, a key's workflow, the keys' Workflow Updates and the
// redeliver signals of a replay (a client.Client).
type TemporalClient interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	keyops.Client
	keyops.SignalStarter
}

var _ TemporalClient = client.Client(nil)
