package netguard_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herald/netguard"
)

// fakeResolver returns a resolver that never leaves the process: a DNS
// server on the other end of a net.Pipe answers A and AAAA queries from
// records (names without the trailing dot) and NXDOMAIN for anything else.
// /etc/hosts is still consulted first, as the Go resolver does.
func fakeResolver(records map[string]netip.Addr) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go serveDNS(server, records)
			return client, nil
		},
	}
}

// serveDNS speaks DNS over a stream (two-byte length prefix), which is what
// the Go resolver uses on a connection that is not a net.PacketConn.
func serveDNS(c net.Conn, records map[string]netip.Addr) {
	defer c.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp := dnsResponse(query, records)
		if resp == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

func dnsResponse(query []byte, records map[string]netip.Addr) []byte {
	const (
		typeA    = 1
		typeAAAA = 28
	)
	if len(query) < 12 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(query) && query[i] != 0 {
		n := int(query[i])
		if i+1+n > len(query) {
			return nil
		}
		labels = append(labels, string(query[i+1:i+1+n]))
		i += 1 + n
	}
	if i+5 > len(query) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(query[i+1 : i+3])
	question := query[12 : i+5]
	addr, found := records[strings.ToLower(strings.Join(labels, "."))]

	resp := make([]byte, 12, 64)
	copy(resp, query[:2]) // id
	// QR, AA, RA, and RD copied from the query; RCODE 3 (NXDOMAIN) when unknown.
	flags := uint16(0x8000|0x0400|0x0080) | binary.BigEndian.Uint16(query[2:4])&0x0100
	if !found {
		flags |= 3
	}
	binary.BigEndian.PutUint16(resp[2:4], flags)
	binary.BigEndian.PutUint16(resp[4:6], 1)
	resp = append(resp, question...)
	if found && (qtype == typeA && addr.Is4() || qtype == typeAAAA && addr.Is6()) {
		binary.BigEndian.PutUint16(resp[6:8], 1)
		resp = append(resp, 0xc0, 12) // name: pointer to the question
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // class IN
		resp = binary.BigEndian.AppendUint32(resp, 60)
		raw := addr.AsSlice()
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(raw)))
		resp = append(resp, raw...)
	}
	return resp
}

// loopbackServer starts an HTTP server on 127.0.0.1 that counts its hits.
func loopbackServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/target", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func TestHTTPClientGuardsNamesAfterResolution(t *testing.T) {
	srv, hits := loopbackServer(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	records := map[string]netip.Addr{
		"rebind.test":       netip.MustParseAddr("127.0.0.1"),
		"metadata.test":     netip.MustParseAddr("169.254.169.254"),
		"nat64-meta.test":   netip.MustParseAddr("64:ff9b::a9fe:a9fe"),
		"private.test":      netip.MustParseAddr("10.0.0.1"),
		"mapped-local.test": netip.MustParseAddr("::ffff:127.0.0.1"),
	}
	tests := []struct {
		host   string
		reason string
	}{
		{"localhost", "loopback"}, // from /etc/hosts
		{"rebind.test", "loopback"},
		{"metadata.test", "cloud metadata"},
		{"nat64-meta.test", "cloud metadata"},
		{"private.test", "private network"},
		{"mapped-local.test", "loopback"},
	}
	g := netguard.New(nil)
	g.Resolver = fakeResolver(records)
	client := netguard.NewHTTPClient(g, netguard.ClientOptions{})
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			_, err := get(t, client, "http://"+net.JoinHostPort(tt.host, strconv.Itoa(port))+"/")
			var fe *netguard.ForbiddenError
			if !errors.As(err, &fe) {
				t.Fatalf("GET %s: err = %v, want a ForbiddenError", tt.host, err)
			}
			if !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("reason = %q, want %q", fe.Reason, tt.reason)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server was hit %d times through a refused address", n)
	}

	// The same names reach the server once loopback is allow-listed, which
	// shows that it was the guard that refused them above.
	allowed := netguard.New(mustAllow(t, "127.0.0.0/8, ::1/128"))
	allowed.Resolver = fakeResolver(records)
	client = netguard.NewHTTPClient(allowed, netguard.ClientOptions{})
	for _, host := range []string{"localhost", "rebind.test", "mapped-local.test"} {
		resp, err := get(t, client, "http://"+net.JoinHostPort(host, strconv.Itoa(port))+"/")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with loopback allowed: %v", host, err)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("server hits = %d, want 3", n)
	}
}

func TestHTTPClientNonCanonicalHostsNeverReachLoopback(t *testing.T) {
	srv, hits := loopbackServer(t)
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	// Even with loopback allow-listed, these are host names to Go, never
	// 127.0.0.1: the Go resolver refuses all-numeric names without a query,
	// and the others are unknown to the fake DNS. (A resolver using
	// inet_aton, such as glibc's, may return 127.0.0.1 for them; the dial-time
	// check then refuses that address like any other, as tested above.)
	g := netguard.New(mustAllow(t, "127.0.0.0/8"))
	g.Resolver = fakeResolver(nil)
	client := netguard.NewHTTPClient(g, netguard.ClientOptions{})
	for _, host := range []string{"2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1"} {
		_, err := get(t, client, "http://"+host+":"+port+"/")
		if err == nil {
			t.Errorf("GET http://%s:%s/ succeeded", host, port)
			continue
		}
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) {
			t.Errorf("GET http://%s:%s/: %v, want a DNS error", host, port, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("loopback server was hit %d times", n)
	}
}

func TestHTTPClientLiteralLoopbackRefused(t *testing.T) {
	srv, hits := loopbackServer(t)
	client := netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{})
	_, err := get(t, client, srv.URL)
	var fe *netguard.ForbiddenError
	if !errors.As(err, &fe) || fe.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("GET %s: %v, want ForbiddenError for 127.0.0.1", srv.URL, err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) || opErr.Op != "dial" {
		t.Errorf("error %v is not a dial *net.OpError", err)
	}
	if hits.Load() != 0 {
		t.Fatal("server was hit")
	}
}

