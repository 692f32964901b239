package subscriber

import (
	"fmt"
	"net/http"
	"time"
)

// RejectError marks a permanent failure: the event can never be handled as
// it is (its data does not fit what the receiver expects). It is answered 422,
// which Herald treats as terminal (schema_mismatch).
type RejectError struct {
	Err error
}

// Reject wraps err as a permanent failure (422).
func Reject(err error) error {
	return &RejectError{Err: err}
}

// Error returns the wrapped error's text.
func (e *RejectError) Error() string {
	if e.Err == nil {
		return "event rejected"
	}
	return "event rejected: " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *RejectError) Unwrap() error { return e.Err }

// RetryError asks Herald to try again later. It is answered 503 with a
// Retry-After header (whole seconds, rounded up) when After is positive;
// Herald waits at least that long, capped at an hour.
type RetryError struct {
	After time.Duration
	Err   error
}

// Retry wraps err as a temporary failure to retry after the given delay (503).
func Retry(after time.Duration, err error) error {
	return &RetryError{After: after, Err: err}
}

// Error returns the wrapped error's text and the delay.
func (e *RetryError) Error() string {
	msg := "retry later"
	if e.After > 0 {
		msg = fmt.Sprintf("retry after %s", e.After)
	}
	if e.Err == nil {
		return msg
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *RetryError) Unwrap() error { return e.Err }

// retrySeconds is the Retry-After value for d: whole seconds, rounded up.
func retrySeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// StatusError answers a delivery with a chosen error status, e.g. 410 when the
// receiver no longer serves a subscription or 429 when it is overloaded.
type StatusError struct {
	Status int
	Err    error
}

// WithStatus wraps err to be answered with status, which must be a 4xx or 5xx
// code; anything else is answered 500.
func WithStatus(status int, err error) error {
	return &StatusError{Status: status, Err: err}
}

// Error returns the status and the wrapped error's text.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("status %d", e.Status)
	if e.Err == nil {
		return msg
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *StatusError) Unwrap() error { return e.Err }

// status is the HTTP status to answer.
func (e *StatusError) status() int {
	if e.Status < 400 || e.Status > 599 {
		return http.StatusInternalServerError
	}
	return e.Status
}
