package testkit

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Sent is a pgx tracer (pgx.ConnConfig.Tracer) that counts what a
// connection sends: statements one by one (Exec, Query, QueryRow, with
// their text) and batches (SendBatch: one round trip for all of their
// statements once they are prepared).
type Sent struct {
	mu         sync.Mutex
	statements []string
	batches    int
}

// TraceQueryStart notes a statement sent on its own.
func (s *Sent) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statements = append(s.statements, strings.Join(strings.Fields(data.SQL), " "))
	return ctx
}

// TraceQueryEnd does nothing.
func (s *Sent) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart notes a batch.
func (s *Sent) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	return ctx
}

// TraceBatchQuery does nothing.
func (s *Sent) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (s *Sent) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Reset returns the statements and the number of batches sent since the
// last Reset, and forgets them.
func (s *Sent) Reset() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, b := s.statements, s.batches
	s.statements, s.batches = nil, 0
	return st, b
}
