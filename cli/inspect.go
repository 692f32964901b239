package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"herald/workflows"
)

// runInspect shows one delivery workflow's live state (the state query).
func runInspect(inv *invocation, args []string) error {
	fs := inv.newFlags("inspect")
	subscription := fs.String("subscription", "", "the subscription id (with --subject, instead of WORKFLOW-ID)")
	subject := fs.String("subject", "", "the subject key (with --subscription)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	var id string
	switch set := setFlags(fs); {
	case len(rest) > 1:
		return usagef("inspect", "inspect: unexpected argument %q", rest[1])
	case len(rest) == 1 && (set["subscription"] || set["subject"]):
		return usagef("inspect", "inspect: give WORKFLOW-ID or --subscription and --subject, not both")
	case len(rest) == 1:
		id = rest[0]
		if !workflows.IsDeliveryID(id) {
			return usagef("inspect", "inspect: %q is not a delivery workflow id (they look like deliver:<subscription-id>:<subject-key>)", id)
		}
	default:
		if id, err = deliveryIDFromFlags("inspect", *subscription, *subject); err != nil {
			return err
		}
	}

	tc, err := inv.dialTemporal()
	if err != nil {
		return err
	}
	defer tc.Close()
	st, err := tc.queryState(inv.ctx, id, stateQueryTimeout)
	if err != nil {
		return temporalError("query the state of", id, err)
	}
	if inv.json {
		return writeJSON(inv.stdout, st)
	}
	printState(inv.stdout, id, st, time.Now())
	return nil
}

// deliveryIDFromFlags builds the workflow id from --subscription and
// --subject, which cmd requires.
func deliveryIDFromFlags(cmd, subscription, subject string) (string, error) {
	if subscription == "" || subject == "" {
		return "", usagef(topCommand(cmd), "%s: --subscription and --subject are required", cmd)
	}
	if err := checkSubscriptionFlag(cmd, subscription); err != nil {
		return "", err
	}
	if err := checkSubjectFlag(cmd, subject); err != nil {
		return "", err
	}
	return workflows.DeliveryID(subscription, subject), nil
}

// printState writes the readable view of a delivery workflow's state.
func printState(w io.Writer, id string, st workflows.State, now time.Time) {
	fmt.Fprintln(w, id)
	status := st.Status
	if st.KeyPaused && status != workflows.StatusPaused {
		status += " (key paused)"
	}
	fmt.Fprintf(w, "  subscription  %s\n", st.Subscription)
	fmt.Fprintf(w, "  subject       %s\n", cleanCell(st.Subject))
	fmt.Fprintf(w, "  status        %s\n", dash(status))

	fmt.Fprintln(w, "\nHead:")
	if h := st.Head; h == nil {
		fmt.Fprintln(w, "  none (nothing queued)")
	} else {
		fmt.Fprintf(w, "  event         %s (seq %d, %s)\n", h.EventID, h.Seq, dash(h.Type))
		fmt.Fprintf(w, "  attempt       %d\n", h.Attempt)
		if h.Code != "" || h.LastError != "" {
			fmt.Fprintf(w, "  last error    %s\n", cleanCell(errorText(h.Code, h.LastError, 0)))
		}
		if h.NextAttemptAt != nil {
			note := ""
			if st.Status == workflows.StatusFailed {
				note = ", when the key re-arms itself"
			}
			fmt.Fprintf(w, "  next attempt  %s (%s%s)\n", relativeTime(*h.NextAttemptAt, now), formatTime(*h.NextAttemptAt), note)
		}
	}

	fmt.Fprintf(w, "\nQueued behind the head: %d\n", len(st.Queued))
	if len(st.Queued) > 0 {
		t := newTable(w, "  SEQ", "EVENT", "TYPE", "HELD BY")
		for _, q := range st.Queued {
			t.row("  "+strconv.FormatInt(q.Seq, 10), q.EventID, dash(q.Type), dash(q.HeldBy))
		}
		_ = t.flush()
	}

	c := st.Counters
	fmt.Fprintf(w, "\nCounters: delivered %d, failed %d, cancelled %d, re-armed %d\n", c.Delivered, c.Failed, c.Cancelled, c.Rearms)

	fmt.Fprintf(w, "\nLast outcomes (oldest first): %d\n", len(st.Outcomes))
	if len(st.Outcomes) > 0 {
		t := newTable(w, "  AT", "SEQ", "EVENT", "RESULT", "CODE", "ATTEMPTS")
		for _, o := range st.Outcomes {
			t.row("  "+formatTime(o.At), strconv.FormatInt(o.Seq, 10), o.EventID, o.Result, dash(o.Code), strconv.Itoa(o.Attempts))
		}
		_ = t.flush()
	}

	if hint := recoveryHint(st); hint != "" {
		fmt.Fprintf(w, "\n%s\n", hint)
	}
}

// recoveryHint suggests the operator's next command for a held key.
func recoveryHint(st workflows.State) string {
	key := "--subscription " + shellQuote(st.Subscription) + " --subject " + shellQuote(st.Subject)
	switch st.Status {
	case workflows.StatusFailed, workflows.StatusExhausted, workflows.StatusUnreachable:
		return "Recover: starter redeliver " + key + " --reason '...'   (retry the head with fresh attempts)\n" +
			"     or: starter cancel " + key + " --reason '...'      (drop the head, deliver the rest)"
	case workflows.StatusPaused:
		if st.KeyPaused {
			return "Release: starter resume " + key
		}
		return "The subscription is paused: starter subscriptions resume " + shellQuote(st.Subscription)
	}
	return ""
}

// relativeTime says how far t is from now: "in 4s", "2m10s ago", "now".
func relativeTime(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + formatAge(d)
	default:
		return formatAge(-d) + " ago"
	}
}
