package service

import (
	"context"
	"sync"
	"time"

	"herald/signing"
	"herald/store"
)

// secretReuse is how long a worker signs with the secrets it read for an
// app before it reads them again, and then only while the app's current
// secret is still the one the attempt's Deliver execution read with its
// batch (store.Batch.SecretID). So a rotation signs every execution that
// reads its batch after it, and every POST from a second after it; an
// execution's later POSTs, each its own attempt, would otherwise read the
// secrets once each (in a batch of 50 events, most of the worker's queries).
const secretReuse = time.Second

// maxCachedApps bounds the apps whose secrets a worker keeps: past it,
// entries older than secretReuse are dropped.
const maxCachedApps = 4096

// secretSigner signs deliveries with the subscribing app's own secrets,
// read (and decrypted) at POST time, or at most secretReuse before it, so
// that they never enter workflow history; an app without a secret yet gets
// its first one here.
type secretSigner struct {
	// load reads an app's valid secrets (store.Store.EnsureAppSecrets).
	load func(ctx context.Context, app string) (store.AppSecrets, error)
	now  func() time.Time

	mu   sync.Mutex
	apps map[string]appKeys
}

// appKeys are an app's secrets as read at readAt: the current one's id
// and every valid one parsed, the current one first.
type appKeys struct {
	current int64
	keys    []appKey
	readAt  time.Time
}

type appKey struct {
	key []byte
	// until is when a previous secret stops signing (nil: the current one).
	until *time.Time
}

func newSecretSigner(st *store.Store, box *signing.SecretBox) *secretSigner {
	return &secretSigner{
		load: func(ctx context.Context, app string) (store.AppSecrets, error) {
			return st.EnsureAppSecrets(ctx, store.SecretRequest{App: app, Box: box, New: signing.NewSecret,
				Actor: store.ActorSystem, AllowRemoved: true})
		},
		now:  time.Now,
		apps: map[string]appKeys{},
	}
}

func (a *secretSigner) SignSymmetric(ctx context.Context, app string, secretID int64, id, ts string, body []byte) (string, error) {
	now := a.now()
	ks, err := a.keysOf(ctx, app, secretID, now)
	if err != nil {
		return "", err
	}
	keys := make([][]byte, 0, len(ks.keys))
	for _, k := range ks.keys {
		if k.until == nil || k.until.After(now) {
			keys = append(keys, k.key)
		}
	}
	return signing.SignSymmetric(keys, id, ts, body), nil
}

// keysOf returns app's secrets: those read less than secretReuse ago when
// their current one is secretID, else read now.
func (a *secretSigner) keysOf(ctx context.Context, app string, secretID int64, now time.Time) (appKeys, error) {
	a.mu.Lock()
	ks, ok := a.apps[app]
	a.mu.Unlock()
	if ok && secretID != 0 && ks.current == secretID && now.Sub(ks.readAt) < secretReuse {
		return ks, nil
	}
	set, err := a.load(ctx, app)
	if err != nil {
		return appKeys{}, err
	}
	ks = appKeys{current: set.Current.ID, readAt: now}
	for _, s := range append([]store.AppSecret{set.Current}, set.Previous...) {
		k, err := signing.ParseSecret(s.Secret)
		if err != nil {
			return appKeys{}, err
		}
		ks.keys = append(ks.keys, appKey{key: k, until: s.ValidUntil})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.apps) >= maxCachedApps {
		for name, old := range a.apps {
			if now.Sub(old.readAt) >= secretReuse {
				delete(a.apps, name)
			}
		}
	}
	a.apps[app] = ks
	return ks, nil
}
