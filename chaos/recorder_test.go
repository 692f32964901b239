package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"herald/signing"
	"herald/subscriber"
)

// outcome is what became of one arrival, as far as Herald could tell.
type outcome string

const (
	// outcomeAck: answered 2xx in time; Herald counts the event delivered.
	outcomeAck outcome = "ack"
	// outcomeNack: answered an error status; the event was not processed.
	outcomeNack outcome = "nack"
	// outcomeLost: processed, but the answer never reached Herald (an answer
	// later than the delivery timeout, or a connection reset mid-response).
	outcomeLost outcome = "lost"
	// outcomeInvalid: refused by signature or token verification.
	outcomeInvalid outcome = "invalid"
)

// mode is how the subscriber misbehaves for one arrival.
type mode string

const (
	modeNormal  mode = ""
	modeFail    mode = "500"     // answer 500 without processing
	modeTimeout mode = "timeout" // process, then answer after the delivery timeout
	modeReset   mode = "reset"   // process, then reset the connection mid-response
	modeSlow    mode = "slow"    // process, then answer after 300–900 ms (in time)
)

// Timing of the misbehaving modes, relative to HERALD_DELIVERY_TIMEOUT (2 s):
// a slow answer is well inside it, a late one well past it.
const (
	slowMin     = 300 * time.Millisecond
	slowMax     = 900 * time.Millisecond
	lateAnswer  = deliveryTimeout + time.Second
	safeAttempt = 6 // from this attempt on the subscriber never fails an event
)

// arrival is one delivery request that reached the subscriber.
type arrival struct {
	Sub     string // the subscription id (token sub)
	Key     string // the subject key
	EventID string
	N       int // the event's number within its key, from its data
	Attempt int // Herald-Attempt, from the token
	Mode    mode
	Outcome outcome
	// Start is when the request arrived, Processed when the handler took the
	// event (zero if it did not), End when the answer was written or the
	// connection reset.
	Start, Processed, End time.Time
}

// rule makes the subscriber misbehave for the keys it matches, on attempts up
// to UpTo (and never from safeAttempt on, for the failing modes).
type rule struct {
	Mode  mode
	Match func(sub, key string) bool
	UpTo  int
}

type arrivalKey struct{}

// recorder is the recording subscriber: an HTTP server on loopback that
// verifies every delivery with the subscriber package (signature, audience,
// body hash, replay), records each arrival, and misbehaves when told to.
type recorder struct {
	verify http.Handler

	mu       sync.Mutex
	arrivals []arrival
	acked    map[string]map[string]bool // subscription → event id → acknowledged
	rules    map[string]rule
	inflight int
	// posting counts the requests being answered per (subscription, event
	// id), from their headers, for faults that pick busy keys.
	posting map[[2]string]int
	addr    string
	srv     *http.Server
}

func newRecorder(keys *signing.KeySet, audiences []string) (*recorder, error) {
	r := &recorder{acked: map[string]map[string]bool{}, rules: map[string]rule{}, posting: map[[2]string]int{}}
	h, err := subscriber.New(subscriber.Config{Audiences: audiences, StaticKeys: keys.PublicKeys()}, r.handle)
	if err != nil {
		return nil, err
	}
	r.verify = h
	return r, nil
}

// URL is the endpoint to put in the subscribing apps' manifests.
func (r *recorder) URL() string { return "http://" + r.addr }

