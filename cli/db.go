package cli

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"time"

	"herald/config"
	"herald/store"
)

// connectTimeout bounds connecting to the database, so that an unreachable
// server fails the command instead of hanging it.
const connectTimeout = 15 * time.Second

// errNoDatabaseURL explains the one setting every database command needs.
var errNoDatabaseURL = errors.New("HERALD_DATABASE_URL is not set: point it at Herald's PostgreSQL database, " +
	"e.g. HERALD_DATABASE_URL=postgres://herald@127.0.0.1:5432/herald")

// openStore connects to the database named by HERALD_DATABASE_URL. The
// caller closes the store.
func (inv *invocation) openStore() (*store.Store, error) {
	if err := inv.act(); err != nil {
		return nil, err
	}
	cfg, err := config.LoadCommon(inv.getenv)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	if cfg.DatabaseURL == "" {
		return nil, errNoDatabaseURL
	}
	ctx, cancel := context.WithTimeout(inv.ctx, connectTimeout)
	defer cancel()
	// A command needs few connections; keep the pool small on a shared server.
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: 4})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// defaultActor is the audit actor when --actor is not given: the operating
// system user, or "operator" when there is none to be found.
func (inv *invocation) defaultActor() string {
	if u := inv.getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}

// actor returns the --actor flag's value or the default actor.
func (inv *invocation) actor(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return inv.defaultActor()
}
