package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"herald/api"
	"herald/manifest"
	"herald/publish"
)

// The noisy-neighbour comparison (issue 26): healthy subscriptions measured
// alone, then in the same run beside neighbours that misbehave in every way
// an ordinary manifest or a stranger allows:
//   - a subscriber whose endpoint never answers (every POST times out),
//   - a subscriber whose endpoint answers 500 to everything,
//   - a subscriber with the costliest content filter `apps apply` accepts,
//     over events as large as the publisher may send,
//   - a client hammering the publishing API with well-formed guessed tokens.
//
// Herald's promise is that none of them slows the healthy subscriptions.
const (
	noisyApp       = "noisy-src"
	noisySlowApp   = "noisy-slow"
	noisyFailApp   = "noisy-fail"
	noisyFilterApp = "noisy-filter"
	// noisyFanOut is the healthy subscriptions' fan-out: every healthy event
	// goes to sink-1 and sink-2.
	noisyFanOut = 2
)

// Shapes of the comparison: a burst (throughput) and a paced run (latency),
// both to the two healthy subscriptions.
const (
	noisyBurstShape = "NB"
	noisyPacedShape = "NP"
)

// noisyShapes are the healthy shapes: a burst of 200 keys × 5 events and a
// paced run of rate events per second for d over 50 keys.
func noisyShapes(d time.Duration, rate float64) ([]Shape, error) {
	paced, err := steadyShape(d, rate, 50)
	if err != nil {
		return nil, err
	}
	paced.Name, paced.Subscriptions = noisyPacedShape, noisyFanOut
	return []Shape{{Name: noisyBurstShape, Keys: 200, EventsPerKey: 5, Subscriptions: noisyFanOut}, paced}, nil
}

// hostileFilter is the neighbour's content filter, the costliest kind that
// `apps apply` accepts (filter.TestWorstCaseWithinDeadline): a regular
// expression over a long string for every item, never true, so each
// evaluation runs into the cost limit or the deadline (and its events are
// then delivered unfiltered).
const hostileFilter = `data.items.exists(x, data.s.matches("a*b"))`

// hostileItems and hostileString size a neighbour's heavy event: its items
// and the length of the string the filter matches. 100 matches over 16 KiB
// run into the filter's cost limit; a larger event would only add work that
// any publisher may legitimately cause (validation, storage, the POST).
const (
	hostileItems  = 100
	hostileString = 16 << 10
)

// noisySchema is the schema of the neighbours' events: a number, and for the
// heavy events a list of integers and a long string.
var noisySchema = json.RawMessage(`{"type":"object","properties":{` +
	`"n":{"type":"integer"},"s":{"type":"string","maxLength":250000},` +
	`"items":{"type":"array","maxItems":5000,"items":{"type":"integer"}}}}`)

// noisyManifests declares the neighbours' apps: the publisher of three
// types and one subscriber per type, each at its own endpoint.
func noisyManifests(slowURL, failURL, filterURL string) []*manifest.Manifest {
	src := &manifest.Manifest{App: noisyApp, Endpoint: filterURL}
	for _, name := range []string{"slow", "fail", "heavy"} {
		src.Events = append(src.Events, manifest.Event{
			Name: name, Version: eventVersion, Subject: "item",
			Title: "Noisy neighbour's " + name + " event", DataSchema: noisySchema,
		})
	}
	sub := func(app, url, name, filter string) *manifest.Manifest {
		return &manifest.Manifest{App: app, Endpoint: url, Subscribes: []manifest.Subscription{
			{Type: manifest.EventType(noisyApp, name), Version: eventVersion, Filter: filter}}}
	}
	return []*manifest.Manifest{src,
		sub(noisySlowApp, slowURL, "slow", ""),
		sub(noisyFailApp, failURL, "fail", ""),
		sub(noisyFilterApp, filterURL, "heavy", hostileFilter),
	}
}

// NeighbourStats is what the neighbours did during one measurement.
type NeighbourStats struct {
	// Published counts the neighbours' events accepted, per type name.
	Published map[string]int `json:"published"`
	// Received counts the POSTs each neighbour endpoint got.
	Received map[string]int `json:"received"`
	// TokenGuesses counts the guessed-token requests by HTTP status
	// ("error" when no answer came).
	TokenGuesses map[string]int `json:"tokenGuesses"`
}

// neighbours runs the misbehaving apps' endpoints for the whole run and
// drives their load during a measurement.
type neighbours struct {
	servers map[string]*http.Server
	urls    map[string]string

	mu       sync.Mutex
	received map[string]int
	// calm makes every endpoint answer 204 at once (the control).
	calm bool
	// hold is what the never-answering endpoint waits on: open while drive
	// runs, closed otherwise, so hung POSTs end with the measurement and
	// the worker can stop without waiting out its delivery timeout.
	hold chan struct{}
}

