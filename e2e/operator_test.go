package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/manifest"
	"herald/subscriber"
	"herald/workflows"
)

// TestSuccessWakesUnreachableKeys: when an app's endpoint answers again,
// the first delivery that goes through ends the unreachable back-off of
// the app's other keys, within seconds rather than at the end of it.
func TestSuccessWakesUnreachableKeys(t *testing.T) {
	// Serial: it bounds how soon the waiting keys are woken (10 s).
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	ctx := context.Background()
	// billing's endpoint: a loopback port bound for the test where nothing
	// listens yet (connections are refused).
	port := testkit.ReservePort(t)
	addr := port.Addr()
	billing := &manifest.Manifest{App: "billing", Endpoint: "http://" + addr,
		Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}}
	if _, err := s.Svc.Store.ApplyManifest(ctx, billing, "e2e"); err != nil {
		t.Fatal(err)
	}
	// Enough keys that a wake-up is a fan-out (16 signals in flight at a time).
	var waiting []string
	for i := 1; i <= 20; i++ {
		waiting = append(waiting, fmt.Sprintf("person-u%d", i))
	}
	for _, subj := range waiting {
		s.Publish(subj, 1)
	}
	for _, subj := range waiting {
		id := workflows.DeliveryID("billing:contacts.person.updated@1", subj)
		testkit.Eventually(t, 30*time.Second, subj+" to wait as unreachable", func() bool { return status(c, id) == workflows.StatusUnreachable })
	}
	unreachableAt := time.Now()

	// The endpoint comes up; a new key's first delivery goes through.
	h, err := subscriber.New(subscriber.Config{
		Audiences: []string{"app:billing"}, JWKSURL: s.WorkerURL() + "/.well-known/jwks.json", AllowLoopbackHTTP: true,
	}, s.Sub.Handle)
	if err != nil {
		t.Fatal(err)
	}
	l2 := port.Listen(t)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l2); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	s.Publish("person-first", 1)
	testkit.Eventually(t, 20*time.Second, "the new key's delivery", func() bool { return s.Sub.Count("billing", "person-first") == 1 })
	succeeded := time.Now()
	// owed is the first waiting key not delivered once ("" when none is).
	owed := func() string {
		for _, subj := range waiting {
			if s.Sub.Count("billing", subj) != 1 {
				return subj
			}
		}
		return ""
	}
	defer func() {
		// A timeout explains the first key still owed (the wake-up's
		// signal, its run's tasks and its outcome rows, with times).
		if subj := owed(); subj != "" {
			s.ExplainOnFailure(subj)
		}
	}()
	// 20 s for 20 keys' signals, tasks, POSTs and outcome rows on a loaded
	// machine, well under the 30 s back-off they would otherwise wait out
	// (checked below).
	testkit.Eventually(t, 20*time.Second, "the waiting keys to be woken within 20 s", func() bool { return owed() == "" })
	t.Logf("%d keys woken and delivered %v after the first success, %v after going unreachable (back-off 30s)",
		len(waiting), time.Since(succeeded).Round(10*time.Millisecond), time.Since(unreachableAt).Round(10*time.Millisecond))
	if time.Since(unreachableAt) >= 30*time.Second {
		t.Fatalf("the keys were delivered only when their back-off ended")
	}
}

// TestTemporalShowsTheKeysState: temporal workflow describe shows a key's
// summary, and temporal workflow metadata its current details: the status,
// the head's attempt of all, the last code and error, the queue.
func TestTemporalShowsTheKeysState(t *testing.T) {
	t.Parallel()
	s := system.Start(t)
	s.Apply()
	c := s.Dial()
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-ui" {
			return errors.New("not today")
		}
		return nil
	})
	id := workflows.DeliveryID("billing:contacts.person.updated@1", "person-ui")
	s.Publish("person-ui", 1)
	s.Publish("person-ui", 2)
	testkit.Eventually(t, 30*time.Second, "the key to fail", func() bool { return status(c, id) == workflows.StatusFailed })
	temporal := func(args ...string) string {
		args = append(args, "--address", s.Cfg.TemporalAddress, "--namespace", s.Cfg.TemporalNamespace, "--workflow-id", id)
		out, err := exec.Command(testenv.TemporalCLI(t), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("temporal %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	describe := temporal("workflow", "describe")
	if !strings.Contains(describe, workflows.Summary(workflows.Params{
		SubscriptionID: "billing:contacts.person.updated@1", SubjectKey: "person-ui"})) {
		t.Fatalf("describe does not show the key's summary:\n%s", describe)
	}
	// The test worker's schedule has 3 attempts; the details name the last.
	meta := temporal("workflow", "metadata")
	for _, want := range []string{"**failed**", "2 queued", "attempt 3 of 3", "attempts_exhausted", "last attempt `handler_failed`", "not today", "next attempt"} {
		if !strings.Contains(meta, want) {
			t.Fatalf("current details lack %q:\n%s", want, meta)
		}
	}
}
