package system

import (
	"context"
	"net/http"
	"slices"
	"sync"

	"herald/subscriber"
)

// Arrival is one delivery the subscriber accepted.
type Arrival struct {
	N       int
	Attempt int
	ID      string
}

// Recorder is the System's subscriber handler: it records the deliveries
// it accepted per app and subject, the subscriber's failures (forged or
// broken deliveries among them), and can be told to refuse some.
type Recorder struct {
	mu       sync.Mutex
	got      map[string][]Arrival
	failures []subscriber.Failure
	reject   func(app, subject string, n int) error
}

// NewRecorder returns an empty Recorder that accepts everything.
func NewRecorder() *Recorder { return &Recorder{got: map[string][]Arrival{}} }

// Handle is the subscriber.Handler that records (a test may serve it on a
// subscriber of its own).
func (r *Recorder) Handle(_ context.Context, ev subscriber.Event) error {
	var data struct {
		N int `json:"n"`
	}
	if err := ev.DecodeData(&data); err != nil {
		return subscriber.Reject(err)
	}
	app := ev.Audience[len("app:"):]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reject != nil {
		if err := r.reject(app, ev.Subject, data.N); err != nil {
			return err
		}
	}
	k := app + "|" + ev.Subject
	r.got[k] = append(r.got[k], Arrival{N: data.N, Attempt: ev.Attempt, ID: ev.ID})
	return nil
}

func (r *Recorder) onFailure(req *http.Request, f subscriber.Failure) {
	if req.Context().Err() != nil {
		// Herald hung up before the answer: a first attempt cut at its
		// deadline (docs/design.md), sent again later. Nobody reads this
		// answer, so it is no verification failure.
		return
	}
	r.mu.Lock()
	r.failures = append(r.failures, f)
	r.mu.Unlock()
}

// SetReject makes the handler answer a delivery of event n of subject to
// app with the error fn returns (subscriber.Reject for a permanent refusal,
// any other error for a retryable one); nil accepts everything. A refused
// delivery is not recorded.
func (r *Recorder) SetReject(fn func(app, subject string, n int) error) {
	r.mu.Lock()
	r.reject = fn
	r.mu.Unlock()
}

// Arrivals are the deliveries of subject app accepted, in arrival order.
func (r *Recorder) Arrivals(app, subject string) []Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[app+"|"+subject])
}

// Ns are the n of the events of subject app accepted, in arrival order.
func (r *Recorder) Ns(app, subject string) []int {
	var ns []int
	for _, a := range r.Arrivals(app, subject) {
		ns = append(ns, a.N)
	}
	return ns
}

// Count is how many deliveries of subject app accepted.
func (r *Recorder) Count(app, subject string) int { return len(r.Arrivals(app, subject)) }

// VerificationFailures are the subscriber's 401 and 400 answers: forged or
// broken deliveries.
func (r *Recorder) VerificationFailures() []subscriber.Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []subscriber.Failure
	for _, f := range r.failures {
		if f.Status == http.StatusUnauthorized || f.Status == http.StatusBadRequest {
			out = append(out, f)
		}
	}
	return out
}