func TestHTTPClientDoesNotFollowRedirects(t *testing.T) {
	srv, hits := loopbackServer(t)
	client := netguard.NewHTTPClient(netguard.New(mustAllow(t, "127.0.0.0/8")), netguard.ClientOptions{})
	resp, err := get(t, client, srv.URL+"/redirect")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/target" {
		t.Errorf("got %d Location %q, want 302 to /target", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1 (the redirect target must not be fetched)", n)
	}
}

func TestNewHTTPClientSettings(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	client := netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{})
	tr, ok := client.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T, want *http.Transport", client.Transport)
	}
	if tr.Proxy != nil {
		t.Error("Proxy is set; the environment must never choose a proxy")
	}
	//lint:ignore SA1019 the test checks that the deprecated hook stays unset
	if tr.DialContext == nil || tr.DialTLSContext != nil || tr.Dial != nil {
		t.Error("dialling does not go (only) through the guard's DialContext")
	}
	if tr.MaxIdleConnsPerHost != netguard.DefaultMaxIdleConnsPerHost || tr.IdleConnTimeout != netguard.DefaultIdleConnTimeout {
		t.Errorf("pooling = %d/%v", tr.MaxIdleConnsPerHost, tr.IdleConnTimeout)
	}
	if tr.TLSHandshakeTimeout != netguard.DefaultTLSHandshakeTimeout || !tr.ForceAttemptHTTP2 {
		t.Errorf("TLSHandshakeTimeout = %v, ForceAttemptHTTP2 = %v", tr.TLSHandshakeTimeout, tr.ForceAttemptHTTP2)
	}
	if client.Timeout != 0 {
		t.Errorf("client Timeout = %v, want 0 (callers use contexts)", client.Timeout)
	}
	if err := client.CheckRedirect(nil, nil); !errors.Is(err, http.ErrUseLastResponse) {
		t.Errorf("CheckRedirect = %v, want http.ErrUseLastResponse", err)
	}
	custom := netguard.NewHTTPClient(nil, netguard.ClientOptions{MaxIdleConnsPerHost: 3, IdleConnTimeout: time.Second})
	if tr := custom.Transport.(*http.Transport); tr.MaxIdleConnsPerHost != 3 || tr.IdleConnTimeout != time.Second {
		t.Errorf("options not applied: %d/%v", tr.MaxIdleConnsPerHost, tr.IdleConnTimeout)
	}
}

func TestDialContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctx := context.Background()

	_, err = netguard.New(nil).DialContext(ctx, "tcp", ln.Addr().String())
	var fe *netguard.ForbiddenError
	if !errors.As(err, &fe) || fe.Reason != "loopback" {
		t.Fatalf("DialContext without allow-list: %v, want loopback ForbiddenError", err)
	}

	conn, err := netguard.New(mustAllow(t, "127.0.0.1")).DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialContext with 127.0.0.1 allowed: %v", err)
	}
	_ = conn.Close()
}

func TestResolveAndCheckHost(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ host, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"[::1]", "::1"},
	} {
		addrs, err := netguard.Resolve(ctx, tt.host)
		if err != nil || len(addrs) != 1 || addrs[0].String() != tt.want {
			t.Errorf("Resolve(%q) = %v, %v; want [%s]", tt.host, addrs, err, tt.want)
		}
	}
	if _, err := netguard.Resolve(ctx, ""); err == nil {
		t.Error("Resolve(\"\") succeeded")
	}

	records := map[string]netip.Addr{
		"metadata.test": netip.MustParseAddr("169.254.169.254"),
		"public.test":   netip.MustParseAddr("8.8.8.8"),
		"loop6.test":    netip.MustParseAddr("::1"),
	}
	tests := []struct {
		allow     string
		host      string
		forbidden bool
		lookupErr bool
	}{
		{"", "localhost", true, false},
		{"", "127.0.0.1", true, false},
		{"", "metadata.test", true, false},
		{"", "loop6.test", true, false},
		{"", "public.test", false, false},
		{"", "8.8.8.8", false, false},
		{"127.0.0.0/8", "localhost", false, false},
		{"127.0.0.0/8", "loop6.test", true, false},
		{"", "missing.test", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.allow+" "+tt.host, func(t *testing.T) {
			g := netguard.New(mustAllow(t, tt.allow))
			g.Resolver = fakeResolver(records)
			err := g.CheckHost(ctx, tt.host)
			var fe *netguard.ForbiddenError
			if got := errors.As(err, &fe); got != tt.forbidden {
				t.Fatalf("CheckHost(%q) = %v, want forbidden=%v", tt.host, err, tt.forbidden)
			}
			if tt.forbidden && !strings.Contains(err.Error(), tt.host) {
				t.Errorf("error %q does not name the host", err)
			}
			var dnsErr *net.DNSError
			if got := errors.As(err, &dnsErr); got != tt.lookupErr {
				t.Errorf("CheckHost(%q) = %v, want lookup error=%v", tt.host, err, tt.lookupErr)
			}
		})
	}
}
