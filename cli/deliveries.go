package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"herald/manifest"
	"herald/store"
	"herald/workflows"
)

// Limits of starter deliveries.
const (
	defaultDeliveriesLimit = 100
	maxDeliveriesLimit     = 10000
	// listPageSize is the page size asked of Temporal's visibility store.
	listPageSize = 1000
	// stateQueryParallelism bounds the state queries in flight at once.
	stateQueryParallelism = 8
	// lastErrorWidth cuts the last error in the text table.
	lastErrorWidth = 80
)

// deliveryStatuses are the statuses a delivery workflow can be in, in the
// order status reports them.
var deliveryStatuses = []string{
	workflows.StatusIdle, workflows.StatusDelivering, workflows.StatusRetrying,
	workflows.StatusUnreachable, workflows.StatusFailed, workflows.StatusExhausted, workflows.StatusBlocked, workflows.StatusPaused,
}

// heldStatuses are the statuses of a key held on a failed head: waiting to
// re-arm itself, or with no automatic re-arm left.
var heldStatuses = []string{workflows.StatusFailed, workflows.StatusExhausted}

// deliveryFilter selects running delivery workflows by their search
// attributes; empty fields do not filter.
type deliveryFilter struct {
	Status string
	// AnyStatus, when set, selects keys in any of these statuses.
	AnyStatus    []string
	Subscription string
	App          string
	EventType    string
}

// query is the visibility query of the filter.
func (f deliveryFilter) query() string {
	parts := []string{
		"WorkflowType = " + quoteQuery(workflows.DeliveryWorkflowType),
		"ExecutionStatus = " + quoteQuery("Running"),
	}
	for _, c := range []struct{ name, value string }{
		{workflows.SASubscription.GetName(), f.Subscription},
		{workflows.SAApp.GetName(), f.App},
		{workflows.SAEventType.GetName(), f.EventType},
		{workflows.SAStatus.GetName(), f.Status},
	} {
		if c.value != "" {
			parts = append(parts, c.name+" = "+quoteQuery(c.value))
		}
	}
	if len(f.AnyStatus) > 0 {
		quoted := make([]string, len(f.AnyStatus))
		for i, s := range f.AnyStatus {
			quoted[i] = quoteQuery(s)
		}
		parts = append(parts, workflows.SAStatus.GetName()+" IN ("+strings.Join(quoted, ", ")+")")
	}
	return strings.Join(parts, " AND ")
}

// deliveryKey is one running delivery workflow as starter deliveries shows
// it. Status is its HeraldStatus search attribute, which Temporal's
// visibility updates a moment after each status change; Head comes from the
// live state query, and so does Queued when the query answers (the
// HeraldQueued attribute, the fallback, is only updated on status changes).
type deliveryKey struct {
	WorkflowID   string `json:"workflowId"`
	Subscription string `json:"subscription"`
	Subject      string `json:"subject"`
	App          string `json:"app,omitempty"`
	EventType    string `json:"eventType,omitempty"`
	Status       string `json:"status"`
	// Queued counts the events queued for the key, the head included.
	Queued    int64     `json:"queued"`
	StartedAt time.Time `json:"startedAt"`
	// Head is the event at the head of the queue, when the state query
	// answered and the queue is not empty.
	Head *workflows.HeadState `json:"head,omitempty"`
	// StateError says why the state query did not answer.
	StateError string `json:"stateError,omitempty"`
}

// deliveriesJSON is the JSON of starter deliveries.
type deliveriesJSON struct {
	Query string        `json:"query"`
	Keys  []deliveryKey `json:"keys"`
	// More is set when the list stopped at --limit with more keys left;
	// NextPageToken then lists them (--page-token, with the same filters).
	More          bool   `json:"more"`
	NextPageToken string `json:"nextPageToken,omitempty"`
}