// startNeighbours starts the three neighbour endpoints on loopback.
func startNeighbours() (*neighbours, error) {
	n := &neighbours{servers: map[string]*http.Server{}, urls: map[string]string{}, received: map[string]int{},
		hold: make(chan struct{})}
	close(n.hold) // no measurement yet: answer at once
	handlers := map[string]http.HandlerFunc{
		// Never answers: the worker's delivery timeout ends every attempt.
		noisySlowApp: func(w http.ResponseWriter, r *http.Request) {
			hold, calm := n.count(noisySlowApp)
			if calm {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			select {
			case <-r.Context().Done():
			case <-hold:
				http.Error(w, "neighbour gave up", http.StatusGatewayTimeout)
			}
		},
		noisyFailApp: func(w http.ResponseWriter, r *http.Request) {
			if _, calm := n.count(noisyFailApp); calm {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			http.Error(w, "neighbour always fails", http.StatusInternalServerError)
		},
		noisyFilterApp: func(w http.ResponseWriter, r *http.Request) {
			n.count(noisyFilterApp)
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		},
	}
	for app, h := range handlers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			n.close()
			return nil, fmt.Errorf("listen for neighbour %s: %w", app, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		n.servers[app] = srv
		n.urls[app] = "http://" + ln.Addr().String()
	}
	return n, nil
}

// count counts a POST to app and returns the current hold channel, and
// whether the neighbours behave.
func (n *neighbours) count(app string) (<-chan struct{}, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.received[app]++
	return n.hold, n.calm
}

// close stops the endpoints, cutting hung requests.
func (n *neighbours) close() {
	for _, srv := range n.servers {
		_ = srv.Close()
	}
}

// manifests are the neighbours' manifests pointing at their endpoints.
func (n *neighbours) manifests() []*manifest.Manifest {
	return noisyManifests(n.urls[noisySlowApp], n.urls[noisyFailApp], n.urls[noisyFilterApp])
}

// neighbourLoad is the load the neighbours put on during a measurement.
type neighbourLoad struct {
	// Rate is each publishing neighbour's events per second.
	Rate float64
	// Keys is the number of subject keys each publishing neighbour spreads
	// its events over.
	Keys int
	// Guessers is the number of clients guessing tokens, each GuessRate
	// times a second (paced, so the bench process's own CPU stays a small
	// part of the machine's two cores).
	Guessers  int
	GuessRate float64
}

var defaultNeighbourLoad = neighbourLoad{Rate: 5, Keys: 50, Guessers: 4, GuessRate: 50}

// eventPublisher publishes one event; a *publish.Publisher is one.
type eventPublisher interface {
	Publish(ctx context.Context, r publish.Request) (publish.Result, error)
}

// drive runs the neighbours' load until ctx ends, then returns what they did
// (counting endpoint receipts from the start of drive). Calm, they publish
// at the same rates but behave (SystemCalm): endpoints answer at once, the
// heavy events are light (the filter lets them through at once, so every
// neighbour event is delivered) and nobody guesses tokens.
//
// drive closes seeded once every publishing neighbour has sent an event to
// each of its keys. A key's first event creates its workflow (an eager
// start and the run's first workflow tasks, several history writes), later
// ones only signal it: until seeded, the neighbours are starting up rather
// than at work, and a healthy run published then measures its own keys'
// creation overlapping theirs on the Temporal server (issue 26).
func (n *neighbours) drive(ctx context.Context, p eventPublisher, apiURL, runID string, load neighbourLoad, calm bool, seeded chan<- struct{}) *NeighbourStats {
	n.mu.Lock()
	n.hold = make(chan struct{})
	n.calm = calm
	before := make(map[string]int, len(n.received))
	for k, v := range n.received {
		before[k] = v
	}
	n.mu.Unlock()

	var mu sync.Mutex
	published := map[string]int{}
	guesses := map[string]int{}
	var wg sync.WaitGroup
	items := make([]int, hostileItems)
	for i := range items {
		items[i] = i
	}
	heavy, _ := json.Marshal(map[string]any{"n": 0, "items": items, "s": strings.Repeat("a", hostileString)})
	if calm {
		heavy = json.RawMessage(`{"n":0,"items":[1],"s":"b"}`) // the filter lets it through at once
	}
	publishers := []string{"slow", "fail", "heavy"}
	var seeding sync.WaitGroup
	seeding.Add(len(publishers))
	go func() {
		seeding.Wait()
		close(seeded)
	}()
	for _, name := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for i := 0; ; i++ {
				if i == load.Keys {
					seeding.Done() // every key of this neighbour has had its first event
				}
				if pace(ctx, start, i, load.Rate) != nil {
					if i < load.Keys {
						seeding.Done() // cut short: nobody waits any longer
					}
					return
				}
				data := json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
				if name == "heavy" {
					data = heavy
				}
				_, err := p.Publish(ctx, publish.Request{App: noisyApp, Type: manifest.EventType(noisyApp, name),
					Version: eventVersion, Subject: fmt.Sprintf("%s-%s-%03d", runID, name, i%load.Keys), Data: data})
				if err == nil {
					mu.Lock()
					published[name]++
					mu.Unlock()
				}
			}
		}()
	}
	if apiURL != "" && !calm {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: load.Guessers}}
		body := []byte(`{"type":"` + eventType(1) + `","version":1,"subject":"x","data":{"n":1,"name":"x"}}`)
		for range load.Guessers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				for i := 0; pace(ctx, start, i, load.GuessRate) == nil; i++ {
					status := guessToken(ctx, hc, apiURL, body)
					if ctx.Err() != nil {
						return // cut short by the end of the measurement
					}
					mu.Lock()
					guesses[status]++
					mu.Unlock()
				}
			}()
		}
	}
	<-ctx.Done()
	wg.Wait()
	n.mu.Lock()
	close(n.hold)
	n.calm = false
	n.mu.Unlock()

	st := &NeighbourStats{Published: published, TokenGuesses: guesses, Received: map[string]int{}}
	n.mu.Lock()
	for k, v := range n.received {
		st.Received[k] = v - before[k]
	}
	n.mu.Unlock()
	return st
}

// guessToken sends one publish with a freshly made, well-formed token that
// no app holds, and returns the answer's status.
func guessToken(ctx context.Context, hc *http.Client, apiURL string, body []byte) string {
	_, token, _, err := api.NewToken()
	if err != nil {
		return "error"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(apiURL, "/")+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return "error"
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "error"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return fmt.Sprint(resp.StatusCode)
}
