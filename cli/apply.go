package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"herald/manifest"
	"herald/netguard"
	"herald/signing"
	"herald/store"
)

// resolveTimeout bounds the look-up of one endpoint host for the warnings of
// apps apply.
const resolveTimeout = 3 * time.Second

// applyOutput is the JSON of apps apply.
type applyOutput struct {
	Apps     []store.ApplyResult `json:"apps"`
	Warnings []endpointWarning   `json:"warnings"`
	// Refused names the app whose breaking schema changes stopped the apply.
	Refused *refusedApply `json:"refused,omitempty"`
}

// refusedApply is an app's apply refused for breaking dataSchema changes.
type refusedApply struct {
	App             string                   `json:"app"`
	BreakingChanges []store.DeclarationBreak `json:"breakingChanges"`
}

// manifestProblem is one problem of an invalid manifest, for JSON output.
type manifestProblem struct {
	Source  string `json:"source,omitempty"`
	App     string `json:"app,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// runAppsApply validates every manifest under the given paths and, only if
// all are valid, applies them one app at a time.
func runAppsApply(inv *invocation, args []string) error {
	fs := inv.newFlags("apps apply")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	allowBreaking := fs.Bool("allow-breaking", false,
		"apply dataSchema changes that may reject data the current schema accepts (needs --reason; audited)")
	reason := fs.String("reason", "", "why breaking changes are allowed, recorded in the audit trail")
	paths, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usagef("apps", "apps apply: missing PATH (a manifest file or a directory of them)")
	}
	if *allowBreaking && strings.TrimSpace(*reason) == "" {
		return usagef("apps", "apps apply: --allow-breaking needs --reason R (recorded in the audit trail)")
	}
	if !*allowBreaking && *reason != "" {
		return usagef("apps", "apps apply: --reason is only used with --allow-breaking")
	}
	if err := inv.act(); err != nil {
		return err
	}
	manifests, err := manifest.Load(paths...)
	if err != nil {
		return inv.reportInvalidManifests("apps apply", "nothing was applied", err)
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()

	who := inv.actor(*actor)
	out := applyOutput{Apps: []store.ApplyResult{}}
	var applyErr error
	for _, m := range manifests {
		res, err := st.ApplyManifestWith(inv.ctx, m,
			store.ApplyOptions{Actor: who, AllowBreaking: *allowBreaking, Reason: *reason})
		var breaking *store.BreakingChangeError
		if errors.As(err, &breaking) {
			out.Refused = &refusedApply{App: breaking.App, BreakingChanges: breaking.Breaks}
			applyErr = fmt.Errorf("%w\nto apply it anyway (audited): starter apps apply ... --allow-breaking --reason R", err)
			break
		}
		if err != nil {
			applyErr = err
			break
		}
		res.StateChanges = nonNil(res.StateChanges)
		out.Apps = append(out.Apps, res)
		if err := ensureSecret(inv, st, m.App, who); err != nil {
			applyErr = err
			break
		}
	}
	if applyErr == nil {
		out.Warnings = checkEndpoints(inv.ctx, manifests, inv.getenv("HERALD_ALLOW_NETWORKS"))
	}
	out.Warnings = nonNil(out.Warnings)

	if inv.json {
		if err := writeJSON(inv.stdout, out); err != nil {
			return err
		}
	} else {
		for _, res := range out.Apps {
			printApplyResult(inv.stdout, res)
		}
		for _, w := range out.Warnings {
			fmt.Fprintln(inv.stderr, "warning: "+w.Message)
		}
	}
	if applyErr != nil {
		if len(out.Apps) > 0 {
			return fmt.Errorf("%w (the apps listed above were applied, the rest were not)", applyErr)
		}
		return applyErr
	}
	return nil
}

// reportInvalidManifests prints every problem of every manifest Load
// refused and ends the command (cmd, "apps apply") with ExitInvalid; outcome
// says what became of the others.
func (inv *invocation) reportInvalidManifests(cmd, outcome string, err error) error {
	problems := manifestProblems(err)
	if inv.json {
		if werr := writeJSON(inv.stdout, struct {
			Applied bool              `json:"applied"`
			Errors  []manifestProblem `json:"errors"`
		}{false, problems}); werr != nil {
			return werr
		}
		return &reportedError{code: ExitInvalid}
	}
	fmt.Fprintf(inv.stderr, "starter %s: invalid manifests, %s:\n", cmd, outcome)
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(inv.stderr, "  "+line)
	}
	return &reportedError{code: ExitInvalid}
}

// manifestProblems flattens the (possibly joined) error of manifest.Load
// into one entry per problem.
func manifestProblems(err error) []manifestProblem {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []manifestProblem
		for _, e := range joined.Unwrap() {
			out = append(out, manifestProblems(e)...)
		}
		return out
	}
	var v *manifest.ValidationError
	if errors.As(err, &v) {
		out := make([]manifestProblem, 0, len(v.Problems))
		for _, p := range v.Problems {
			out = append(out, manifestProblem{Source: v.Source, App: v.App, Field: p.Field, Message: p.Message})
		}
		return out
	}
	return []manifestProblem{{Message: err.Error()}}
}

// printApplyResult prints what applying one manifest changed.
func printApplyResult(w io.Writer, res store.ApplyResult) {
	if res.Unchanged {
		fmt.Fprintf(w, "%s: unchanged\n", res.App)
		return
	}
	fmt.Fprintf(w, "%s: applied\n", res.App)
	printChanges(w, res)
	if len(res.BreakingChanges) > 0 {
		fmt.Fprintln(w, "  breaking dataSchema changes applied (--allow-breaking, audited):")
		printBreakingChanges(w, res.BreakingChanges)
	}
}

// printBreakingChanges lists each declaration's breaking changes.
func printBreakingChanges(w io.Writer, breaks []store.DeclarationBreak) {
	for _, b := range breaks {
		fmt.Fprintf(w, "    %s\n", b.Declaration)
		for _, c := range b.Changes {
			fmt.Fprintf(w, "      %s\n", c)
		}
	}
}

// printChanges lists the counts and state changes of an apply or remove.
func printChanges(w io.Writer, res store.ApplyResult) {
	decls := joinCounts([]count{
		{res.DeclarationsAdded, "added"}, {res.DeclarationsUpdated, "updated"},
		{res.DeclarationsRetired, "retired"}, {res.DeclarationsRestored, "restored"},
	})
	subs := joinCounts([]count{
		{res.SubscriptionsAdded, "added"}, {res.SubscriptionsRestored, "restored"},
		{res.SubscriptionsCancelled, "cancelled"},
	})
	if decls != "" {
		fmt.Fprintf(w, "  declarations: %s\n", decls)
	}
	if subs != "" {
		fmt.Fprintf(w, "  subscriptions: %s\n", subs)
	}
	if len(res.StateChanges) > 0 {
		fmt.Fprintln(w, "  state changes:")
		t := newTable(w, "    SUBSCRIPTION", "FROM", "TO")
		for _, c := range res.StateChanges {
			t.row("    "+c.SubscriptionID, stateText(c.From, c.FromReason), stateText(c.To, c.ToReason))
		}
		_ = t.flush()
	}
	if res.LimitsFrom != nil && res.LimitsTo != nil {
		fmt.Fprintf(w, "  limits: %s (were: %s)\n", res.LimitsTo, res.LimitsFrom)
	}
	if decls == "" && subs == "" && len(res.StateChanges) == 0 && !res.LimitsChanged {
		fmt.Fprintln(w, "  no declaration or subscription changes (endpoint or other app settings only)")
	}
}

// count is one labelled number of a change summary.
type count struct {
	n     int
	label string
}

// joinCounts renders "2 added, 1 retired", leaving out zero counts.
func joinCounts(cs []count) string {
	var parts []string
	for _, c := range cs {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.label))
		}
	}
	return strings.Join(parts, ", ")
}

// endpointWarning is a manifest endpoint that deliveries will probably not
// reach from the worker.
type endpointWarning struct {
	App      string `json:"app,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Host     string `json:"host,omitempty"`
	// Address and Reason are set when the host is (or resolves to) an
	// address the SSRF guard refuses.
	Address string `json:"address,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// checkEndpoints warns about endpoints the worker's SSRF guard will refuse
// with the allow-list allowEnv (HERALD_ALLOW_NETWORKS as set where starter
// runs), and about hosts that do not resolve from here. The worker's dial-time
// check is the authoritative one; these are hints for the operator.
func checkEndpoints(ctx context.Context, ms []*manifest.Manifest, allowEnv string) []endpointWarning {
	var out []endpointWarning
	allow, err := netguard.ParseAllowList(allowEnv)
	if err != nil {
		out = append(out, endpointWarning{
			Message: fmt.Sprintf("HERALD_ALLOW_NETWORKS: %v; checking endpoints against an empty allow-list", err),
		})
		allow = nil
	}
	guard := netguard.New(allow)
	for _, m := range ms {
		u, err := url.Parse(m.Endpoint)
		if err != nil || u.Hostname() == "" {
			continue // manifest validation refuses these
		}
		if w, ok := checkEndpoint(ctx, guard, m.App, m.Endpoint, u.Hostname()); ok {
			out = append(out, w)
		}
	}
	return out
}

// checkEndpoint checks one app's endpoint host.
func checkEndpoint(ctx context.Context, guard *netguard.Guard, app, endpoint, host string) (endpointWarning, bool) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	err := guard.CheckHost(ctx, host)
	if err == nil {
		return endpointWarning{}, false
	}
	w := endpointWarning{App: app, Endpoint: endpoint, Host: host}
	var forbidden *netguard.ForbiddenError
	if !errors.As(err, &forbidden) {
		w.Message = fmt.Sprintf("%s endpoint host %s could not be resolved from here (%v); "+
			"deliveries will wait as subscriber_unreachable if the worker cannot resolve it either", app, host, err)
		return w, true
	}
	// Go's resolver may answer with IPv4-mapped IPv6 addresses; name the
	// IPv4 address the operator wrote in DNS.
	if forbidden.Addr.Is4In6() {
		var plain *netguard.ForbiddenError
		if errors.As(guard.Check(forbidden.Addr.Unmap()), &plain) {
			forbidden = plain
		}
	}
	w.Address, w.Reason = forbidden.Addr.String(), forbidden.Reason
	const consequence = "deliveries will fail with endpoint_forbidden unless HERALD_ALLOW_NETWORKS covers it"
	if strings.Trim(host, "[]") == w.Address {
		w.Message = fmt.Sprintf("%s endpoint %s is a blocked address (%s); %s", app, host, w.Reason, consequence)
	} else {
		w.Message = fmt.Sprintf("%s endpoint host %s resolves to %s, a blocked address (%s); %s",
			app, host, w.Address, w.Reason, consequence)
	}
	return w, true
}

// ensureSecret gives a newly applied app its Standard Webhooks secret when
// HERALD_SECRET_KEY is set here; without it the worker creates the secret
// before the app's first delivery.
func ensureSecret(inv *invocation, st *store.Store, app, actor string) error {
	if inv.getenv("HERALD_SECRET_KEY") == "" {
		return nil
	}
	box, err := inv.secretBox()
	if err != nil {
		return err
	}
	_, err = st.EnsureAppSecrets(inv.ctx, store.SecretRequest{App: app, Box: box, New: signing.NewSecret, Actor: actor})
	return err
}
