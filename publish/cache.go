package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
}

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
		apps: map[string]time.Time{}, decls: map[declKey]cachedDecl{}}
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
