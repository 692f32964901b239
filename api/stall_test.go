package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/api"
	"herald/config"
	"herald/internal/testkit/system"
)

// timed is one answer of postWithin, or why there was none, and how long
// it took.
type timed struct {
	answer
	err  error
	took time.Duration
}

// postWithin sends body to POST /v1/events with token and waits at most
// within for the answer; safe to call from any goroutine (it does not
// check the answer against the OpenAPI document: checkTimed does).
func (s *server) postWithin(token, body string, within time.Duration) timed {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+api.EventsPath, strings.NewReader(body))
	if err != nil {
		return timed{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return timed{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return timed{answer: answer{status: resp.StatusCode, header: resp.Header, body: b}, err: err, took: time.Since(start)}
}

// checkTimed checks an answer of postWithin against the OpenAPI document.
func checkTimed(t *testing.T, a timed) {
	t.Helper()
	checkAnswer(t, http.MethodPost, api.EventsPath, a.status, a.header.Get("Content-Type"), a.body)
}

// TestOpenTransactionStallsNoOtherApp: an app (contacts) that publishes a
// key in a transaction of its own and keeps it open, then sends as many
// requests for the same key as the API's pool has connections, through two
// of its tokens, cannot stall another app (billing): billing's request is
// answered at once. The app's own requests take at most all but one of the
// pool's connections (one more is answered 429 app_busy), wait for the
// key's lock at most api.LockTimeout and are then answered 503
// lock_timeout with Retry-After, having written nothing; once the
// transaction commits the app publishes the key again.
func TestOpenTransactionStallsNoOtherApp(t *testing.T) {
	t.Parallel()
	const conns = 4
	s := startServer(t, system.Config(func(c *config.Worker) { c.APIDBConns = conns }))
	tokens := []string{s.token("contacts", "crm"), s.token("contacts", "crm-2")}
	billing := s.token("billing", "ledger")
	const key = "person-k"

	tx, err := s.store.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publisher.PublishTx(t.Context(), tx, system.PersonRequest(key, `{"n":0}`)); err != nil {
		t.Fatal(err)
	}
	var txPID int
	if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	held := make([]timed, conns)
	done := make(chan int, conns)
	t.Cleanup(func() {
		// Before the server stops: the held requests end with the
		// transaction at the latest.
		_ = tx.Rollback(context.Background())
		wg.Wait()
	})
	start := time.Now()
	for i := range conns {
		wg.Go(func() {
			held[i] = s.postWithin(tokens[i%2], person("", key, i+1), 60*time.Second)
			done <- i
		})
	}
	// Wait until every held request waits for the key's lock (on a
	// connection of the API's pool) or was answered.
	answered, waiting := 0, 0
	for deadline := time.Now().Add(10 * time.Second); waiting+answered < conns; {
		if time.Now().After(deadline) {
			t.Fatalf("the held requests neither wait for the key's lock nor were answered: %d waiting, %d answered", waiting, answered)
		}
		select {
		case <-done:
			answered++
		case <-time.After(10 * time.Millisecond):
		}
		waiting = blockedBy(t, s, txPID)
	}
	t.Logf("%d of contacts' requests wait for the key's lock (the API's pool has %d connections), %d answered, after %v",
		waiting, conns, answered, time.Since(start).Round(time.Millisecond))

	other := s.postWithin(billing, invoice("invoice-1"), 3*time.Second)
	if other.err != nil {
		t.Fatalf("billing's request, with contacts' transaction open: no answer within 3 s (%v after %v)",
			other.err, other.took.Round(time.Millisecond))
	}
	checkTimed(t, other)
	wantAccepted(t, other.answer, 1)
	t.Logf("billing answered %d in %v", other.status, other.took.Round(time.Millisecond))

	// contacts' own requests end while its transaction is still open.
	for answered < conns {
		select {
		case <-done:
			answered++
		case <-time.After(api.LockTimeout + 10*time.Second):
			t.Fatalf("contacts' requests for a key its open transaction holds: %d of %d answered after %v",
				answered, conns, time.Since(start).Round(time.Millisecond))
		}
	}
	busy, timedOut := 0, 0
	for i, a := range held {
		if a.err != nil {
			t.Fatalf("held request %d: %v", i, a.err)
		}
		checkTimed(t, a)
		switch a.status {
		case http.StatusTooManyRequests:
			wantProblem(t, a.answer, http.StatusTooManyRequests, api.CodeAppBusy)
			busy++
		default:
			wantProblem(t, a.answer, http.StatusServiceUnavailable, api.CodeLockTimeout)
			if a.took < api.LockTimeout-time.Second {
				t.Errorf("held request %d answered lock_timeout after %v, before the lock timeout", i, a.took)
			}
			timedOut++
		}
		if got := a.header.Get("Retry-After"); got != "1" {
			t.Errorf("held request %d: %d with Retry-After %q, want 1", i, a.status, got)
		}
	}
	if busy != 1 || timedOut != conns-1 {
		t.Fatalf("%d app_busy and %d lock_timeout, want 1 and %d", busy, timedOut, conns-1)
	}
	var n int
	if err := s.store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE subject = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d events of %s visible while the transaction is open", n, key)
	}

	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantAccepted(t, s.post(tokens[0], "application/json", person("", key, 9)), 1)
}

// blockedBy counts the backends that wait for a lock the backend pid
// holds, directly or behind one that does (the first waiter for a row
// holds the row's tuple lock, which the next ones wait for).
func blockedBy(t *testing.T, s *server, pid int) int {
	t.Helper()
	var n int
	err := s.store.Pool.QueryRow(t.Context(), `
		WITH direct AS (SELECT pid FROM pg_stat_activity WHERE $1::integer = ANY (pg_blocking_pids(pid)))
		SELECT count(*) FROM pg_stat_activity a
		 WHERE a.pid IN (SELECT pid FROM direct)
		    OR EXISTS (SELECT 1 FROM direct d WHERE d.pid = ANY (pg_blocking_pids(a.pid)))`, pid).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOpsActionLockWaitBounded: an action of the operations API that waits
// for a lock (a subscription's pause waits for the subscription states'
// row of apply_locks, which an apps apply holds while it runs) gives up
// after api.LockTimeout with 503 lock_timeout, changing nothing, instead
// of holding one of the API's connections until the lock's holder ends.
func TestOpsActionLockWaitBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ops := s.operatorToken("ops")
	tx, err := s.store.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `INSERT INTO apply_locks (name) VALUES ('subscriptions')
		ON CONFLICT (name) DO UPDATE SET locked_at = now()`); err != nil {
		t.Fatal(err)
	}
	sub := `{"subscription":"` + system.BillingSub + `","reason":"lock"}`
	start := time.Now()
	a := s.action("/v1/ops/subscriptions/pause", ops, sub)
	took := time.Since(start)
	wantProblem(t, a, http.StatusServiceUnavailable, api.CodeLockTimeout)
	if got := a.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
	if took < api.LockTimeout-time.Second || took > api.LockTimeout+5*time.Second {
		t.Fatalf("answered after %v, want about %v", took, api.LockTimeout)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s.action("/v1/ops/subscriptions/pause", ops, sub), http.StatusOK)
}
