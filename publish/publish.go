// Package publish validates events against their declarations and records
// them in the event log (docs/design.md#publishing): the library behind `starter publish`,
// including bulk publishing from NDJSON files.
package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"herald/manifest"
	"herald/store"
)

// Defaults of Options.
const (
	// DefaultMaxEventBytes caps an encoded event (its CloudEvent JSON): 256 KiB.
	DefaultMaxEventBytes = 256 << 10
	// DefaultCacheTTL is how long app and declaration look-ups are reused.
	DefaultCacheTTL = 5 * time.Second
)

// Options configure a Publisher. The zero value gives the defaults.
type Options struct {
	// MaxEventBytes caps the encoded event; zero or less means
	// DefaultMaxEventBytes.
	MaxEventBytes int
	// Now gives the time of events published without one; nil means time.Now.
	Now func() time.Time
	// CacheTTL is how long a found app or declaration (with its compiled
	// schema) is reused before it is looked up again, so bulk publishing does
	// not query the database per event. Zero means DefaultCacheTTL; negative
	// disables the cache. Misses are never cached. PublishTx also keeps, per
	// database connection, whether its login role is a publisher role and
	// of which app, found or not.
	CacheTTL time.Duration
	// Logger reports rejections that could not be recorded; nil logs nothing.
	Logger *zap.Logger
	// Via is recorded with each event as how it reached Herald (ViaCLI,
	// ViaHTTP, ...); empty means ViaLibrary. A request's own Via wins.
	Via string
	// Rejected, when set, is told of every rejection (metrics): the source
	// app, or "" when it is not a declared app, and the code.
	Rejected func(app, code string)
}

// Request is one event to publish.
type Request struct {
	// ID is the event's UUID; empty means a new one is generated (UUID v7).
	ID      string
	App     string // the source app
	Type    string // "<app>.<name>"
	Version int
	Subject string // the subject key
	Data    json.RawMessage
	// Time is the event's time; zero means now.
	Time time.Time
	// Via overrides Options.Via for this request; Token is the name of the
	// API token it came with (HTTP). Both are recorded with the event.
	Via, Token string
}

// Result describes an accepted event.
type Result struct {
	ID  string
	Seq int64
	// Duplicate: the same id and content were already accepted; Seq is the
	// stored event's and nothing new was recorded.
	Duplicate bool
	// Deprecated: the manifest marks this version deprecated. The event is
	// accepted all the same; publishers should move to a newer version.
	Deprecated bool
}

// Outcome is the fate of one request of a batch: a Result when Rejection is
// nil.
type Outcome struct {
	Result    Result
	Rejection *Rejection
}

// Publisher validates and records events. It is safe for concurrent use.
type Publisher struct {
	store         *store.Store
	maxEventBytes int
	now           func() time.Time
	log           *zap.Logger
	cache         *lookupCache
	via           string
	rejected      func(app, code string)
}

