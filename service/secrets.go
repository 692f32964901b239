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
// secrets once each (in a batch of 50 events, most of the worker's
// queries). Which secrets are valid is the database's to say, at the read:
// a previous secret whose overlap ends signs for at most secretReuse more,
// whatever the worker's clock says.
const secretReuse = time.Second

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
	// swept is when a read last dropped the entries read secretReuse or
	// more before it (at most once per secretReuse): decrypted secrets
	// no longer of use do not pile up while the worker reads others.
	swept time.Time
}

// appKeys are an app's secrets as read at readAt: the current one's id
// and every valid one parsed, the current one first. keys is never
// changed once stored.
type appKeys struct {
	current int64
	keys    [][]byte
	readAt  time.Time
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
	ks, err := a.keysOf(ctx, app, secretID, a.now())
	if err != nil {
		return "", err
	}
	return signing.SignSymmetric(ks.keys, id, ts, body), nil
}

// keysOf returns app's secrets: those read less than secretReuse ago when
// their current one is secretID, else read now.
func (a *secretSigner) keysOf(ctx context.Context, app string, secretID int64, now time.Time) (appKeys, error) {
	a.mu.Lock()
	ks, ok := a.apps[app]
	a.mu.Unlock()
	// A successful read always has a current secret (its id is never 0),
	// so a batch that saw none always reads.
	if ok && ks.current == secretID && now.Sub(ks.readAt) < secretReuse {
		return ks, nil
	}
	set, err := a.load(ctx, app)
	if err != nil {
		return appKeys{}, err
	}
	ks = appKeys{current: set.Current.ID, readAt: now}
	for _, s := range set.All() {
		k, err := signing.ParseSecret(s)
		if err != nil {
			return appKeys{}, err
		}
		ks.keys = append(ks.keys, k)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.swept) >= secretReuse {
		for name, old := range a.apps {
			if now.Sub(old.readAt) >= secretReuse {
				delete(a.apps, name)
			}
		}
		a.swept = now
	}
	a.apps[app] = ks
	return ks, nil
}
