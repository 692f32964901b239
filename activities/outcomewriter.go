package activities

import (
	"context"
	"time"
)

// outcomeWriter writes a Deliver execution's outcome rows in the
// background, in order: each write takes every update that arrived since
// the last, in one statement, so quick POSTs share statements and slow ones
// are recorded one by one as they happen.
type outcomeWriter struct {
	in   chan OutcomeUpdate
	done chan struct{}
	// Set by the writer goroutine, read after done is closed.
	unrecorded []OutcomeUpdate
	err        error
}

// outcomeWriteTimeout bounds one write; a cancelled activity still records
// what it delivered.
const outcomeWriteTimeout = 10 * time.Second

func (a *Activities) startOutcomeWriter(ctx context.Context, subscriptionID, subject string) *outcomeWriter {
	w := &outcomeWriter{in: make(chan OutcomeUpdate, 64), done: make(chan struct{})}
	base := context.WithoutCancel(ctx)
	go func() {
		defer close(w.done)
		for u := range w.in {
			batch := []OutcomeUpdate{u}
		more:
			for {
				select {
				case u, ok := <-w.in:
					if !ok {
						break more
					}
					batch = append(batch, u)
				default:
					break more
				}
			}
			wctx, cancel := context.WithTimeout(base, outcomeWriteTimeout)
			if err := a.Store.RecordOutcomes(wctx, subscriptionID, subject, storeOutcomes(batch)); err != nil {
				w.unrecorded = append(w.unrecorded, batch...)
				w.err = err
			}
			cancel()
		}
	}()
	return w
}

func (w *outcomeWriter) add(u OutcomeUpdate) { w.in <- u }

// close waits for every update to be written and returns those that could
// not be, with the last error.
func (w *outcomeWriter) close() ([]OutcomeUpdate, error) {
	close(w.in)
	<-w.done
	return w.unrecorded, w.err
}