// New returns a Publisher writing to st.
func New(st *store.Store, opts Options) *Publisher {
	p := &Publisher{store: st, maxEventBytes: opts.MaxEventBytes, now: opts.Now, log: opts.Logger, via: opts.Via,
		rejected: opts.Rejected}
	if p.maxEventBytes <= 0 {
		p.maxEventBytes = DefaultMaxEventBytes
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	ttl := opts.CacheTTL
	if ttl == 0 {
		ttl = DefaultCacheTTL
	}
	p.cache = newLookupCache(ttl, p.now)
	return p
}

// MaxEventBytes is the publisher's limit on an encoded event.
func (p *Publisher) MaxEventBytes() int { return p.maxEventBytes }

// Publish validates and records one event. A refused request returns a
// *Rejection (see IsRejection), already recorded in the event log; any other
// error is a failure of Herald itself.
func (p *Publisher) Publish(ctx context.Context, r Request) (Result, error) {
	outs, err := p.PublishBatch(ctx, []Request{r})
	if err != nil {
		return Result{}, err
	}
	if rej := outs[0].Rejection; rej != nil {
		return Result{}, rej
	}
	return outs[0].Result, nil
}

// PublishBatch validates every request and records the accepted ones in one
// transaction, in the order given. It returns one Outcome per request, in the
// same order; rejections are recorded one by one, best effort. An error means
// nothing of the batch was accepted.
func (p *Publisher) PublishBatch(ctx context.Context, rs []Request) (_ []Outcome, err error) {
	outs := make([]Outcome, len(rs))
	evs := make([]store.NewEvent, 0, len(rs))
	index := make([]int, 0, len(rs))
	deprecated := make([]bool, len(rs))
	spans := make([]trace.Span, len(rs))
	defer func() {
		if err != nil {
			endFailed(spans, err)
		}
	}()
	// One validation budget for the whole batch (a request, or a batch of
	// a stream): events that would take the rest of it are refused.
	budget := manifest.NewBudget(manifest.MaxRequestValidationSteps)
	for i, r := range rs {
		ev, dep, rej, span, err := p.check(ctx, p.store.Pool, nil, r, budget)
		spans[i] = span
		if err != nil {
			return nil, err
		}
		if rej != nil {
			outs[i].Rejection = rej
			endRejected(span, rej)
			p.record(ctx, r, rej)
			continue
		}
		evs = append(evs, ev)
		index = append(index, i)
		deprecated[i] = dep
	}
	inserted, err := p.store.InsertEvents(ctx, evs)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	for j, ins := range inserted {
		i := index[j]
		if ins.Conflict {
			rej := &Rejection{Code: CodeIDConflict,
				Message: fmt.Sprintf("event id %s was already used for different content", ins.ID)}
			outs[i].Rejection = rej
			endRejected(spans[i], rej)
			p.record(ctx, rs[i], rej)
			continue
		}
		outs[i].Result = Result{ID: ins.ID, Seq: ins.Seq, Duplicate: ins.Duplicate, Deprecated: deprecated[i]}
		endAccepted(spans[i], ins.ID, outs[i].Result)
	}
	return outs, nil
}

// check starts the request's publish span (every way of publishing passes
// here, so every event gets one), looks up what validation needs, in the
// order of the checks, on q (the pool, or the caller's transaction for
// PublishTx), and validates r within budget, the request's validation
// budget. deprecated reports a valid request for a
// deprecated version. The caller ends the span once the event's fate is
// known.
//
// pub, when not nil, is the publisher role q's session logs in as: the
// request must name its app (the app is known only then), and the
// declaration is looked up through the role's function.
func (p *Publisher) check(ctx context.Context, q store.Querier, pub *store.PublisherApp, r Request, budget *manifest.Budget) (ev store.NewEvent, deprecated bool, rej *Rejection, span trace.Span, err error) {
	span, tc := startSpan(ctx, r)
	in := checkInput{now: p.now(), maxEventBytes: p.maxEventBytes, trace: tc, budget: budget}
	var known bool
	find := store.LookupDeclarationIn
	if pub != nil {
		known, find = r.App == pub.App && pub.Live, store.LookupPublisherDeclarationIn
	} else if known, err = p.cache.appExists(ctx, q, r.App); err != nil {
		return store.NewEvent{}, false, nil, span, fmt.Errorf("publish: %w", err)
	}
	in.appKnown = known
	if known && ownsType(r.App, r.Type) && r.Version >= MinVersion && r.Version <= MaxVersion {
		in.decl, err = p.cache.declaration(ctx, q, find, r.Type, r.Version)
		if err != nil {
			return store.NewEvent{}, false, nil, span, fmt.Errorf("publish: %w", err)
		}
	}
	if r.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return store.NewEvent{}, false, nil, span, fmt.Errorf("publish: generate event id: %w", err)
		}
		in.newID = id.String()
	}
	ev, rej = validateRequest(r, in)
	ev.Via, ev.Token = p.origin(r)
	return ev, rej == nil && in.decl.Deprecated, rej, span, nil
}

// record stores a rejection; failing to do so does not change the answer
// the publisher gets, so it is only logged.
func (p *Publisher) record(ctx context.Context, r Request, rej *Rejection) {
	if p.rejected != nil {
		// Every check after unknown_app passed the app's look-up, so only
		// a declared app's name becomes a label.
		app := r.App
		if rej.Code == CodeUnknownApp {
			app = ""
		}
		p.rejected(app, rej.Code)
	}
	via, token := p.origin(r)
	err := p.store.RecordRejection(ctx, store.Rejection{
		ID:        r.ID,
		SourceApp: r.App,
		Type:      r.Type,
		Version:   r.Version,
		Subject:   r.Subject,
		Code:      rej.Code,
		Reason:    rej.Message,
		Via:       via,
		Token:     token,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		p.log.Warn("record rejection", zap.String("code", rej.Code), zap.Error(err))
	}
}
