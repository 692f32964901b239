package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"herald/envelope"
	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/store"
)

// openEventsStore returns a migrated store in a fresh schema and its URL.
func openEventsStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	url := testenv.NewSchema(t)
	ctx := context.Background()
	s, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, url
}

// envelopedEvent is an event of app with the id, envelope and content hash
// its publisher writes, which a publisher role's checks (herald_publish)
// want. The id is a UUIDv7, as publish.Publisher makes it: time-ordered ids
// add at the end of the events_app_id index, random ones anywhere in it, and
// BenchmarkConcurrentPublish compares Publish and PublishTx with plain
// INSERTs of these rows. (Until 2026-12-06 they were random: not the same
// rows.)
func envelopedEvent(app, typ string, version int, subject string, data []byte) store.NewEvent {
	id := uuid.Must(uuid.NewV7()).String()
	return store.NewEvent{ID: id, SourceApp: app, Type: typ, Version: version, Subject: subject,
		Envelope: envelope.Envelope{ID: id, App: app, Type: typ, Subject: subject, Time: time.Now(),
			Version: version, Data: data}.Encode(),
		ContentHash: envelope.ContentHash(app, typ, version, subject, data)}
}

func newEvent(typ, subject, hash string) store.NewEvent {
	id := uuid.NewString()
	return store.NewEvent{
		ID: id, SourceApp: strings.SplitN(typ, ".", 2)[0], Type: typ, Version: 1, Subject: subject,
		Envelope: []byte(fmt.Sprintf(`{"id":%q}`, id)), ContentHash: hash,
	}
}

func TestInsertEventsStoresAndNotifies(t *testing.T) {
	t.Parallel()
	s, url := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect listener: %v", err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatalf("listen: %v", err)
	}

	schema, err := testkit.Schema(ctx, s.Pool)
	if err != nil {
		t.Fatal(err)
	}
	evs := []store.NewEvent{
		newEvent("contacts.person.updated", "person-1", "h1"),
		newEvent("contacts.person.updated", "person-2", "h2"),
		newEvent("contacts.person.deleted", "person-1", "h3"),
	}
	got, err := s.InsertEvents(ctx, evs)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	if len(got) != len(evs) {
		t.Fatalf("got %d results, want %d", len(got), len(evs))
	}
	for i, r := range got {
		if r.ID != evs[i].ID || r.Duplicate || r.Conflict {
			t.Errorf("result %d = %+v, want a fresh insert of %s", i, r, evs[i].ID)
		}
		if i > 0 && r.Seq <= got[i-1].Seq {
			t.Errorf("seq %d after %d: not increasing in input order", r.Seq, got[i-1].Seq)
		}
	}

	// Only a wake-up of this schema counts: other tests insert at the same
	// time in schemas of their own.
	waitCtx, waitCancel := context.WithTimeout(ctx, 5*time.Second)
	defer waitCancel()
	n, err := testkit.WaitWakeUp(waitCtx, listener, schema)
	if err != nil {
		t.Fatalf("no wake-up of the relay after the commit: %v", err)
	}
	if n.Channel != store.NotifyChannel {
		t.Errorf("notification on %q, want %q", n.Channel, store.NotifyChannel)
	}

	stored, err := s.GetEvent(ctx, strings.ToUpper(evs[1].ID))
	if err != nil {
		t.Fatalf("get event: %v", err)
	}
	if stored.Seq != got[1].Seq || stored.ID != evs[1].ID || stored.SourceApp != "contacts" ||
		stored.Type != evs[1].Type || stored.Version != 1 || stored.Subject != "person-2" ||
		string(stored.Envelope) != string(evs[1].Envelope) || stored.State != "accepted" ||
		stored.ReceivedAt.IsZero() || stored.DispatchedAt != nil {
		t.Errorf("stored event = %+v, want what was inserted", stored)
	}
}

