package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"herald/config"
	"herald/internal/tracing"
	"herald/keyops"
	"herald/workflows"
)

// Bounds on talking to Temporal, so that an unreachable frontend or a
// workflow without a worker fails the command instead of hanging it.
const (
	temporalDialTimeout = 10 * time.Second
	// temporalCallTimeout bounds one visibility call or one signal.
	temporalCallTimeout = 15 * time.Second
	// stateQueryTimeout bounds the state query of inspect; a query needs a
	// worker to answer it.
	stateQueryTimeout = 10 * time.Second
	// listQueryTimeout bounds each state query of deliveries.
	listQueryTimeout = 3 * time.Second
)

// temporalConn is a Temporal client with the address and namespace it was
// dialled with, for messages and for the equivalent temporal command lines.
type temporalConn struct {
	client.Client
	address   string
	namespace string
}

// discardLogger keeps the SDK's own logging off the command's output: every
// failure reaches the operator as an error instead.
var discardLogger = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// dialTemporal connects to the frontend named by TEMPORAL_ADDRESS and
// TEMPORAL_NAMESPACE (defaults 127.0.0.1:7233 and "default"), with TLS or an
// API key when the TEMPORAL_TLS_* / TEMPORAL_API_KEY settings ask for it.
// The caller closes the connection.
func (inv *invocation) dialTemporal() (*temporalConn, error) {
	if err := inv.act(); err != nil {
		return nil, err
	}
	cfg, err := config.LoadCommon(inv.getenv)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	opts, err := cfg.TemporalClientOptions()
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	opts.Logger = discardLogger
	ics, err := tracing.TemporalInterceptors()
	if err != nil {
		return nil, err
	}
	opts.Interceptors = append(opts.Interceptors, ics...)
	ctx, cancel := context.WithTimeout(inv.ctx, temporalDialTimeout)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (TEMPORAL_ADDRESS): %w", cfg.TemporalAddress, err)
	}
	return &temporalConn{Client: c, address: cfg.TemporalAddress, namespace: cfg.TemporalNamespace}, nil
}

// isNotFound reports whether err says the workflow does not exist, or no
// longer runs (a signal to a completed workflow).
func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// noWorkflowError is the exit-2 answer for a delivery workflow that is not
// there.
func noWorkflowError(id string) error {
	return invalidf("no delivery workflow %s (it may have completed after being idle; "+
		"a key's workflow starts again with its next event)", id)
}

// temporalError words a failed Temporal call on the workflow id: an unknown
// or completed workflow exits 2, the rest exits 1 with a hint when it looks
// like no worker is running.
func temporalError(what, id string, err error) error {
	var (
		queryFailed *serviceerror.QueryFailed
		nsNotFound  *serviceerror.NamespaceNotFound
	)
	switch {
	case isNotFound(err):
		return noWorkflowError(id)
	case errors.As(err, &queryFailed):
		return invalidf("%s %s: %v (is it a delivery workflow?)", what, id, err)
	case errors.As(err, &nsNotFound):
		return fmt.Errorf("%s %s: %w (check TEMPORAL_NAMESPACE)", what, id, err)
	case isDeadline(err):
		return fmt.Errorf("%s %s: no answer in time (is a Herald worker running?): %w", what, id, err)
	}
	return fmt.Errorf("%s %s: %w", what, id, err)
}

// isDeadline reports whether err is a call that got no answer in time.
func isDeadline(err error) bool {
	var deadline *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &deadline)
}

// queryState runs the state query of one delivery workflow, waiting at most
// timeout for the answer.
func (tc *temporalConn) queryState(ctx context.Context, id string, timeout time.Duration) (workflows.State, error) {
	var st workflows.State
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
	if err != nil {
		return st, err
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode the state of %s: %w", id, err)
	}
	return st, nil
}

// signal sends one signal to the current run of a workflow.
func (tc *temporalConn) signal(ctx context.Context, id, name string, payload any) error {
	ctx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	return tc.SignalWorkflow(ctx, id, "", name, payload)
}

// quoteQuery writes s as a string literal of a Temporal visibility query:
// in double quotes, with backslashes and double quotes escaped, so a value can
// never end the literal early. (Double quotes keep the query readable inside
// the single-quoted --query of a temporal command line.)
func quoteQuery(s string) string {
	return `"` + queryEscaper.Replace(s) + `"`
}

var queryEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// shellQuote quotes s for a POSIX shell: in single quotes, an embedded single
// quote closing the quotes, escaped, and reopening them. Plain words stay
// unquoted.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:@/=,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// temporalFlags are the --address and --namespace flags of a temporal command
// line, given only where they differ from the CLI's defaults.
func (tc *temporalConn) temporalFlags() string {
	var b strings.Builder
	if tc.address != config.DefaultTemporalAddress && tc.address != "localhost:7233" {
		b.WriteString(" --address " + shellQuote(tc.address))
	}
	if tc.namespace != config.DefaultTemporalNamespace {
		b.WriteString(" --namespace " + shellQuote(tc.namespace))
	}
	return b.String()
}

// signalWithStart sends one signal to a key's delivery workflow, starting
// the workflow with params first when it is not running (completed after
// being idle, or never started).
func (tc *temporalConn) signalWithStart(ctx context.Context, id, name string, payload any, params workflows.Params) error {
	ctx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	return keyops.SignalWithStart(ctx, tc, id, name, payload, params)
}

// signalWithStartCommand is the temporal CLI command line that does the same
// signal-with-start as signalWithStart.
func (tc *temporalConn) signalWithStartCommand(id, name string, payload any, params workflows.Params) string {
	return "temporal workflow signal-with-start" + tc.temporalFlags() +
		" --workflow-id " + shellQuote(id) + " --type " + workflows.DeliveryWorkflowType +
		" --task-queue " + workflows.TaskQueue + " --input " + shellQuote(compactPayload(params)) +
		" --search-attribute " + shellQuote(workflows.SASubscription.GetName()+"="+quoteJSON(params.SubscriptionID)) +
		" --search-attribute " + shellQuote(workflows.SAApp.GetName()+"="+quoteJSON(params.SubscriberApp)) +
		" --search-attribute " + shellQuote(workflows.SAEventType.GetName()+"="+quoteJSON(params.EventType)) +
		" --signal-name " + name + " --signal-input " + shellQuote(compactPayload(payload))
}

// quoteJSON is s as a JSON string.
func quoteJSON(s string) string { return compactPayload(s) }
