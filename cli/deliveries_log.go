package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"herald/manifest"
	"herald/store"
)

// logOnlyStatuses are the outcome statuses no running key has: asking for
// one lists the log. (failed is both a key's status and an outcome's; it
// lists running keys unless --log or another flag of the log is given.)
var logOnlyStatuses = []string{store.EventQueued, store.EventDelivered, store.EventCancelled, store.EventExpired, store.EventFiltered}

// logFlags are the flags of starter deliveries that only the listing from
// the log takes.
type logFlags struct {
	log          bool
	subject      string
	since, until string
}

// wanted reports whether the flags (with --status) ask for the log.
func (lf logFlags) wanted(status string) bool {
	return lf.log || lf.subject != "" || lf.since != "" || lf.until != "" || slices.Contains(logOnlyStatuses, status)
}

// deliveriesLogJSON is the JSON of starter deliveries from the log.
type deliveriesLogJSON struct {
	Deliveries []store.Delivery `json:"deliveries"`
	// Total counts every delivery the filters match, all pages; TotalExact
	// is false when there are more than store.DeliveryTotalCap.
	Total         int    `json:"total"`
	TotalExact    bool   `json:"totalExact"`
	NextPageToken string `json:"nextPageToken,omitempty"`
	// Limit is the page size used (an oversized --limit is clamped).
	Limit int `json:"limit"`
	// Since and Until are the window as resolved (RFC 3339): give them,
	// not a duration again, with NextPageToken.
	Since string `json:"since,omitempty"`
	Until string `json:"until,omitempty"`
}

// runDeliveriesLog lists deliveries (outcome rows) from the event log, newest
// queued first, with the total the filters match. A bad filter exits 2 with
// one line naming it.
func runDeliveriesLog(inv *invocation, f deliveryFilter, lf logFlags, limit int, pageToken string) error {
	bad := func(format string, args ...any) error { return invalidf("deliveries: "+format, args...) }
	df := store.DeliveryFilter{App: f.App, Subscription: f.Subscription, EventType: f.EventType, Subject: lf.subject, PageToken: pageToken}
	if f.Status != "" {
		if !slices.Contains(store.OutcomeStatuses, f.Status) {
			return bad("--status %q is not a status of the log (want one of %s)", f.Status, strings.Join(store.OutcomeStatuses, ", "))
		}
		df.Statuses = []string{f.Status}
	}
	if f.Subscription != "" && !validSubscriptionID(f.Subscription) {
		return bad("--subscription %q is not a subscription id (<subscriber-app>:<event-type>@<version>)", f.Subscription)
	}
	if f.App != "" && !manifest.ValidAppID(f.App) {
		return bad("--app %q is not an app id", f.App)
	}
	if f.EventType != "" && !validEventType(f.EventType) {
		return bad("--type %q is not an event type (<app>.<name>, e.g. contacts.person.updated)", f.EventType)
	}
	if lf.subject != "" {
		if err := checkSubjectFlag("deliveries", lf.subject); err != nil {
			return invalidf("%s", err.Error())
		}
	}
	now := time.Now()
	for _, t := range []struct {
		flag, value string
		into        *time.Time
	}{{"since", lf.since, &df.Since}, {"until", lf.until, &df.Until}} {
		if t.value == "" {
			continue
		}
		v, err := parseTimeFlag("deliveries", t.flag, t.value, now)
		if err != nil {
			return invalidf("%s", err.Error())
		}
		*t.into = v
	}
	if !df.Since.IsZero() && !df.Until.IsZero() && !df.Since.Before(df.Until) {
		return bad("--since (%s) must be before --until (%s)", df.Since.Format(time.RFC3339), df.Until.Format(time.RFC3339))
	}
	if limit < 1 {
		return bad("--limit must be at least 1, got %d", limit)
	}
	if limit > store.MaxDeliveryLimit {
		fmt.Fprintf(inv.stderr, "deliveries: --limit %d clamped to %d, the largest page of the log\n", limit, store.MaxDeliveryLimit)
		limit = store.MaxDeliveryLimit
	}
	df.Limit = limit
	if pageToken != "" && store.ValidatePageToken(pageToken) != nil {
		return bad("--page-token %q is not a page token printed by starter deliveries --log", pageToken)
	}

	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	page, err := st.ListDeliveries(inv.ctx, df)
	if errors.Is(err, store.ErrBadPageToken) {
		return bad("--page-token was printed for other filters: give the filters of the listing it came from")
	}
	if err != nil {
		return err
	}
	out := deliveriesLogJSON{Deliveries: page.Deliveries, Total: page.Total, TotalExact: page.TotalExact,
		NextPageToken: page.NextPageToken, Limit: limit, Since: rfc3339(df.Since), Until: rfc3339(df.Until)}
	if inv.json {
		return writeJSON(inv.stdout, out)
	}
	// The next page names the window as resolved: "--since 2h" again would
	// be another window, whose listing the token does not continue.
	lf.since, lf.until = rfc3339(df.Since), rfc3339(df.Until)
	return printDeliveriesLog(inv, out, nextLogPageCommand(f, lf, limit, page.NextPageToken))
}

// rfc3339 formats t to the nanosecond; "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// nextLogPageCommand is the starter command line that lists the next page
// of the log.
func nextLogPageCommand(f deliveryFilter, lf logFlags, limit int, token string) string {
	if token == "" {
		return ""
	}
	s := "starter deliveries --log"
	for _, c := range []struct{ flag, value string }{
		{"--status", f.Status}, {"--subscription", f.Subscription}, {"--app", f.App}, {"--type", f.EventType},
		{"--subject", lf.subject}, {"--since", lf.since}, {"--until", lf.until},
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

func printDeliveriesLog(inv *invocation, out deliveriesLogJSON, next string) error {
	w := inv.stdout
	total := strconv.Itoa(out.Total)
	if !out.TotalExact {
		total = "more than " + total
	}
	if len(out.Deliveries) == 0 {
		fmt.Fprintf(w, "no matching deliveries in the log (total %s)\n", total)
		return nil
	}
	t := newTable(w, "QUEUED", "SUBSCRIPTION", "SUBJECT", "EVENT", "STATUS", "ATTEMPTS", "CODE / LAST ERROR")
	for _, d := range out.Deliveries {
		code := d.Code
		if code == "" {
			code = d.LastCode
		}
		t.row(formatTime(d.QueuedAt), d.Subscription, d.Subject, fmt.Sprintf("#%d %s", d.Seq, d.EventID), d.Status,
			strconv.Itoa(d.Attempts), dash(errorText(code, d.LastError, lastErrorWidth)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "total: %s (this page: %d)\n", total, len(out.Deliveries))
	if next != "" {
		fmt.Fprintf(w, "The next page:\n  %s\n", next)
	}
	fmt.Fprintln(w, "One event's deliveries: starter events show ID")
	return nil
}
