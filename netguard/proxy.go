package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ParseProxy checks an egress proxy URL (HERALD_EGRESS_PROXY): http or
// https, with a host, nothing after it but an optional "/". Empty is no proxy.
func ParseProxy(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	// Errors never quote the value: it may carry the proxy's password.
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("egress proxy: not a URL (want http://HOST:PORT or https://HOST:PORT)")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("egress proxy %s: want http://HOST:PORT or https://HOST:PORT", u.Redacted())
	}
	return u, nil
}

// proxyDialer dials the egress proxy, and only it: the proxy's own address
// is allowed explicitly, whatever the guard says of it, since the operator
// configured it; any other address is refused, the transport never
// connecting anywhere but the proxy.
func proxyDialer(proxy *url.URL, connectTimeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	port := proxy.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[proxy.Scheme]
	}
	want := net.JoinHostPort(proxy.Hostname(), port)
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != want {
			return nil, fmt.Errorf("netguard: refusing to dial %s: with an egress proxy only %s is dialled", addr, want)
		}
		return d.DialContext(ctx, network, addr)
	}
}

// targetGuard judges the final target of each request sent through the
// proxy before it is sent: every address the target's host resolves to must
// pass the guard, or the request fails with a *ForbiddenError.
type targetGuard struct {
	g    *Guard
	next http.RoundTripper
}

func (t targetGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.g.CheckHost(req.Context(), req.URL.Hostname()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return t.next.RoundTrip(req)
}