// listen (re)opens the listener, on the same port after the first time.
func (r *recorder) listen() error {
	r.mu.Lock()
	addr, open := r.addr, r.srv != nil
	r.mu.Unlock()
	if open {
		return nil
	}
	if addr == "" {
		a, err := freeAddr()
		if err != nil {
			return err
		}
		addr = a
	}
	var l net.Listener
	var err error
	for range 50 { // the old socket may take a moment to go
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	r.mu.Lock()
	r.addr, r.srv = l.Addr().String(), srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// refuse closes the listener and every open connection: until listen, every
// delivery is refused at connect.
func (r *recorder) refuse() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (r *recorder) setRule(name string, ru rule) {
	r.mu.Lock()
	r.rules[name] = ru
	r.mu.Unlock()
}

func (r *recorder) clearRule(name string) {
	r.mu.Lock()
	delete(r.rules, name)
	r.mu.Unlock()
}

// modeFor picks the misbehaviour for an arrival: failing modes first.
func (r *recorder) modeFor(a *arrival) mode {
	r.mu.Lock()
	defer r.mu.Unlock()
	chosen := modeNormal
	for _, ru := range r.rules {
		if !ru.Match(a.Sub, a.Key) || a.Attempt > ru.UpTo {
			continue
		}
		if ru.Mode == modeSlow {
			if chosen == modeNormal {
				chosen = modeSlow
			}
			continue
		}
		if a.Attempt < safeAttempt {
			chosen = ru.Mode
		}
	}
	return chosen
}

// ServeHTTP records one arrival around the verifying handler, whose answer
// is buffered so that a reset can still replace it.
func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	a := &arrival{Start: time.Now(), Sub: req.Header.Get("Herald-Subscription"), EventID: req.Header.Get("Herald-Event-Id")}
	a.Attempt, _ = strconv.Atoi(req.Header.Get("Herald-Attempt"))
	pk := [2]string{a.Sub, a.EventID}
	r.mu.Lock()
	r.inflight++
	r.posting[pk]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inflight--
		if r.posting[pk]--; r.posting[pk] <= 0 {
			delete(r.posting, pk)
		}
		r.mu.Unlock()
	}()
	buf := &bufferedResponse{header: http.Header{}}
	r.verify.ServeHTTP(buf, req.WithContext(context.WithValue(req.Context(), arrivalKey{}, a)))

	switch {
	case a.Mode == modeReset && !a.Processed.IsZero():
		resetMidResponse(w)
		a.Outcome = outcomeLost
	case buf.status == http.StatusUnauthorized || buf.status == http.StatusBadRequest:
		a.Outcome = outcomeInvalid
	case buf.status >= 200 && buf.status <= 299 && a.Mode == modeTimeout:
		a.Outcome = outcomeLost
	case buf.status >= 200 && buf.status <= 299:
		a.Outcome = outcomeAck
	default:
		a.Outcome = outcomeNack
	}
	a.End = time.Now() // before the answer is written: Herald sees it later
	r.record(*a)
	if a.Mode != modeReset || a.Processed.IsZero() {
		buf.writeTo(w)
	}
}

func (r *recorder) record(a arrival) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals = append(r.arrivals, a)
	if a.Outcome == outcomeAck {
		m := r.acked[a.Sub]
		if m == nil {
			m = map[string]bool{}
			r.acked[a.Sub] = m
		}
		m[a.EventID] = true
	}
}

// handle is the subscriber.Handler: it runs only for verified deliveries.
func (r *recorder) handle(ctx context.Context, ev subscriber.Event) error {
	a, _ := ctx.Value(arrivalKey{}).(*arrival)
	if a == nil {
		return errors.New("chaos recorder: no arrival in context")
	}
	var data struct {
		N int `json:"n"`
	}
	if err := ev.DecodeData(&data); err != nil {
		return err
	}
	a.Sub, a.Key, a.EventID, a.N, a.Attempt = ev.Subscription, ev.Subject, ev.ID, data.N, ev.Attempt
	a.Mode = r.modeFor(a)
	switch a.Mode {
	case modeFail:
		return errors.New("chaos: failing on purpose")
	case modeSlow:
		time.Sleep(slowMin + rand.N(slowMax-slowMin))
	case modeTimeout:
		a.Processed = time.Now()
		t := time.NewTimer(lateAnswer)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return nil
	}
	a.Processed = time.Now()
	return nil
}

// resetMidResponse sends the start of a status line, then resets the
// connection (RST, not FIN).
func resetMidResponse(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	_, _ = rw.WriteString("HTTP/1.1 20")
	_ = rw.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// waitInflight waits until at least n deliveries are being answered, up to
// timeout, and returns how many are.
func (r *recorder) waitInflight(n int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		got := r.inflight
		r.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// postingNow returns the (subscription, event id) of every request being
// answered now.
func (r *recorder) postingNow() [][2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][2]string, 0, len(r.posting))
	for pk := range r.posting {
		out = append(out, pk)
	}
	return out
}

// snapshot returns a copy of every arrival so far.
func (r *recorder) snapshot() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.arrivals...)
}

// missing counts the (subscription, event) pairs not acknowledged yet.
func (r *recorder) missing(subs []string, ids []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range subs {
		for _, id := range ids {
			if !r.acked[s][id] {
				n++
			}
		}
	}
	return n
}

// bufferedResponse holds the verifying handler's answer until the recorder
// decides to send it.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) writeTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}