// runDeliveries lists running delivery workflows with their status and head.
func runDeliveries(inv *invocation, args []string) error {
	fs := inv.newFlags("deliveries")
	var f deliveryFilter
	fs.StringVar(&f.Status, "status", "", "only keys in this status: "+strings.Join(deliveryStatuses, ", ")+
		"; or deliveries of the log in this status: "+strings.Join(store.OutcomeStatuses, ", "))
	fs.StringVar(&f.Subscription, "subscription", "", "only keys of this subscription id")
	fs.StringVar(&f.App, "app", "", "only keys of subscriptions of this subscriber app")
	fs.StringVar(&f.EventType, "type", "", "only keys of subscriptions to this event type (e.g. contacts.person.updated)")
	limit := fs.Int("limit", defaultDeliveriesLimit, fmt.Sprintf("at most this many keys (the log: deliveries), one page (1 to %d; the log clamps to %d)", maxDeliveriesLimit, store.MaxDeliveryLimit))
	pageToken := fs.String("page-token", "", "the next page of an earlier list, as it printed it (give the same filters)")
	var lf logFlags
	fs.BoolVar(&lf.log, "log", false, "list deliveries from the event log (outcome rows), not running keys; implied by --subject, --since, --until and the statuses "+strings.Join(logOnlyStatuses, ", "))
	fs.StringVar(&lf.subject, "subject", "", "only deliveries of this subject key (the log)")
	fs.StringVar(&lf.since, "since", "", "only deliveries queued at or after TIME: RFC 3339 or a duration back from now, e.g. 2h (the log)")
	fs.StringVar(&lf.until, "until", "", "only deliveries queued before TIME (the log)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("deliveries", rest); err != nil {
		return err
	}
	if lf.wanted(f.Status) {
		return runDeliveriesLog(inv, f, lf, *limit, *pageToken)
	}
	if f.Status != "" && !slices.Contains(deliveryStatuses, f.Status) {
		return usagef("deliveries", "deliveries: unknown --status %q (want one of %s)", f.Status, strings.Join(deliveryStatuses, ", "))
	}
	if f.Subscription != "" {
		if err := checkSubscriptionFlag("deliveries", f.Subscription); err != nil {
			return err
		}
	}
	if f.App != "" && !manifest.ValidAppID(f.App) {
		return usagef("deliveries", "deliveries: --app %q is not an app id", f.App)
	}
	if f.EventType != "" && !validEventType(f.EventType) {
		return usagef("deliveries", "deliveries: --type %q is not an event type (<app>.<name>, e.g. contacts.person.updated)", f.EventType)
	}
	if *limit < 1 || *limit > maxDeliveriesLimit {
		return usagef("deliveries", "deliveries: --limit must be from 1 to %d, got %d", maxDeliveriesLimit, *limit)
	}
	token, err := base64.RawURLEncoding.DecodeString(*pageToken)
	if err != nil || (*pageToken != "" && len(token) == 0) {
		return usagef("deliveries", "deliveries: --page-token %q is not a page token printed by starter deliveries", *pageToken)
	}

	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	query := f.query()
	page, err := tc.listPage(inv.ctx, query, *limit, token)
	var invalidArg *serviceerror.InvalidArgument
	switch {
	case len(token) > 0 && errors.As(err, &invalidArg):
		return invalidf("deliveries: Temporal refused --page-token (%v): give the token of the last list, with the same filters", err)
	case err != nil:
		return err
	}
	keys := page.keys
	sortKeys(keys)
	tc.addHeads(inv.ctx, keys)
	out := deliveriesJSON{Query: query, Keys: nonNil(keys), More: len(page.next) > 0}
	if out.More {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(page.next)
	}
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	return printDeliveries(inv, out, nextPageCommand(f, *limit, out.NextPageToken))
}

// validEventType reports whether s is an event type: <app>.<name>.
func validEventType(s string) bool {
	app, name, ok := strings.Cut(s, ".")
	return ok && manifest.ValidAppID(app) && manifest.ValidEventName(name)
}

// nextPageCommand is the starter command line that lists the next page.
func nextPageCommand(f deliveryFilter, limit int, token string) string {
	if token == "" {
		return ""
	}
	s := "starter deliveries"
	for _, c := range []struct{ flag, value string }{
		{"--status", f.Status}, {"--subscription", f.Subscription}, {"--app", f.App}, {"--type", f.EventType},
	} {
		if c.value != "" {
			s += " " + c.flag + " " + shellQuote(c.value)
		}
	}
	if limit != defaultDeliveriesLimit {
		s += " --limit " + strconv.Itoa(limit)
	}
	return s + " --page-token " + token
}

// deliveryPage is one page of running delivery workflows.
type deliveryPage struct {
	keys []deliveryKey
	// next is Temporal's token for the rest; nil when nothing is left.
	next []byte
}

// listPage lists up to limit running delivery workflows matching query,
// from the page token on (the first page when token is empty), in
// Temporal's order. The returned next token is nil only when no key is
// left: Temporal may hand out a token for an empty page, so one more key is
// asked for to be sure.
func (tc *temporalConn) listPage(ctx context.Context, query string, limit int, token []byte) (deliveryPage, error) {
	var page deliveryPage
	for {
		size := min(listPageSize, limit-len(page.keys))
		if size == 0 {
			size = 1 // only to find out whether more keys match
		}
		execs, next, err := tc.listOnce(ctx, query, size, token)
		if err != nil {
			return page, err
		}
		if len(page.keys) == limit {
			if len(execs) > 0 {
				page.next = token
			}
			return page, nil
		}
		for _, e := range execs {
			page.keys = append(page.keys, keyOf(e))
		}
		token = next
		if len(token) == 0 {
			return page, nil
		}
	}
}

// listOnce is one ListWorkflow call.
func (tc *temporalConn) listOnce(ctx context.Context, query string, size int, token []byte) ([]*workflowpb.WorkflowExecutionInfo, []byte, error) {
	callCtx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	resp, err := tc.ListWorkflow(callCtx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: tc.namespace, Query: query, PageSize: int32(size), NextPageToken: token,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list delivery workflows in namespace %s: %w", tc.namespace, err)
	}
	return resp.GetExecutions(), resp.GetNextPageToken(), nil
}