// TestInsertEventsSeveralStoreWhatOneStores: a call of several events
// (one statement for all of them) stores each column as a call of one
// event does: how it was published, its trace context or none, an id
// given in capitals; and a key's events of one call take sequence numbers
// in the order of the call, among other keys' events. In a transaction of
// its own (InsertEvents) and in a caller's (InsertEventsTx, under a
// savepoint), each also on a connection of the simple protocol (a pooler's
// transaction mode), where the arrays travel as text.
func TestInsertEventsSeveralStoreWhatOneStores(t *testing.T) {
	t.Parallel()
	s, url := openEventsStore(t)
	ctx := context.Background()
	simple, err := store.Open(ctx, url+"&default_query_exec_mode=simple_protocol", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simple.Close)
	shaped := func(subject string, i int) store.NewEvent {
		ev := newEvent("contacts.person.updated", subject, fmt.Sprintf("h%d", i))
		switch i % 3 {
		case 0:
			ev.Via, ev.Token = "http", fmt.Sprintf("tok-%d", i)
			ev.TraceContext = store.TraceContext{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				"tracestate": fmt.Sprintf("k=%d", i)}
		case 1:
			ev.Via = "cli"
			ev.ID = strings.ToUpper(ev.ID)
		}
		ev.Envelope = append(ev.Envelope, 0, '\\', 0xff) // bytes no text would carry
		return ev
	}
	var alone []store.NewEvent
	for i := range 3 {
		alone = append(alone, shaped("alone", i))
		if _, err := s.InsertEvents(ctx, alone[i:i+1]); err != nil {
			t.Fatalf("insert one: %v", err)
		}
	}
	type row struct {
		seq                      int64
		id, app, typ, subject    string
		version                  int
		envelope                 []byte
		hash                     string
		via, token, trace, state *string
	}
	read := func(ev store.NewEvent) row {
		var r row
		if err := s.Pool.QueryRow(ctx, `SELECT seq, id::text, source_app, type, subject, version, envelope, content_hash,
			published_via, published_token, trace_context::text, state FROM events WHERE id = $1`, ev.ID).Scan(
			&r.seq, &r.id, &r.app, &r.typ, &r.subject, &r.version, &r.envelope, &r.hash, &r.via, &r.token, &r.trace, &r.state); err != nil {
			t.Fatalf("read %s: %v", ev.ID, err)
		}
		return r
	}
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	for _, c := range []struct {
		name   string
		insert func([]store.NewEvent) ([]store.InsertedEvent, error)
	}{
		{"extended protocol", func(evs []store.NewEvent) ([]store.InsertedEvent, error) { return s.InsertEvents(ctx, evs) }},
		{"simple protocol", func(evs []store.NewEvent) ([]store.InsertedEvent, error) { return simple.InsertEvents(ctx, evs) }},
		{"caller's transaction", insertInTx(ctx, s)},
		{"caller's transaction, simple protocol", insertInTx(ctx, simple)},
	} {
		var several []store.NewEvent
		for i := range 30 {
			several = append(several, shaped(c.name+[]string{"k1", "k2", "k3"}[i%3], i))
		}
		var before int64
		if err := s.Pool.QueryRow(ctx, `SELECT max(seq) FROM events`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		got, err := c.insert(several)
		if err != nil {
			t.Fatalf("%s: insert several: %v", c.name, err)
		}
		// The next numbers, one after another: the one statement inserted
		// them (a fallback to one statement an event would have drawn
		// numbers for the rows the statement rolled back first).
		if got[0].Seq != before+1 || got[len(got)-1].Seq != before+int64(len(got)) {
			t.Errorf("%s: sequence numbers %d..%d after %d; want the next %d, drawn once", c.name, got[0].Seq, got[len(got)-1].Seq, before, len(got))
		}
		last := map[string]int64{}
		for i, r := range got {
			if r.ID != several[i].ID || r.Duplicate || r.Conflict || r.Seq == 0 {
				t.Errorf("%s: result %d = %+v, want a fresh insert of %s", c.name, i, r, several[i].ID)
			}
			if k := several[i].Subject; r.Seq <= last[k] {
				t.Errorf("%s: event %d of key %s: seq %d after %d, want the order of the call", c.name, i, k, r.Seq, last[k])
			}
			last[several[i].Subject] = r.Seq
		}
		for i, ev := range several {
			one, many := read(alone[i%3]), read(ev)
			if many.seq != got[i].Seq || many.id != strings.ToLower(ev.ID) || many.app != ev.SourceApp || many.typ != ev.Type ||
				many.subject != ev.Subject || many.version != ev.Version || string(many.envelope) != string(ev.Envelope) ||
				many.hash != ev.ContentHash || str(many.state) != "accepted" {
				t.Errorf("%s: event %d stored as %+v, want what was inserted (%+v)", c.name, i, many, ev)
			}
			wantTrace, wantToken := str(one.trace), str(one.token)
			if one.trace != nil {
				wantTrace = strings.Replace(wantTrace, fmt.Sprintf("k=%d", i%3), fmt.Sprintf("k=%d", i), 1)
			}
			if one.token != nil {
				wantToken = fmt.Sprintf("tok-%d", i)
			}
			if str(many.via) != str(one.via) || str(many.token) != wantToken || str(many.trace) != wantTrace {
				t.Errorf("%s: event %d stored via %s, token %s, trace %s; want %s, %s, %s (as one event alone of its kind)",
					c.name, i, str(many.via), str(many.token), str(many.trace), str(one.via), wantToken, wantTrace)
			}
		}
	}
}

// TestInsertEventsManyInOneCall: a call of more events than one statement
// takes (insertChunkEvents) is inserted by several, in the round trip, in
// the call's order; in a transaction of its own and in a caller's.
func TestInsertEventsManyInOneCall(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		insert func([]store.NewEvent) ([]store.InsertedEvent, error)
	}{
		{"own transaction", func(evs []store.NewEvent) ([]store.InsertedEvent, error) { return s.InsertEvents(ctx, evs) }},
		{"caller's transaction", insertInTx(ctx, s)},
	} {
		evs := make([]store.NewEvent, 2101)
		for i := range evs {
			evs[i] = newEvent("contacts.person.updated", fmt.Sprintf("%s-k%d", c.name, i%7), fmt.Sprintf("h%d", i))
		}
		var before int64
		if err := s.Pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM events`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		got, err := c.insert(evs)
		if err != nil {
			t.Fatalf("%s: insert %d events: %v", c.name, len(evs), err)
		}
		for i, r := range got {
			if r.ID != evs[i].ID || r.Seq != before+1+int64(i) || r.Duplicate || r.Conflict {
				t.Fatalf("%s: result %d = %+v, want %s inserted with seq %d", c.name, i, r, evs[i].ID, before+1+int64(i))
			}
		}
		var n, ordered int
		if err := s.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE seq = $2 + ord)
			FROM events JOIN unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord) USING (id)`, ids(evs), before).Scan(&n, &ordered); err != nil {
			t.Fatal(err)
		}
		if n != len(evs) || ordered != len(evs) {
			t.Errorf("%s: %d of %d events stored, %d with the seq of their place in the call", c.name, n, len(evs), ordered)
		}
	}
}

