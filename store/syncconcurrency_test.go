package store_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/manifest"
	"herald/store"
)

var meshApps = []string{"alpha", "beta", "gamma"}

// meshManifest is app i's manifest in round r: three apps that publish and
// subscribe to each other, with declarations, places and subscriptions
// coming and going from round to round.
func meshManifest(i, r int) *manifest.Manifest {
	app := meshApps[i]
	events := []manifest.Event{decl("thing.created", 1)}
	if (r+i)%2 == 0 {
		events = append(events, decl("thing.updated", 1))
	}
	moved := decl("thing.moved", 1)
	if r%3 == i {
		moved = withPlace(moved)
	}
	events = append(events, moved)
	var subs []manifest.Subscription
	for o, other := range meshApps {
		if o == i {
			continue
		}
		if (r+o)%4 != 0 {
			subs = append(subs, subTo(other+".thing.created", 1))
		}
		subs = append(subs, subTo(other+".thing.updated", 1))
		if r%2 == 0 {
			subs = append(subs, subTo(other+".thing.moved", 1))
		}
	}
	return mkManifest(app, events, subs...)
}

// TestConcurrentAppliesMatchSequential applies each round's manifests from
// two goroutines at once, in opposite orders, and checks after every round
// that nothing failed and the state equals that of applying the same
// manifests one by one in another schema.
func TestConcurrentAppliesMatchSequential(t *testing.T) {
	t.Parallel()
	concurrent := openSyncStore(t)
	sequential := openSyncStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const rounds = 20
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(meshApps))
		for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, i := range order {
					if _, err := concurrent.ApplyManifest(ctx, meshManifest(i, r), "racer"); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", r, err)
		}
		for i := range meshApps {
			mustApply(t, sequential, meshManifest(i, r))
		}

		got, want := states(t, concurrent), states(t, sequential)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: subscription states differ\nconcurrent: %v\nsequential: %v", r, got, want)
		}
		for _, app := range meshApps {
			if got, want := declarationStates(t, concurrent, app), declarationStates(t, sequential, app); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: declarations of %s differ\nconcurrent: %v\nsequential: %v", r, app, got, want)
			}
		}
	}
	// The scenario must really move subscriptions around, or it proves little.
	if n := len(auditRows(t, sequential, store.ActionSubscriptionStateChanged, "")); n < 3*rounds {
		t.Errorf("only %d state changes in %d rounds", n, rounds)
	}
	assertAuditChains(t, concurrent)
	assertAuditChains(t, sequential)
}

// TestConcurrentAppliesOfOneApp checks that applies of the same app with
// different content serialize: the stored hash matches the manifest whose
// declarations are stored.
func TestConcurrentAppliesOfOneApp(t *testing.T) {
	t.Parallel()
	s := openSyncStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for r := 0; r < 20; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.ApplyManifest(ctx, meshManifest(0, r), "racer"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, err := s.GetApp(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	var last manifest.Manifest
	if err := json.Unmarshal(d.Manifest, &last); err != nil {
		t.Fatal(err)
	}
	if last.Hash() != d.ContentHash {
		t.Errorf("stored hash %s does not match the stored manifest", d.ContentHash)
	}
	live := map[string]bool{}
	for _, dec := range d.Declarations {
		if dec.RetiredAt == nil {
			live[dec.Name] = true
		}
	}
	want := map[string]bool{}
	for _, e := range last.Events {
		want[e.Name] = true
	}
	if !reflect.DeepEqual(live, want) {
		t.Errorf("live declarations %v, manifest declares %v", live, want)
	}
	assertAuditChains(t, s)
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	url := testenv.NewSchema(t)
	ctx := context.Background()
	const n = 2
	applied := make([][]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := store.Open(ctx, url, store.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			applied[i], errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrate %d: %v", i, err)
		}
	}
	// Exactly one of them applied the migrations.
	if (len(applied[0]) == 0) == (len(applied[1]) == 0) {
		t.Errorf("applied = %v and %v; want exactly one non-empty", applied[0], applied[1])
	}
	if applied := append(applied[0], applied[1]...); len(applied) == 0 || applied[0] != 1 {
		t.Errorf("applied versions = %v", applied)
	}
}