// sortKeys sorts keys by subscription and subject.
func sortKeys(keys []deliveryKey) {
	slices.SortFunc(keys, func(a, b deliveryKey) int {
		if c := strings.Compare(a.Subscription, b.Subscription); c != 0 {
			return c
		}
		return strings.Compare(a.Subject, b.Subject)
	})
}

// listDeliveries pages through every running delivery workflow matching
// query, sorted by subscription and subject.
func (tc *temporalConn) listDeliveries(ctx context.Context, query string) ([]deliveryKey, error) {
	var keys []deliveryKey
	var token []byte
	for {
		execs, next, err := tc.listOnce(ctx, query, listPageSize, token)
		if err != nil {
			return nil, err
		}
		for _, e := range execs {
			keys = append(keys, keyOf(e))
		}
		if token = next; len(token) == 0 {
			break
		}
	}
	sortKeys(keys)
	return keys, nil
}

// keyOf reads one listed execution.
func keyOf(e *workflowpb.WorkflowExecutionInfo) deliveryKey {
	fields := e.GetSearchAttributes().GetIndexedFields()
	k := deliveryKey{
		WorkflowID:   e.GetExecution().GetWorkflowId(),
		Subscription: keyword(fields, workflows.SASubscription.GetName()),
		App:          keyword(fields, workflows.SAApp.GetName()),
		EventType:    keyword(fields, workflows.SAEventType.GetName()),
		Status:       keyword(fields, workflows.SAStatus.GetName()),
		StartedAt:    e.GetStartTime().AsTime(),
	}
	if k.Subscription == "" {
		k.Subscription, _, _ = splitDeliveryID(k.WorkflowID)
	}
	k.Subject = subjectOf(k.WorkflowID, k.Subscription)
	if p := fields[workflows.SAQueued.GetName()]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &k.Queued)
	}
	return k
}

// keyword decodes a Keyword search attribute; "" when missing or unreadable.
func keyword(fields map[string]*commonpb.Payload, name string) string {
	var s string
	if p := fields[name]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
			return ""
		}
	}
	return s
}

// addHeads fills each key's head from its state query, a few at a time. A
// query that fails leaves the head empty and records why. Once a query gets
// no answer in time (no worker is polling), the rest are not tried, so a
// stopped worker costs one timeout rather than one per key.
func (tc *temporalConn) addHeads(ctx context.Context, keys []deliveryKey) {
	sem := make(chan struct{}, stateQueryParallelism)
	var wg sync.WaitGroup
	var noAnswer atomic.Bool
	for i := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func(k *deliveryKey) {
			defer wg.Done()
			defer func() { <-sem }()
			if noAnswer.Load() {
				k.StateError = "not queried: an earlier state query got no answer (is a Herald worker running?)"
				return
			}
			st, err := tc.queryState(ctx, k.WorkflowID, listQueryTimeout)
			switch {
			case isDeadline(err):
				noAnswer.Store(true)
				k.StateError = "no answer in time (is a Herald worker running?)"
				return
			case err != nil:
				k.StateError = err.Error()
				return
			}
			k.Head = st.Head
			k.Queued = int64(len(st.Queued))
			if st.Head != nil {
				k.Queued++
			}
		}(&keys[i])
	}
	wg.Wait()
}

func printDeliveries(inv *invocation, out deliveriesJSON, next string) error {
	w := inv.stdout
	keys := out.Keys
	if len(keys) == 0 {
		fmt.Fprintln(w, "no matching delivery workflows are running (Temporal's list lags a second or two behind status changes)")
		return nil
	}
	t := newTable(w, "SUBSCRIPTION", "SUBJECT", "STATUS", "QUEUED", "HEAD", "LAST ERROR")
	for _, k := range keys {
		head, lastErr := "-", "-"
		if k.Head != nil {
			head = fmt.Sprintf("#%d %s", k.Head.Seq, k.Head.EventID)
			lastErr = dash(errorText(k.Head.Code, k.Head.LastError, lastErrorWidth))
		} else if k.StateError == "" {
			head = "(empty)"
		}
		t.row(dash(k.Subscription), dash(k.Subject), dash(k.Status), strconv.FormatInt(k.Queued, 10), head, lastErr)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if out.More {
		fmt.Fprintf(w, "More keys match; the next page:\n  %s\n", next)
	}
	unknown, firstErr := 0, ""
	for _, k := range keys {
		if k.StateError != "" {
			if unknown == 0 {
				firstErr = k.StateError
			}
			unknown++
		}
	}
	if unknown > 0 {
		fmt.Fprintf(w, "(no head for %s: the state query failed: %s)\n", plural(unknown, "key"), firstErr)
	}
	fmt.Fprintln(w, "Details of one key: starter inspect --subscription ID --subject KEY")
	return nil
}

// errorText joins an error code and message, cut to width runes (no cut
// when width is 0).
func errorText(code, msg string, width int) string {
	s := code
	if msg != "" {
		if s != "" {
			s += ": "
		}
		s += msg
	}
	if r := []rune(s); width > 0 && len(r) > width {
		s = string(r[:width-1]) + "…"
	}
	return s
}
