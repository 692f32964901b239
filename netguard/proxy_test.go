package netguard_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"herald/netguard"
)

// proxyRecorder is a forward proxy that answers every request itself and
// records what it was asked for: absolute-form URLs and CONNECT targets.
type proxyRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (p *proxyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Method == http.MethodConnect {
		p.seen = append(p.seen, "CONNECT "+r.Host)
		http.Error(w, "no tunnels here", http.StatusForbidden)
		return
	}
	p.seen = append(p.seen, r.Method+" "+r.URL.String())
	w.WriteHeader(http.StatusNoContent)
}

func (p *proxyRecorder) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// TestEgressProxy: with a proxy, a delivery to a public address goes
// through it (its own loopback address allowed explicitly, although the
// guard refuses loopback), and the guard still refuses a forbidden final
// target before anything reaches the proxy.
func TestEgressProxy(t *testing.T) {
	rec := &proxyRecorder{}
	proxy := httptest.NewServer(rec)
	t.Cleanup(proxy.Close)
	proxyURL, err := netguard.ParseProxy(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing allow-listed: loopback, private ranges and metadata are refused.
	client := netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{Proxy: proxyURL})

	resp, err := client.Post("http://93.184.216.34/hooks", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("delivery through the proxy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d, want the proxy's 204", resp.StatusCode)
	}
	if _, err := client.Post("https://93.184.216.34/hooks", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("the proxy refused the tunnel, yet the request succeeded")
	}
	want := []string{"POST http://93.184.216.34/hooks", "CONNECT 93.184.216.34:443"}
	if got := rec.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the proxy saw %q, want %q", got, want)
	}

	for _, target := range []string{"http://127.0.0.1:9/", "http://10.1.2.3/hooks", "http://169.254.169.254/latest/meta-data/", "https://[::1]/"} {
		_, err := client.Post(target, "application/json", strings.NewReader("{}"))
		var forbidden *netguard.ForbiddenError
		if !errors.As(err, &forbidden) {
			t.Errorf("%s through the proxy: err %v, want a *ForbiddenError", target, err)
		}
	}
	if got := rec.requests(); len(got) != len(want) {
		t.Fatalf("a forbidden target reached the proxy: %q", got)
	}
}

func TestParseProxy(t *testing.T) {
	if u, err := netguard.ParseProxy(""); u != nil || err != nil {
		t.Fatalf("empty: %v, %v", u, err)
	}
	for _, ok := range []string{"http://proxy.internal:3128", "https://10.0.0.5:8443/"} {
		if _, err := netguard.ParseProxy(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"socks5://p:1080", "proxy:3128", "http://", "http://p:1/path", "http://p:1/?q=1", "://x"} {
		if _, err := netguard.ParseProxy(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
