package testkit

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// Listener is a loopback TCP socket a test holds for its whole run, so that
// a worker restarted within the test keeps its address (and subscribers
// their JWKS URL) without picking a port, releasing it and hoping to get it
// back. Each run of a server takes a View; closing a view (http.Server's
// Shutdown does) ends that run's Accept without closing the socket:
// connections that arrive between two runs wait for the next view.
type Listener struct {
	ln    net.Listener
	conns chan net.Conn // accepted by pump, handed to whichever view asks
	done  chan struct{} // closed when pump has ended

	mu sync.Mutex
	// held are connections a view took while it was being closed; the
	// next view's Accept returns them first.
	held []net.Conn
	shut bool // the socket is closed: no next view will come
}

// Listen opens a Listener on 127.0.0.1 with a free port; the test's
// cleanup closes it.
func Listen(t testing.TB) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.pump()
	t.Cleanup(l.close)
	return l
}

// Addr is the socket's address, the same for every view.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) pump() {
	defer close(l.done)
	defer close(l.conns)
	for {
		c, err := l.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return // the test is over
		}
		if err != nil { // say, out of file descriptors for a moment
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.conns <- c // close drains conns, so this never blocks for good
	}
}

func (l *Listener) close() {
	_ = l.ln.Close()
	for c := range l.conns { // until pump has ended
		_ = c.Close()
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shut = true
	for _, c := range l.held {
		_ = c.Close()
	}
	l.held = nil
}

// View is a net.Listener on the socket for one run of a server.
func (l *Listener) View() net.Listener {
	return &view{l: l, closing: make(chan struct{})}
}

type view struct {
	l       *Listener
	closing chan struct{}
	closed  bool // under l.mu
}

func (v *view) Accept() (net.Conn, error) {
	v.l.mu.Lock()
	switch {
	case v.closed:
		v.l.mu.Unlock()
		return nil, net.ErrClosed
	case len(v.l.held) > 0:
		c := v.l.held[0]
		v.l.held = v.l.held[1:]
		v.l.mu.Unlock()
		return c, nil
	}
	v.l.mu.Unlock()
	select {
	case c, ok := <-v.l.conns:
		if !ok {
			return nil, net.ErrClosed
		}
		v.l.mu.Lock()
		defer v.l.mu.Unlock()
		if v.closed { // closed meanwhile: the connection is the next run's
			if v.l.shut {
				_ = c.Close() // there is no next run
			} else {
				v.l.held = append(v.l.held, c)
			}
			return nil, net.ErrClosed
		}
		return c, nil
	case <-v.closing:
		return nil, net.ErrClosed
	}
}

// Close ends this view's Accept; the socket stays open.
func (v *view) Close() error {
	v.l.mu.Lock()
	defer v.l.mu.Unlock()
	if !v.closed {
		v.closed = true
		close(v.closing)
	}
	return nil
}

func (v *view) Addr() net.Addr { return v.l.Addr() }