// insertInTx inserts evs with InsertEventsTx in a transaction of st's,
// which it commits.
func insertInTx(ctx context.Context, st *store.Store) func([]store.NewEvent) ([]store.InsertedEvent, error) {
	return func(evs []store.NewEvent) (out []store.InsertedEvent, err error) {
		err = st.WithTx(ctx, func(tx pgx.Tx) error {
			out, err = store.InsertEventsTx(ctx, tx, evs)
			return err
		})
		return out, err
	}
}

// ids are the ids of evs, in order.
func ids(evs []store.NewEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func TestInsertEventsNothingToNotifyForDuplicates(t *testing.T) {
	t.Parallel()
	s, url := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema, err := testkit.Schema(ctx, s.Pool)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect listener: %v", err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatalf("listen: %v", err)
	}
	ev := newEvent("contacts.person.updated", "p", "h")
	if _, err := s.InsertEvents(ctx, []store.NewEvent{ev}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	// The first insert's wake-up, which is sent after the commit, beside
	// the caller: wait for it, so it cannot pass for the second's.
	firstCtx, firstCancel := context.WithTimeout(ctx, 5*time.Second)
	defer firstCancel()
	if _, err := testkit.WaitWakeUp(firstCtx, listener, schema); err != nil {
		t.Fatalf("no wake-up after the first insert: %v", err)
	}
	if _, err := s.InsertEvents(ctx, []store.NewEvent{ev}); err != nil {
		t.Fatalf("insert again: %v", err)
	}
	// Only a wake-up of this schema counts.
	waitCtx, waitCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer waitCancel()
	if n, err := testkit.WaitWakeUp(waitCtx, listener, schema); err == nil {
		t.Errorf("got wake-up %+v although nothing was inserted", n)
	}
}

func TestInsertEventsIdempotency(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	first := newEvent("contacts.person.updated", "p-1", "hash-a")
	res, err := s.InsertEvents(ctx, []store.NewEvent{first})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	firstSeq := res[0].Seq

	sameContent := first
	sameContent.Envelope = []byte(`{"other":"time"}`)
	otherContent := first
	otherContent.ContentHash = "hash-b"
	fresh := newEvent("contacts.person.updated", "p-1", "hash-c")
	freshTwiceSame := fresh
	freshTwiceOther := fresh
	freshTwiceOther.ContentHash = "hash-d"

	tests := []struct {
		name          string
		in            store.NewEvent
		wantDuplicate bool
		wantConflict  bool
		wantSeq       func(got []store.InsertedEvent) int64
	}{
		{"same id same content", sameContent, true, false, func([]store.InsertedEvent) int64 { return firstSeq }},
		{"same id other content", otherContent, false, true, func([]store.InsertedEvent) int64 { return 0 }},
		{"new id", fresh, false, false, nil},
		{"new id repeated in the call", freshTwiceSame, true, false, func(got []store.InsertedEvent) int64 { return got[2].Seq }},
		{"new id repeated with other content", freshTwiceOther, false, true, func([]store.InsertedEvent) int64 { return 0 }},
	}
	in := make([]store.NewEvent, len(tests))
	for i, tt := range tests {
		in[i] = tt.in
	}
	got, err := s.InsertEvents(ctx, in)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := got[i]
			if r.Duplicate != tt.wantDuplicate || r.Conflict != tt.wantConflict || r.ID != tt.in.ID {
				t.Errorf("result = %+v, want duplicate=%v conflict=%v", r, tt.wantDuplicate, tt.wantConflict)
			}
			if tt.wantSeq != nil {
				if want := tt.wantSeq(got); r.Seq != want {
					t.Errorf("seq = %d, want %d", r.Seq, want)
				}
			} else if r.Seq <= firstSeq {
				t.Errorf("seq = %d, want a new one after %d", r.Seq, firstSeq)
			}
		})
	}

	var rows int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Errorf("events table holds %d rows, want 2 (duplicates and conflicts insert nothing)", rows)
	}
	stored, err := s.GetEvent(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Envelope) != string(first.Envelope) {
		t.Errorf("duplicate replaced the stored envelope: %s", stored.Envelope)
	}

	// A publish of one event takes a path of its own (one statement).
	for _, tt := range tests[:2] {
		got, err := s.InsertEvents(ctx, []store.NewEvent{tt.in})
		if err != nil {
			t.Fatalf("%s, alone: %v", tt.name, err)
		}
		r := got[0]
		if r.Duplicate != tt.wantDuplicate || r.Conflict != tt.wantConflict || r.ID != tt.in.ID || r.Seq != tt.wantSeq(got) {
			t.Errorf("%s, alone: result = %+v, want duplicate=%v conflict=%v seq=%d", tt.name, r, tt.wantDuplicate, tt.wantConflict, tt.wantSeq(got))
		}
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Errorf("events table holds %d rows after the single publishes, want 2", rows)
	}
}

