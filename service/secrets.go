package service

import (
	"context"

	"herald/signing"
	"herald/store"
)

// secretSigner signs deliveries with the subscribing app's own secrets,
// read (and decrypted) at POST time so that they never enter workflow
// history; an app without a secret yet gets its first one here.
type secretSigner struct {
	store *store.Store
	box   *signing.SecretBox
}

func (a secretSigner) SignSymmetric(ctx context.Context, app, id, ts string, body []byte) (string, error) {
	set, err := a.store.EnsureAppSecrets(ctx, store.SecretRequest{App: app, Box: a.box, New: signing.NewSecret, Actor: store.ActorSystem, AllowRemoved: true})
	if err != nil {
		return "", err
	}
	keys := make([][]byte, 0, 1+len(set.Previous))
	for _, s := range set.All() {
		k, err := signing.ParseSecret(s)
		if err != nil {
			return "", err
		}
		keys = append(keys, k)
	}
	return signing.SignSymmetric(keys, id, ts, body), nil
}
