package netguard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Defaults of NewHTTPClient and DialContext.
const (
	DefaultConnectTimeout      = 10 * time.Second
	DefaultTLSHandshakeTimeout = 10 * time.Second
	DefaultMaxIdleConnsPerHost = 64
	DefaultIdleConnTimeout     = 90 * time.Second
)

// Control checks the address a dialer is about to connect to. It has the
// signature of net.Dialer.Control, which the dialer calls for every address
// it tries, after DNS resolution and before connecting; address is then a
// literal IP and port. A refused address yields a *ForbiddenError, which
// the dialer wraps in a *net.OpError.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Not an IP:port: unix sockets or something unforeseen. Fail closed.
		return fmt.Errorf("netguard: refusing %s dial to %q: not an IP address and port", network, address)
	}
	return g.Check(ap.Addr())
}

// DialContext connects like net.Dialer.DialContext with the guard as Control
// hook and DefaultConnectTimeout.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dialer(DefaultConnectTimeout).DialContext(ctx, network, addr)
}

func (g *Guard) dialer(connectTimeout time.Duration) *net.Dialer {
	d := &net.Dialer{
		Timeout:   connectTimeout,
		KeepAlive: 30 * time.Second,
		Control:   g.Control,
	}
	if g != nil {
		d.Resolver = g.Resolver
	}
	return d
}

// ClientOptions tune NewHTTPClient; zero fields take the defaults.
type ClientOptions struct {
	// ConnectTimeout bounds one TCP connect (default 10s).
	ConnectTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake (default 10s).
	TLSHandshakeTimeout time.Duration
	// MaxIdleConnsPerHost is the idle connection pool size per host (default 64).
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes pooled connections idle this long (default 90s).
	IdleConnTimeout time.Duration
	// TLSClientConfig is used for HTTPS connections (default: system roots).
	TLSClientConfig *tls.Config
	// Proxy, when set, is the egress proxy every request goes through
	// (HERALD_EGRESS_PROXY): the transport connects to it alone, its own
	// address allowed explicitly, and the guard judges each request's final
	// target from the addresses its host resolves to before the request
	// is sent. The proxy resolves the name again when it connects: it
	// should refuse internal targets itself too.
	Proxy *url.URL
}

// NewHTTPClient returns an HTTP client whose every connection passes the
// guard. It uses no proxy but opts.Proxy (whatever the environment says), never
// follows redirects (the 3xx response is returned as is) and sets no overall
// timeout: callers bound each request with its context.
func NewHTTPClient(g *Guard, opts ClientOptions) *http.Client {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.TLSHandshakeTimeout <= 0 {
		opts.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if opts.MaxIdleConnsPerHost <= 0 {
		opts.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if opts.IdleConnTimeout <= 0 {
		opts.IdleConnTimeout = DefaultIdleConnTimeout
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.dialer(opts.ConnectTimeout).DialContext,
		TLSClientConfig:        opts.TLSClientConfig,
		TLSHandshakeTimeout:    opts.TLSHandshakeTimeout,
		MaxIdleConnsPerHost:    opts.MaxIdleConnsPerHost,
		IdleConnTimeout:        opts.IdleConnTimeout,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	var rt http.RoundTripper = transport
	if opts.Proxy != nil {
		transport.Proxy = http.ProxyURL(opts.Proxy)
		transport.DialContext = proxyDialer(opts.Proxy, opts.ConnectTimeout)
		rt = targetGuard{g: g, next: transport}
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Resolve returns the addresses host resolves to with net.DefaultResolver.
// An IP literal (brackets allowed for IPv6) is returned as is, without a
// look-up.
func Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return resolve(ctx, net.DefaultResolver, host)
}

func resolve(ctx context.Context, r *net.Resolver, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return nil, errors.New("resolve: empty host")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{addr}, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}

// CheckHost resolves host (a name or IP literal, without port) with the
// guard's resolver and returns a *ForbiddenError, wrapped with the host name,
// if any of its addresses is refused. It is a warning aid for tools such as
// `starter apps apply`: the authoritative check is the one at dial time,
// since DNS answers can change. A resolution failure is returned as is.
func (g *Guard) CheckHost(ctx context.Context, host string) error {
	var r *net.Resolver
	if g != nil {
		r = g.Resolver
	}
	addrs, err := resolve(ctx, r, host)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		if err := g.Check(addr); err != nil {
			return fmt.Errorf("host %s: %w", host, err)
		}
	}
	return nil
}
