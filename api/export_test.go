package api

import (
	"context"

	"herald/store"
)

// SetTokenLookup replaces how h finds a token by id (tests count the
// lookups, which are database queries).
func SetTokenLookup(h *Handler, f func(ctx context.Context, id string) (store.TokenCredential, error)) {
	h.lookup = f
}
