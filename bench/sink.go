package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// subscriptionHeader names the subscription of a delivery. Herald sets it
// (docs/design.md#the-http-contract-of-a-delivery); the ceiling's activity sets it too.
const subscriptionHeader = "Herald-Subscription"

// delivery identifies one expected arrival: an event for one subscription.
type delivery struct {
	Sub string
	ID  string
}

// sink is the loopback subscriber: it verifies nothing, answers 204, and
// records the first arrival time of every delivery and the order of each
// (subscription, subject) key into the current recording.
type sink struct {
	srv *http.Server
	ln  net.Listener

	mu  sync.Mutex
	rec *recording
}

// recording is what the sink saw during one measurement.
type recording struct {
	expected map[delivery]bool
	arrived  map[delivery]time.Time
	// maxN is the highest event number seen per subscription and subject.
	maxN       map[string]int
	duplicates int
	outOfOrder int
	// stray counts deliveries that were not expected or could not be read.
	stray int
	done  chan struct{}
}

// sinkBody is the part of a CloudEvent the sink reads.
type sinkBody struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Data    struct {
		N *int `json:"n"`
	} `json:"data"`
}

// startSink listens on a free loopback port and serves until close.
func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the sink: %w", err)
	}
	s := &sink{ln: ln}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the sink's base URL.
func (s *sink) URL() string { return "http://" + s.ln.Addr().String() }

func (s *sink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// begin starts a recording that expects the given deliveries; arrivals of
// anything else count as stray until the next begin.
func (s *sink) begin(expected []delivery) *recording {
	r := &recording{
		expected: make(map[delivery]bool, len(expected)),
		arrived:  make(map[delivery]time.Time, len(expected)),
		maxN:     map[string]int{},
		done:     make(chan struct{}),
	}
	for _, d := range expected {
		r.expected[d] = true
	}
	if len(r.expected) == 0 {
		close(r.done)
	}
	s.mu.Lock()
	s.rec = r
	s.mu.Unlock()
	return r
}

// ServeHTTP records one delivery and answers 204.
func (s *sink) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	raw, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	var body sinkBody
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err == nil && body.Data.N == nil {
		err = errors.New("no data.n")
	}
	s.mu.Lock()
	if s.rec != nil {
		if err != nil {
			s.rec.stray++
		} else {
			s.rec.add(req.Header.Get(subscriptionHeader), body, now)
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// add records one readable delivery; the sink's lock is held.
func (r *recording) add(sub string, body sinkBody, at time.Time) {
	d := delivery{Sub: sub, ID: body.ID}
	if !r.expected[d] {
		r.stray++
		return
	}
	if _, seen := r.arrived[d]; seen {
		r.duplicates++
		return
	}
	r.arrived[d] = at
	key := sub + "|" + body.Subject
	n := *body.Data.N
	if last, ok := r.maxN[key]; ok && n <= last {
		r.outOfOrder++
	} else {
		r.maxN[key] = n
	}
	if len(r.arrived) == len(r.expected) {
		close(r.done)
	}
}

// wait blocks until every expected delivery arrived, ctx ends or timeout
// passes; it reports whether all arrived.
func (r *recording) wait(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// tally is a recording's outcome.
type tally struct {
	arrived    map[delivery]time.Time
	lost       int
	duplicates int
	outOfOrder int
	stray      int
}

// finish stops the recording (later arrivals are ignored) and returns its
// outcome.
func (s *sink) finish(r *recording) tally {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec == r {
		s.rec = nil
	}
	return tally{
		arrived:    r.arrived,
		lost:       len(r.expected) - len(r.arrived),
		duplicates: r.duplicates,
		outOfOrder: r.outOfOrder,
		stray:      r.stray,
	}
}
