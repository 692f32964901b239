package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/store"
)

func TestAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	if err := s.Audit(ctx, store.AuditEntry{Action: "test.kept", TargetType: "app", TargetID: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE audit SET actor = 'mallory'`,
		`DELETE FROM audit`,
		`TRUNCATE audit`,
	} {
		t.Run(strings.Fields(sql)[0], func(t *testing.T) {
			_, err := s.Pool.Exec(ctx, sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
				t.Fatalf("err = %v, want the append-only refusal", err)
			}
		})
	}
	rows := auditRows(t, s, "", "")
	if len(rows) != 1 || rows[0].Actor != store.ActorSystem {
		t.Errorf("rows = %+v", rows)
	}
}

func TestAppendAudit(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	tests := []struct {
		name  string
		entry store.AuditEntry
		check func(t *testing.T, r store.AuditRow)
	}{
		{"defaults", store.AuditEntry{Action: "delivery.paused", TargetType: store.TargetDelivery, TargetID: "deliver:a:b.c@1:k"},
			func(t *testing.T, r store.AuditRow) {
				if r.Outcome != store.OutcomeAllowed || r.Actor != store.ActorSystem || r.ErrorCode != "" ||
					string(r.Metadata) != "{}" || r.At.IsZero() || r.TargetType != store.TargetDelivery {
					t.Errorf("row = %+v (metadata %s)", r, r.Metadata)
				}
			}},
		{"everything", store.AuditEntry{
			Action: store.ActionDeliveryFailed, Outcome: store.OutcomeFailed, Actor: "bob",
			TargetType: store.TargetDelivery, TargetID: "deliver:a:b.c@1:k", ErrorCode: "handler_failed",
			Metadata: map[string]any{"attempt": 3, "eventId": "e1"},
		}, func(t *testing.T, r store.AuditRow) {
			var m map[string]any
			if err := json.Unmarshal(r.Metadata, &m); err != nil {
				t.Fatal(err)
			}
			if r.Outcome != "failed" || r.Actor != "bob" || r.ErrorCode != "handler_failed" || m["attempt"] != 3.0 || m["eventId"] != "e1" {
				t.Errorf("row = %+v (metadata %s)", r, r.Metadata)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := store.AppendAudit(ctx, s.Pool, tt.entry); err != nil {
				t.Fatal(err)
			}
			rows, err := s.ListAudit(ctx, store.AuditFilter{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].Action != tt.entry.Action {
				t.Fatalf("rows = %+v", rows)
			}
			tt.check(t, rows[0])
		})
	}

	refused := []struct {
		name  string
		entry store.AuditEntry
	}{
		{"no action", store.AuditEntry{TargetType: "app", TargetID: "x"}},
		{"bad outcome", store.AuditEntry{Action: "a.b", Outcome: "maybe", TargetType: "app", TargetID: "x"}},
		{"unencodable metadata", store.AuditEntry{Action: "a.b", TargetType: "app", TargetID: "x", Metadata: map[string]any{"f": func() {}}}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if err := store.AppendAudit(ctx, s.Pool, tt.entry); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestAuditInCallerTransactionRollsBack(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		if err := store.AppendAudit(ctx, tx, store.AuditEntry{Action: "a.b", TargetType: "app", TargetID: "x"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if n := countAudit(t, s); n != 0 {
		t.Errorf("rolled-back audit row kept: %d rows", n)
	}
}

func TestListAuditFilters(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	targets := []string{"billing:contacts.person.updated@1", "billing:contacts.person.created@1", "billingx:a.b@1", "bill_ng:a.b@1", "contacts"}
	for i, target := range targets {
		action := "test.odd"
		if i%2 == 0 {
			action = "test.even"
		}
		if err := s.Audit(ctx, store.AuditEntry{Action: action, TargetType: "subscription", TargetID: target}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 60; i++ {
		if err := s.Audit(ctx, store.AuditEntry{Action: "test.bulk", TargetType: "app", TargetID: fmt.Sprintf("bulk-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name   string
		filter store.AuditFilter
		want   []string // target ids, newest first
		count  int      // when want is nil: the expected number of rows
	}{
		{"exact", store.AuditFilter{TargetID: "contacts"}, []string{"contacts"}, 0},
		{"exact is not prefix", store.AuditFilter{TargetID: "billing"}, []string{}, 0},
		{"prefix", store.AuditFilter{TargetID: "billing:*"},
			[]string{"billing:contacts.person.created@1", "billing:contacts.person.updated@1"}, 0},
		{"prefix without colon", store.AuditFilter{TargetID: "billing*"},
			[]string{"billingx:a.b@1", "billing:contacts.person.created@1", "billing:contacts.person.updated@1"}, 0},
		{"underscore is literal", store.AuditFilter{TargetID: "bill_*"}, []string{"bill_ng:a.b@1"}, 0},
		{"percent is literal", store.AuditFilter{TargetID: "%*"}, []string{}, 0},
		{"action", store.AuditFilter{Action: "test.even"}, []string{"contacts", "billingx:a.b@1", "billing:contacts.person.updated@1"}, 0},
		{"action and prefix", store.AuditFilter{Action: "test.odd", TargetID: "billing*"}, []string{"billing:contacts.person.created@1"}, 0},
		{"limit", store.AuditFilter{Action: "test.even", Limit: 2}, []string{"contacts", "billingx:a.b@1"}, 0},
		{"default limit", store.AuditFilter{}, nil, store.DefaultAuditLimit},
		{"negative limit", store.AuditFilter{Limit: -1}, nil, store.DefaultAuditLimit},
		{"large limit", store.AuditFilter{Limit: 5000}, nil, 65},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := s.ListAudit(ctx, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(rows); i++ {
				if rows[i].ID >= rows[i-1].ID {
					t.Fatalf("not newest first: %d before %d", rows[i-1].ID, rows[i].ID)
				}
			}
			if tt.want == nil {
				if len(rows) != tt.count {
					t.Errorf("got %d rows, want %d", len(rows), tt.count)
				}
				return
			}
			got := []string{}
			for _, r := range rows {
				got = append(got, r.TargetID)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestListAuditCapsLimit(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	if _, err := s.Pool.Exec(ctx, `INSERT INTO audit (action, outcome, target_type, target_id)
		SELECT 'test.many', 'allowed', 'app', 'a' || g FROM generate_series(1, $1::int) g`, store.MaxAuditLimit+5); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ListAudit(ctx, store.AuditFilter{Limit: store.MaxAuditLimit + 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != store.MaxAuditLimit {
		t.Errorf("got %d rows, want %d", len(rows), store.MaxAuditLimit)
	}
}

// TestAuditByOnceKey: the row written under a once key is found by it, with
// its metadata; an unused key is ErrNotFound.
func TestAuditByOnceKey(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	if _, err := s.AuditByOnceKey(ctx, "retention:run-1/5"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unused key: err = %v, want ErrNotFound", err)
	}
	e := store.AuditEntry{Action: store.ActionRetentionPurged, TargetType: store.TargetRetention,
		TargetID: "herald-retention", Metadata: map[string]any{"events": 3}, OnceKey: "retention:run-1/5"}
	if err := s.Audit(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := s.Audit(ctx, store.AuditEntry{Action: "test.other", TargetType: "app", TargetID: "x"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.AuditByOnceKey(ctx, "retention:run-1/5")
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Events int }
	if err := json.Unmarshal(r.Metadata, &m); err != nil || r.Action != store.ActionRetentionPurged ||
		r.TargetID != "herald-retention" || m.Events != 3 {
		t.Fatalf("row %+v (metadata %s, %v)", r, r.Metadata, err)
	}
}