func TestInsertEventsWaitsForKeyLock(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-1", "h")}); err != nil {
		t.Fatal(err)
	}

	// Hold the key's stripe as another publisher would.
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT FROM key_stripes WHERE type = 'contacts.person.updated' AND version = 1
		AND stripe = $1 FOR NO KEY UPDATE`, store.KeyStripe("person-9")); err != nil {
		t.Fatal(err)
	}

	// Two publishers of the key wait: one event alone (one statement) and
	// one beside another type's (the lock statements, then the inserts).
	type result struct {
		seq int64 // of the key's event
		err error
	}
	done := make(chan result, 2)
	publish := func(evs ...store.NewEvent) {
		got, err := s.InsertEvents(ctx, evs)
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{seq: got[len(got)-1].Seq}
	}
	go publish(newEvent("contacts.person.updated", "person-9", "h2"))
	go publish(newEvent("contacts.other.happened", "zzz", "h0"), newEvent("contacts.person.updated", "person-9", "h1"))
	select {
	case r := <-done:
		t.Fatalf("InsertEvents returned (%+v) while another transaction held the key's lock", r)
	case <-time.After(300 * time.Millisecond):
	}
	var inserted int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&inserted); err != nil {
		t.Fatal(err)
	}
	if inserted != 1 {
		t.Errorf("%d rows visible while the publishers wait, want the first one", inserted)
	}
	// The holder publishes the key too, after the others began to wait:
	// their events must still come after its own in seq order.
	held, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{newEvent("contacts.person.updated", "person-9", "h3")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("insert after the lock was released: %v", r.err)
			}
			if r.seq <= held[0].Seq {
				t.Errorf("a waiting publisher's event took seq %d, before the lock holder's %d", r.seq, held[0].Seq)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("InsertEvents still blocked after the lock was released")
		}
	}
}

// TestInsertEventsOfATakenIdWaitsForItsTransaction: a publish of one event
// whose id another transaction has inserted and not committed waits for it,
// then reports the stored event as a duplicate (same content) and inserts
// nothing.
func TestInsertEventsOfATakenIdWaitsForItsTransaction(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first publish of the type makes its stripe rows.
	if _, err := s.InsertEvents(ctx, []store.NewEvent{newEvent("contacts.person.updated", "person-0", "h")}); err != nil {
		t.Fatal(err)
	}
	ev := newEvent("contacts.person.updated", "person-1", "h")
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	first, err := store.InsertEventsTx(ctx, tx, []store.NewEvent{ev})
	if err != nil {
		t.Fatal(err)
	}
	other := ev
	other.Subject = "person-2" // another key: only the id is shared
	done := make(chan []store.InsertedEvent, 1)
	errs := make(chan error, 1)
	go func() {
		got, err := s.InsertEvents(ctx, []store.NewEvent{other})
		if err != nil {
			errs <- err
			return
		}
		done <- got
	}()
	select {
	case got := <-done:
		t.Fatalf("the publish returned %+v while the id's transaction was open", got)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if !got[0].Duplicate || got[0].Seq != first[0].Seq {
			t.Errorf("publish of the taken id = %+v, want a duplicate of seq %d", got[0], first[0].Seq)
		}
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the publish still waits after the id's transaction committed")
	}
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d events, want 2", n)
	}
}

// TestInsertEventsConcurrentPublishersKeepKeyOrder runs several publishers of
// one key while an observer polls the log like a relay: no event of the key may
// become visible behind one already seen, and each publisher's events must
// appear in its publish order. Multi-key batches in opposite key orders check
// that lock ordering avoids deadlocks.
func TestInsertEventsConcurrentPublishersKeepKeyOrder(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const publishers, perPublisher = 4, 50
	stopWatching := testkit.WatchVisibility(func() ([]int64, error) {
		rows, err := s.Pool.Query(ctx,
			`SELECT seq FROM events WHERE type = 'contacts.person.updated' AND subject = 'k' ORDER BY seq`)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	})

	type published struct {
		id    string
		order int
	}
	var mu sync.Mutex
	byPublisher := make([][]published, publishers)
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perPublisher {
				batch := []store.NewEvent{newEvent("contacts.person.updated", "k", "h")}
				if i%5 == 0 {
					// Two extra keys, in an order that differs between publishers.
					a := newEvent("contacts.person.updated", "x", "h")
					b := newEvent("contacts.person.updated", "y", "h")
					if p%2 == 0 {
						batch = append([]store.NewEvent{a, b}, batch...)
					} else {
						batch = append([]store.NewEvent{b, a}, batch...)
					}
				}
				if _, err := s.InsertEvents(ctx, batch); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				byPublisher[p] = append(byPublisher[p], published{batch[len(batch)-1].ID, i})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publisher: %v", err)
	}
	if err := stopWatching(); err != nil {
		t.Fatalf("observer: %v", err)
	}

	rows, err := s.Pool.Query(ctx,
		`SELECT id::text FROM events WHERE type = 'contacts.person.updated' AND subject = 'k' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != publishers*perPublisher {
		t.Fatalf("got %d events of the key, want %d", len(ids), publishers*perPublisher)
	}
	position := make(map[string]int, len(ids))
	for i, id := range ids {
		position[id] = i
	}
	for p, evs := range byPublisher {
		for i := 1; i < len(evs); i++ {
			if position[evs[i].id] < position[evs[i-1].id] {
				t.Errorf("publisher %d: event %d precedes event %d in seq order", p, evs[i].order, evs[i-1].order)
			}
		}
	}
}

