// Package testkit is what Herald's tests share on top of internal/testenv
// (which provides the services): Eventually, the one way a test waits, and
// sockets without a race: a listener a test keeps across server restarts
// and a port that refuses connections until the test listens on it. It
// imports no Herald package, so any package's tests may use it; the
// running system is internal/testkit/system.
package testkit

import (
	"testing"
	"time"
)

// Interval is how often Eventually asks again.
const Interval = 50 * time.Millisecond

// Eventually asks cond every Interval until it holds, and fails the test
// when timeout has passed without that, saying what was awaited. It must
// be called from the test's goroutine (it calls t.Fatal).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// EventuallyValue asks get every Interval until its second result is true
// and returns the value it returned with it; when timeout has passed
// without that it fails the test with what was awaited and the last value
// observed. It must be called from the test's goroutine.
func EventuallyValue[T any](t testing.TB, timeout time.Duration, what string, get func() (T, bool)) T {
	t.Helper()
	var last T
	if !poll(timeout, func() bool {
		var ok bool
		last, ok = get()
		return ok
	}) {
		t.Fatalf("timed out after %v waiting for %s (last: %+v)", timeout, what, last)
	}
	return last
}

// poll reports whether cond held before timeout passed; cond is asked at
// least once, and once more at the deadline.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(min(Interval, max(time.Until(deadline), time.Millisecond)))
	}
}
