//go:build unix

package testkit

import (
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
)

// Port is a loopback TCP port bound for a test but not listening: a
// connection to it is refused (nobody else can take the port meanwhile)
// until the test calls Listen. It replaces picking a free port, closing it
// and hoping it stays free.
type Port struct {
	mu   sync.Mutex
	fd   int // -1 once Listen or the cleanup took it
	addr string
}

// ReservePort binds a loopback port for the test; its cleanup releases it.
func ReservePort(t testing.TB) *Port {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		t.Fatalf("getsockname: %v", err)
	}
	in4 := sa.(*syscall.SockaddrInet4)
	p := &Port{fd: fd, addr: (&net.TCPAddr{IP: net.IP(in4.Addr[:]), Port: in4.Port}).String()}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.fd >= 0 {
			_ = syscall.Close(p.fd)
			p.fd = -1
		}
	})
	return p
}

// Addr is the port's host:port.
func (p *Port) Addr() string { return p.addr }

// Listen starts listening on the port; from now on connections are
// accepted. The test's cleanup closes the listener.
func (p *Port) Listen(t testing.TB) net.Listener {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		t.Fatal("testkit: Listen on a port already listened on or released")
	}
	if err := syscall.Listen(p.fd, syscall.SOMAXCONN); err != nil {
		t.Fatalf("listen on %s: %v", p.addr, err)
	}
	f := os.NewFile(uintptr(p.fd), p.addr)
	p.fd = -1
	ln, err := net.FileListener(f) // a duplicate of the descriptor
	_ = f.Close()
	if err != nil {
		t.Fatalf("listen on %s: %v", p.addr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
