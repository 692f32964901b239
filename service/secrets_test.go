package service

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"herald/signing"
	"herald/store"
)

// scriptedSecrets answers load with the app's secrets as set, counting the
// reads.
type scriptedSecrets struct {
	set   store.AppSecrets
	err   error
	reads int
}

func (s *scriptedSecrets) load(_ context.Context, app string) (store.AppSecrets, error) {
	s.reads++
	if s.err != nil {
		return store.AppSecrets{}, s.err
	}
	out := s.set
	out.App = app
	return out, nil
}

func newSecret(t *testing.T, id int64, until *time.Time) store.AppSecret {
	t.Helper()
	s, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return store.AppSecret{ID: id, Secret: s, ValidUntil: until}
}

// signedWith is the v1 signature the secrets give.
func signedWith(t *testing.T, secrets ...store.AppSecret) string {
	t.Helper()
	var keys [][]byte
	for _, s := range secrets {
		k, err := signing.ParseSecret(s.Secret)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return signing.SignSymmetric(keys, "contacts:e1", "1700000000", []byte(`{}`))
}

// TestSecretSignerReusesOnlyCurrentRecentSecrets: a worker signs with the
// secrets it read less than secretReuse ago while their current one is the
// one the execution's batch named; a rotation the batch saw, an older read,
// a batch that saw no secret or a failed read make it read again. Which
// secrets are valid is the read's to say: a previous secret whose overlap
// ended signs from a recent read, and no longer once read again.
func TestSecretSignerReusesOnlyCurrentRecentSecrets(t *testing.T) {
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	first := newSecret(t, 11, nil)
	src := &scriptedSecrets{set: store.AppSecrets{Current: first}}
	a := &secretSigner{load: src.load, now: func() time.Time { return clock }, apps: map[string]appKeys{}}
	sign := func(secretID int64) string {
		t.Helper()
		sig, err := a.SignSymmetric(context.Background(), "hooks", secretID, "contacts:e1", "1700000000", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	step := func(what string, secretID int64, reads int, want string) {
		t.Helper()
		if got := sign(secretID); got != want || src.reads != reads {
			t.Fatalf("%s: signature %q after %d reads, want %q after %d", what, got, src.reads, want, reads)
		}
	}

	step("first POST", 11, 1, signedWith(t, first))
	clock = clock.Add(secretReuse / 2)
	step("a POST within the reuse", 11, 1, signedWith(t, first))
	clock = clock.Add(secretReuse / 2)
	step("a POST a full reuse after the read", 11, 2, signedWith(t, first))

	// A rotation with an overlap: a batch read after it names the new
	// secret, so the next POST reads at once and signs with both.
	until := clock.Add(3 * secretReuse)
	second := newSecret(t, 12, nil)
	src.set = store.AppSecrets{Current: second, Previous: []store.AppSecret{{ID: 11, Secret: first.Secret, ValidUntil: &until}}}
	step("a batch read before the rotation", 11, 2, signedWith(t, first))
	step("a batch read after the rotation", 12, 3, signedWith(t, second, first))

	// The overlap ends between two POSTs that reuse one read: the worker's
	// clock does not end it, the next read does.
	clock = until.Add(-secretReuse / 4)
	step("within the overlap", 12, 4, signedWith(t, second, first))
	src.set = store.AppSecrets{Current: second}
	clock = until
	step("the overlap over, from the same read", 12, 4, signedWith(t, second, first))
	clock = until.Add(secretReuse * 3 / 4)
	step("the overlap over, read again", 12, 5, signedWith(t, second))

	// A batch that saw no current secret (the app had none) always reads.
	step("a batch without a secret", 0, 6, signedWith(t, second))
	step("and again", 0, 7, signedWith(t, second))

	// A failed read is not kept: the next POST reads again.
	clock = clock.Add(secretReuse)
	src.err = errors.New("open secret: wrong HERALD_SECRET_KEY or damaged secret")
	if _, err := a.SignSymmetric(context.Background(), "hooks", 12, "contacts:e1", "1700000000", []byte(`{}`)); err == nil || src.reads != 8 {
		t.Fatalf("failed read: error %v after %d reads", err, src.reads)
	}
	src.err = nil
	step("after a failed read", 12, 9, signedWith(t, second))
}

// TestSecretSignerForgetsOldReads: a read drops the secrets read
// secretReuse or more before it, and keeps its own.
func TestSecretSignerForgetsOldReads(t *testing.T) {
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	src := &scriptedSecrets{set: store.AppSecrets{Current: newSecret(t, 3, nil)}}
	a := &secretSigner{load: src.load, now: func() time.Time { return clock }, apps: map[string]appKeys{}}
	for _, app := range []string{"billing", "audit"} {
		if _, err := a.SignSymmetric(context.Background(), app, 3, "contacts:e1", "1700000000", nil); err != nil {
			t.Fatal(err)
		}
	}
	clock = clock.Add(secretReuse)
	if _, err := a.SignSymmetric(context.Background(), "hooks", 3, "contacts:e1", "1700000000", nil); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.apps["hooks"]; len(a.apps) != 1 || !ok {
		t.Fatalf("apps kept %v, want only the one read now", slices.Sorted(maps.Keys(a.apps)))
	}
}

// TestSecretSignerConcurrent: POSTs of two apps at once while one
// goroutine rotates their secrets each sign with a secret of their own app
// at least as new as the one their batch named (run with -race).
func TestSecretSignerConcurrent(t *testing.T) {
	apps := []string{"billing", "audit"}
	const posts, rotateEvery = 200, 20
	// Every secret the rotations may issue, and the signature each gives,
	// made before the goroutines start (t.Fatal is the test goroutine's).
	made := map[string][]store.AppSecret{}
	sigs := map[string][]string{}
	for _, app := range apps {
		for id := int64(1); id <= posts/rotateEvery+1; id++ {
			s := newSecret(t, id, nil)
			made[app] = append(made[app], s)
			sigs[app] = append(sigs[app], signedWith(t, s))
		}
	}
	var mu sync.Mutex
	issued := map[string]int{"billing": 1, "audit": 1} // how many of made[app] are issued
	latest := func(app string) store.AppSecret {
		mu.Lock()
		defer mu.Unlock()
		return made[app][issued[app]-1]
	}
	a := &secretSigner{now: time.Now, apps: map[string]appKeys{},
		load: func(_ context.Context, app string) (store.AppSecrets, error) {
			return store.AppSecrets{App: app, Current: latest(app)}, nil
		}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range posts {
				app := apps[(g+i)%2]
				if g == 0 && i%rotateEvery == rotateEvery-1 { // a rotation
					mu.Lock()
					issued[app]++
					mu.Unlock()
				}
				named := latest(app).ID
				got, err := a.SignSymmetric(context.Background(), app, named, "contacts:e1", "1700000000", []byte(`{}`))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				since := sigs[app][named-1 : issued[app]] // its secrets from the one named on
				mu.Unlock()
				if !slices.Contains(since, got) {
					t.Errorf("%s's POST naming secret %d signed %q: not one of its secrets since", app, named, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
