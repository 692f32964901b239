//go:build unix

package testkit

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestPortRefusesUntilListen: a reserved port refuses connections, then
// accepts them on the same address once listened on.
func TestPortRefusesUntilListen(t *testing.T) {
	t.Parallel()
	p := ReservePort(t)
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatalf("connected to %s before Listen", p.Addr())
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial before Listen: %v, want connection refused", err)
	}
	ln := p.Listen(t)
	if ln.Addr().String() != p.Addr() {
		t.Fatalf("listening on %s, reserved %s", ln.Addr(), p.Addr())
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial after Listen: %v", err)
	}
	c.Close()
}
