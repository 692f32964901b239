package subscriber

import (
	"container/heap"
	"sync"
	"time"
)

// replayCache remembers token ids until their tokens expire, in bounded
// memory: when full, the id whose token expires first is forgotten first, as
// it is the one closest to being refused as expired anyway.
type replayCache struct {
	mu    sync.Mutex
	max   int
	byJTI map[string]*replayEntry
	queue replayQueue // min-heap by expiry
}

type replayEntry struct {
	jti     string
	expires time.Time
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, byJTI: make(map[string]*replayEntry)}
}

// add records jti, valid until expires, and reports whether it was new.
func (c *replayCache) add(jti string, expires, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) > 0 && !c.queue[0].expires.After(now) {
		e := heap.Pop(&c.queue).(*replayEntry)
		delete(c.byJTI, e.jti)
	}
	if _, seen := c.byJTI[jti]; seen {
		return false
	}
	for len(c.queue) >= c.max {
		e := heap.Pop(&c.queue).(*replayEntry)
		delete(c.byJTI, e.jti)
	}
	e := &replayEntry{jti: jti, expires: expires}
	heap.Push(&c.queue, e)
	c.byJTI[jti] = e
	return true
}

// len returns the number of remembered ids.
func (c *replayCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byJTI)
}

// replayQueue implements heap.Interface, earliest expiry first.
type replayQueue []*replayEntry

func (q replayQueue) Len() int           { return len(q) }
func (q replayQueue) Less(i, j int) bool { return q[i].expires.Before(q[j].expires) }
func (q replayQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *replayQueue) Push(x any)        { *q = append(*q, x.(*replayEntry)) }

func (q *replayQueue) Pop() any {
	old := *q
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return e
}
