package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestPausedKeys: the paused keys come from paused_keys in order of
// subscription and subject, a page at a time from just after the last key,
// of the subscriptions asked for (every one's with nil, none with an empty
// list), with their subscription's app and type, actor and time.
func TestPausedKeys(t *testing.T) {
	t.Parallel()
	s, _ := outcomeFixture(t)
	ctx := context.Background()
	const other = "audit:contacts.person.updated@1" // no subscriptions row: app and type empty
	for _, k := range [][2]string{{billingPersonSub, "p3"}, {billingPersonSub, "p1"}, {other, "p0"}, {billingPersonSub, "p2"}} {
		if _, err := s.Pool.Exec(ctx, `INSERT INTO paused_keys (subscription_id, subject, actor) VALUES ($1, $2, 'ann')`, k[0], k[1]); err != nil {
			t.Fatal(err)
		}
	}
	list := func(subs []string, after [2]string, limit int) []string {
		t.Helper()
		keys, err := s.PausedKeys(ctx, subs, after[0], after[1], limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			if k.Actor != "ann" || k.PausedAt.IsZero() {
				t.Fatalf("key %+v: want actor ann and a time", k)
			}
			if k.Subscription == billingPersonSub && (k.App != "billing" || k.Type != "contacts.person.updated") {
				t.Fatalf("key %+v: want billing's app and type", k)
			}
			out = append(out, fmt.Sprintf("%s/%s", k.Subscription, k.Subject))
		}
		return out
	}
	b := func(subject string) string { return billingPersonSub + "/" + subject }
	for _, c := range []struct {
		name  string
		subs  []string
		after [2]string
		limit int
		want  []string
	}{
		{"every subscription's", nil, [2]string{}, 10, []string{other + "/p0", b("p1"), b("p2"), b("p3")}},
		{"a page", nil, [2]string{}, 2, []string{other + "/p0", b("p1")}},
		{"the next page", nil, [2]string{billingPersonSub, "p1"}, 2, []string{b("p2"), b("p3")}},
		{"one subscription's", []string{billingPersonSub}, [2]string{}, 10, []string{b("p1"), b("p2"), b("p3")}},
		{"no subscription", []string{}, [2]string{}, 10, nil},
		{"after the last", nil, [2]string{billingPersonSub, "p3"}, 10, nil},
	} {
		if got := list(c.subs, c.after, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
