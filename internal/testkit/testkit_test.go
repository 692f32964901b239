package testkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestListenerKeepsThePort: a server shut down on one view and started on
// another serves on the same address; a request sent between the two runs
// is answered by the second.
func TestListenerKeepsThePort(t *testing.T) {
	t.Parallel()
	l := Listen(t)
	url := "http://" + l.Addr().String()
	serve := func(name string) *http.Server {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, name)
		})}
		go func() { _ = srv.Serve(l.View()) }()
		return srv
	}
	get := func() (string, error) {
		// A new connection each time: no keep-alive across the runs.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	first := serve("first")
	if got, err := get(); err != nil || got != "first" {
		t.Fatalf("first run: %q, %v", got, err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Connected and sent while no server runs (the socket stays open) ...
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial between the runs: %v", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// ... and answered by the next run.
	second := serve("second")
	defer second.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("request between the runs: %v", err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "second" {
		t.Fatalf("request between the runs: %q, want the second run's answer", b)
	}
	if got, err := get(); err != nil || got != "second" {
		t.Fatalf("second run: %q, %v", got, err)
	}
}

// fatalT records a Fatalf instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventually(t *testing.T) {
	t.Parallel()
	calls := 0
	Eventually(t, time.Second, "the third call", func() bool { calls++; return calls == 3 })

	ft := &fatalT{TB: t}
	EventuallyValue(ft, 120*time.Millisecond, "n to reach 10", func() (int, bool) { calls++; return calls, false })
	if !strings.Contains(ft.msg, "waiting for n to reach 10 (last: ") {
		t.Fatalf("message %q", ft.msg)
	}
	ft = &fatalT{TB: t}
	Eventually(ft, 0, "nothing", func() bool { return false })
	if !strings.Contains(ft.msg, "timed out after 0s waiting for nothing") {
		t.Fatalf("message %q", ft.msg)
	}
}

// TestWatchVisibility: a number that shows up behind a higher one already
// seen is reported; growing in order is not.
func TestWatchVisibility(t *testing.T) {
	t.Parallel()
	feed := func(polls ...[]int64) (func() ([]int64, error), chan struct{}) {
		var mu sync.Mutex
		i := 0
		all := make(chan struct{})
		return func() ([]int64, error) {
			mu.Lock()
			defer mu.Unlock()
			if i == len(polls)-1 {
				select {
				case <-all:
				default:
					close(all)
				}
				return polls[i], nil
			}
			i++
			return polls[i-1], nil
		}, all
	}
	inOrder, all := feed([]int64{1}, []int64{1, 2}, []int64{1, 2, 3, 5})
	stop := WatchVisibility(inOrder)
	<-all
	if err := stop(); err != nil {
		t.Errorf("in order: %v", err)
	}
	late, all := feed([]int64{1, 2}, []int64{1, 2, 4}, []int64{1, 2, 3, 4})
	stop = WatchVisibility(late)
	<-all
	if err := stop(); err == nil || err.Error() != "seq 3 became visible after seq 4" {
		t.Errorf("3 behind 4: %v", err)
	}
}
