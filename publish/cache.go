package publish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"herald/manifest"
	"herald/store"
)

// lookupCache keeps found apps and declarations (with compiled schemas) for a
// short while. Only hits are kept: an app or declaration created a moment ago
// is seen at once, while a removal or retirement is seen within the TTL.
type lookupCache struct {
	ttl time.Duration // negative: no caching
	now func() time.Time

	mu    sync.Mutex
	apps  map[string]time.Time // app → expiry
	decls map[declKey]cachedDecl
	roles map[string]cachedRole // a connection's backend (sessionKey) → its publisher role's app
}

// cachedRole is a connection's answer to store.PublisherAppIn.
type cachedRole struct {
	app     store.PublisherApp
	expires time.Time
}

// maxCachedRoles bounds lookupCache.roles: past it, the expired answers
// go, and if that is not enough, all of them.
const maxCachedRoles = 1024

type declKey struct {
	typ     string
	version int
}

type cachedDecl struct {
	decl    *declared
	expires time.Time
}

func newLookupCache(ttl time.Duration, now func() time.Time) *lookupCache {
	return &lookupCache{ttl: ttl, now: now,
		apps: map[string]time.Time{}, decls: map[declKey]cachedDecl{}, roles: map[string]cachedRole{}}
}

// publisherApp is store.PublisherAppIn for tx's session, kept per
// connection for the TTL, found or not. The answer depends on the
// session's login role (session_user: SET ROLE does not change it; SET
// SESSION AUTHORIZATION, a superuser's, does, and its session is answered
// as before for up to the TTL) and on that role's mapping and app, which
// change rarely. Asking on every PublishTx cost about 40 % of 64
// concurrent publishers' throughput (BenchmarkConcurrentPublish). A stale
// answer cannot let a role do more: the database enforces a publisher
// role's limits (herald_publish refuses another app's types, and a
// publisher role may not write the tables itself); for up to the TTL after
// a role is granted or moved, its publishes on connections already asked
// fail.
func (c *lookupCache) publisherApp(ctx context.Context, tx pgx.Tx) (store.PublisherApp, error) {
	if c.ttl <= 0 || tx.Conn() == nil || tx.Conn().PgConn().PID() == 0 {
		// No cache, or no way to name the session: a server that sent
		// no backend key data.
		return store.PublisherAppIn(ctx, tx)
	}
	key := sessionKey(tx.Conn().PgConn())
	now := c.now()
	c.mu.Lock()
	hit, ok := c.roles[key]
	c.mu.Unlock()
	if ok && now.Before(hit.expires) {
		return hit.app, nil
	}
	app, err := store.PublisherAppIn(ctx, tx)
	if err != nil {
		return store.PublisherApp{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.roles) >= maxCachedRoles {
		maps.DeleteFunc(c.roles, func(_ string, r cachedRole) bool { return !now.Before(r.expires) })
		if len(c.roles) >= maxCachedRoles {
			clear(c.roles)
		}
	}
	c.roles[key] = cachedRole{app: app, expires: now.Add(c.ttl)}
	return app, nil
}

// sessionKey names a connection's server session: its backend's process id
// and cancel key, which a new backend with a reused process id does not
// share.
func sessionKey(conn *pgconn.PgConn) string {
	return strconv.FormatUint(uint64(conn.PID()), 10) + "/" + string(conn.SecretKey())
}

// appExists reports whether app is applied and not removed, asking q on a
// miss.
func (c *lookupCache) appExists(ctx context.Context, q store.Querier, app string) (bool, error) {
	now := c.now()
	c.mu.Lock()
	expires, ok := c.apps[app]
	c.mu.Unlock()
	if ok && now.Before(expires) {
		return true, nil
	}
	found, err := store.AppExistsIn(ctx, q, app)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if found && c.ttl > 0 {
		c.apps[app] = now.Add(c.ttl)
	} else {
		delete(c.apps, app)
	}
	return found, nil
}

// declaration returns the un-retired declaration of typ@version with its
// compiled schema, or nil when there is none, asking q on a miss.
//
// find looks it up: store.LookupDeclarationIn, or for a publisher role's
// transaction store.LookupPublisherDeclarationIn, which finds only the
// role's app's declarations (the only ones it asks for).
func (c *lookupCache) declaration(ctx context.Context, q store.Querier, find declarationFinder, typ string, version int) (*declared, error) {
	key := declKey{typ, version}
	now := c.now()
	c.mu.Lock()
	hit, ok := c.decls[key]
	c.mu.Unlock()
	if ok && now.Before(hit.expires) {
		return hit.decl, nil
	}
	d, err := find(ctx, q, typ, version)
	if errors.Is(err, store.ErrNotFound) {
		c.mu.Lock()
		delete(c.decls, key)
		c.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	schema, err := manifest.CompileSchema(d.DataSchema)
	if err != nil {
		// Declarations are checked when applied, so this is stored data gone bad.
		return nil, fmt.Errorf("compile the stored schema of %s@%d: %w", typ, version, err)
	}
	decl := &declared{DeclaredEvent: d, schema: schema}
	if c.ttl > 0 {
		c.mu.Lock()
		c.decls[key] = cachedDecl{decl: decl, expires: now.Add(c.ttl)}
		c.mu.Unlock()
	}
	return decl, nil
}

// declarationFinder looks up the un-retired declaration of a type and
// version on q.
type declarationFinder func(ctx context.Context, q store.Querier, typ string, version int) (store.DeclaredEvent, error)
