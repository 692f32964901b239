package e2e_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/signing"
)

// TestKeyRotationWithoutFailedDelivery: a new key is added (the newest
// signs, both are published), then the old one is retired; the subscriber,
// which caches the JWKS, verifies every delivery throughout.
func TestKeyRotationWithoutFailedDelivery(t *testing.T) {
	t.Parallel()
	// The subscriber waits out its JWKS refresh interval (10 s) for an
	// unknown kid instead of refusing the delivery: allow for it. (A first
	// attempt, a local activity, is cut after about 6 s and sent again by
	// a regular activity, which waits that long.)
	// Info: on a failure the log shows the relay's partitions after each
	// restart beside what ExplainOnFailure reads.
	s := system.Start(t, system.Config(func(c *config.Worker) { c.DeliveryTimeout = 20 * time.Second }),
		system.LogLevel(zapcore.InfoLevel))
	s.Apply()
	oldKids, err := signing.LoadKeys(s.Cfg.SigningKey)
	if err != nil {
		t.Fatal(err)
	}
	oldKid := oldKids.Kids()[0]
	deliver := func(subject string, want int) {
		t.Helper()
		defer s.ExplainOnFailure(subject)
		for n := 1; n <= 3; n++ {
			s.Publish(subject, n)
		}
		testkit.Eventually(t, 60*time.Second, "deliveries of "+subject, func() bool {
			return s.Sub.Count("billing", subject) == want && s.Sub.Count("audit-log", subject) == want
		})
	}
	deliver("before", 3)

	// Add a key: it must be the newest file to sign.
	time.Sleep(10 * time.Millisecond)
	newKid, err := signing.GenerateKey(s.Cfg.SigningKey)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	for _, suffix := range []string{signing.PrivateKeySuffix, signing.PublicKeySuffix} {
		if err := os.Chtimes(filepath.Join(s.Cfg.SigningKey, newKid+suffix), future, future); err != nil {
			t.Fatal(err)
		}
	}
	s.Restart()
	if kids := s.Svc.Keys.Kids(); len(kids) != 2 || kids[0] != newKid {
		t.Fatalf("after adding a key the worker publishes %v, want %s first", kids, newKid)
	}
	deliver("during", 3)

	// Retire the old key.
	for _, suffix := range []string{signing.PrivateKeySuffix, signing.PublicKeySuffix} {
		if err := os.Remove(filepath.Join(s.Cfg.SigningKey, oldKid+suffix)); err != nil {
			t.Fatal(err)
		}
	}
	s.Restart()
	if kids := s.Svc.Keys.Kids(); len(kids) != 1 || kids[0] != newKid {
		t.Fatalf("after retiring the old key the worker publishes %v", kids)
	}
	deliver("after", 3)

	if f := s.Sub.VerificationFailures(); len(f) != 0 {
		t.Fatalf("deliveries failed verification during rotation: %+v", f)
	}
}