func TestRecordRejectionAndLastRejections(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	id := uuid.NewString()
	long := strings.Repeat("é", 1500)

	tests := []struct {
		name string
		in   store.Rejection
		want store.RejectedEvent
	}{
		{
			name: "all fields",
			in: store.Rejection{ID: id, SourceApp: "contacts", Type: "contacts.person.updated", Version: 2,
				Subject: "p-1", Code: "data_invalid", Reason: "/name: missing"},
			want: store.RejectedEvent{ID: id, SourceApp: "contacts", Type: "contacts.person.updated", Version: 2,
				Subject: "p-1", Code: "data_invalid", Reason: "/name: missing"},
		},
		{
			name: "no id, no type, no version, no subject",
			in:   store.Rejection{SourceApp: "ghost", Code: "unknown_app", Reason: "unknown app"},
			want: store.RejectedEvent{SourceApp: "ghost", Code: "unknown_app", Reason: "unknown app"},
		},
		{
			name: "id that is not a UUID",
			in:   store.Rejection{ID: "not-a-uuid", SourceApp: "contacts", Code: "id_invalid", Reason: "bad id"},
			want: store.RejectedEvent{SourceApp: "contacts", Code: "id_invalid", Reason: "bad id"},
		},
		{
			name: "unstorable text and a long reason",
			in: store.Rejection{SourceApp: "a\x00b", Type: "t\xff", Version: 1 << 40, Subject: "s\x00\xfe",
				Code: "subject_invalid", Reason: long},
			want: store.RejectedEvent{SourceApp: "a\uFFFDb", Type: "t\uFFFD", Subject: "s\uFFFD\uFFFD",
				Code: "subject_invalid", Reason: strings.Repeat("é", 1000)},
		},
	}
	for _, tt := range tests {
		if err := s.RecordRejection(ctx, tt.in); err != nil {
			t.Fatalf("%s: record: %v", tt.name, err)
		}
	}

	got, err := s.LastRejections(ctx, 10)
	if err != nil {
		t.Fatalf("last rejections: %v", err)
	}
	if len(got) != len(tests) {
		t.Fatalf("got %d rejections, want %d", len(got), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := got[len(got)-1-i] // newest first
			if r.ReceivedAt.IsZero() || r.Seq == 0 {
				t.Errorf("missing seq or time: %+v", r)
			}
			r.ReceivedAt, r.Seq = time.Time{}, 0
			if r != tt.want {
				t.Errorf("got  %+v\nwant %+v", r, tt.want)
			}
		})
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq > got[i-1].Seq {
			t.Errorf("rejections not newest first: seq %d before %d", got[i-1].Seq, got[i].Seq)
		}
	}

	limited, err := s.LastRejections(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(limited) != 2 || limited[0].Seq != got[0].Seq {
		t.Errorf("limit 2 gave %d rows starting at %v", len(limited), limited)
	}

	// A rejected id does not block a later accepted event with that id, and
	// is not returned by GetEvent.
	if _, err := s.GetEvent(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetEvent of a rejected id: err = %v, want ErrNotFound", err)
	}
	ev := newEvent("contacts.person.updated", "p-1", "h")
	ev.ID = id
	res, err := s.InsertEvents(ctx, []store.NewEvent{ev})
	if err != nil || res[0].Duplicate || res[0].Conflict {
		t.Errorf("insert of an id only seen rejected: %+v, %v", res, err)
	}
}

