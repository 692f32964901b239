package activities

import (
	"sync"
	"time"
)

// A subscriber app whose endpoint does not answer holds an activity slot of
// the worker for a whole POST timeout (30 s by default) per attempt, and a
// worker has a fixed number of slots (the SDK's default is 1,000) for every
// app's deliveries. An app that subscribes to a busy event type and stops
// answering would take them all: about 33 new keys a second suffice. So a
// worker that has seen SlowAppTimeouts of an app's POSTs time out within
// SlowAppWindow (plus the POST timeout) lets at most SlowAppPosts of its
// POSTs be in flight at once;
// an execution past that makes no POST and hands the key back to its
// workflow (OutcomeLimited with RetryAfter), which waits SlowAppRetry in a
// timer, holding no slot. Apps that answer are never capped.
const (
	// SlowAppTimeouts is how many of an app's POSTs must time out within
	// SlowAppWindow for the worker to cap it.
	SlowAppTimeouts = 5
	// SlowAppWindow is how recent those timeouts must be, beside the POST
	// timeout: an app stays capped until the fifth-last of its timeouts is
	// older than this plus the longest POST timeout it timed out at. (The
	// capped POSTs start together and time out together, a timeout later:
	// a window shorter than that would lift the cap between two such
	// rounds, and every key held back would POST at once.)
	SlowAppWindow = time.Minute
	// SlowAppPosts is how many POSTs to a capped app one worker lets be in
	// flight at once.
	SlowAppPosts = 8
	// SlowAppRetry is how long a key held back by the cap waits before its
	// next execution.
	SlowAppRetry = 10 * time.Second
)

// slowApps counts, per subscriber app, the POSTs in flight on this worker
// and the recent ones that timed out.
type slowApps struct {
	mu   sync.Mutex
	apps map[string]*slowApp
}

type slowApp struct {
	inFlight int
	// timeouts are the times of the app's last SlowAppTimeouts timed-out
	// POSTs, oldest first; timeout is the longest POST timeout of those.
	timeouts []time.Time
	timeout  time.Duration
}

// window is how recent the app's timeouts must be to hold it back.
func (s *slowApp) window() time.Duration { return SlowAppWindow + s.timeout }

// slow reports whether the app has had SlowAppTimeouts timeouts within its
// window of now.
func (s *slowApp) slow(now time.Time) bool {
	return len(s.timeouts) >= SlowAppTimeouts && now.Sub(s.timeouts[0]) < s.window()
}

// take counts a POST to app about to start, and reports false (counting
// nothing) when the app is slow and already has limit POSTs in flight.
func (s *slowApps) take(app string, limit int, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apps == nil {
		s.apps = map[string]*slowApp{}
	}
	a := s.apps[app]
	if a == nil {
		a = &slowApp{}
		s.apps[app] = a
	}
	if a.inFlight >= limit && a.slow(now) {
		return false
	}
	a.inFlight++
	return true
}

// done counts the end of a POST take counted; timedOut records that it
// timed out, after timeout.
func (s *slowApps) done(app string, timedOut bool, timeout time.Duration, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[app]
	if a == nil {
		return
	}
	a.inFlight--
	if timedOut {
		a.timeouts = append(a.timeouts, now)
		if len(a.timeouts) > SlowAppTimeouts {
			a.timeouts = a.timeouts[len(a.timeouts)-SlowAppTimeouts:]
		}
		a.timeout = max(a.timeout, timeout)
	}
	if a.inFlight == 0 && (len(a.timeouts) == 0 || now.Sub(a.timeouts[len(a.timeouts)-1]) >= a.window()) {
		delete(s.apps, app) // idle and answering: nothing to remember
	}
}