func TestGetEventNotFound(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	for _, id := range []string{uuid.NewString(), "not-a-uuid", ""} {
		if _, err := s.GetEvent(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetEvent(%q): err = %v, want ErrNotFound", id, err)
		}
	}
}

func TestLookupDeclarationAndAppExists(t *testing.T) {
	t.Parallel()
	s, _ := openEventsStore(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO apps (id, endpoint, delivery_path, manifest, content_hash)
		VALUES ('contacts', 'http://c', '/d', '{}', 'x'), ('gone', 'http://g', '/d', '{}', 'x')`)
	exec(`UPDATE apps SET removed_at = now() WHERE id = 'gone'`)
	exec(`INSERT INTO declarations (type, version, app, name, subject, data_schema, place, retired_at) VALUES
		('contacts.person.updated', 1, 'contacts', 'person.updated', 'person', '{"type":"object"}', NULL, NULL),
		('contacts.person.updated', 2, 'contacts', 'person.updated', 'person', '{}', NULL, now()),
		('contacts.room.booked', 1, 'contacts', 'room.booked', 'room', '{}', '{"kind":"room"}', NULL)`)

	decl, err := s.LookupDeclaration(ctx, "contacts.person.updated", 1)
	if err != nil {
		t.Fatalf("lookup: %v", err)
	}
	if decl.Type != "contacts.person.updated" || decl.Version != 1 || decl.App != "contacts" ||
		decl.Subject != "person" || decl.Place != nil {
		t.Errorf("declaration = %+v", decl)
	}
	var schema map[string]any
	if err := json.Unmarshal(decl.DataSchema, &schema); err != nil || schema["type"] != "object" {
		t.Errorf("data schema = %s (%v)", decl.DataSchema, err)
	}
	placed, err := s.LookupDeclaration(ctx, "contacts.room.booked", 1)
	if err != nil || len(placed.Place) == 0 {
		t.Errorf("placed declaration = %+v, %v; want its place", placed, err)
	}

	missing := []struct {
		typ     string
		version int
	}{
		{"contacts.person.updated", 2}, // retired
		{"contacts.person.updated", 3},
		{"contacts.person.created", 1},
		{"contacts.person.updated", 0},
		{"contacts.person.updated", 1 << 40},
		{"bad\x00type", 1},
	}
	for _, m := range missing {
		if _, err := s.LookupDeclaration(ctx, m.typ, m.version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LookupDeclaration(%q, %d): err = %v, want ErrNotFound", m.typ, m.version, err)
		}
	}

	apps := []struct {
		app  string
		want bool
	}{
		{"contacts", true},
		{"gone", false},
		{"nobody", false},
		{"bad\xff", false},
	}
	for _, a := range apps {
		got, err := s.AppExists(ctx, a.app)
		if err != nil || got != a.want {
			t.Errorf("AppExists(%q) = %v, %v; want %v", a.app, got, err, a.want)
		}
	}
}
