package activities_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"herald/activities"
	"herald/netguard"
)

// fakeSymmetric signs "v1,<app>:<id>.<ts> v1,<app>:previous<secret id>"
// so tests see which app's secrets signed a delivery, and the current
// secret the request named.
type fakeSymmetric struct{ err error }

func (f fakeSymmetric) SignSymmetric(_ context.Context, app string, secretID int64, id, ts string, _ []byte) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	return "v1," + app + ":" + id + "." + ts + " v1," + app + ":previous" + strconv.FormatInt(secretID, 10), nil
}

type fakeWebhook struct{}

func (fakeWebhook) SignWebhook(id string, _ []byte) (activities.WebhookHeaders, error) {
	return activities.WebhookHeaders{ID: id, Timestamp: "1700000000", Signature: "v1a,ed25519"}, nil
}

// TestPostSignsWithTheSubscribersSecrets: webhook-signature carries the
// subscribing app's v1 entries (each secret's, current first) and then v1a,
// on the id ("<source app>:<event id>") and timestamp of the other headers;
// each subscriber gets its own.
func TestPostSignsWithTheSubscribersSecrets(t *testing.T) {
	got := make(chan http.Header, 2)
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	p, _ := newPoster(t)
	p.Webhook = fakeWebhook{}
	p.Symmetric = fakeSymmetric{}
	for i, app := range []string{"billing", "audit-log"} {
		secretID := int64(40 + i)
		res := p.Post(context.Background(), activities.PostRequest{URL: srv.URL, Body: []byte(`{}`),
			SubscriptionID: "s", SubscriberApp: app, SourceApp: "contacts", EventID: "e1", Attempt: 1, SecretID: secretID})
		if !res.Delivered() {
			t.Fatalf("%s: %+v", app, res)
		}
		h := <-got
		want := fmt.Sprintf("v1,%s:contacts:e1.1700000000 v1,%s:previous%d v1a,ed25519", app, app, secretID)
		if h.Get("webhook-signature") != want || h.Get("webhook-id") != "contacts:e1" || h.Get("webhook-timestamp") != "1700000000" {
			t.Errorf("%s: webhook headers %q %q %q, want signature %q", app, h.Get("webhook-id"),
				h.Get("webhook-timestamp"), h.Get("webhook-signature"), want)
		}
	}
}

// TestPostV1Only: with v1a off, the v1 entries alone, with a timestamp of now.
func TestPostV1Only(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	p, _ := newPoster(t)
	p.Symmetric = fakeSymmetric{}
	res := p.Post(context.Background(), activities.PostRequest{URL: srv.URL, Body: []byte(`{}`),
		SubscriptionID: "s", SubscriberApp: "billing", SourceApp: "contacts", EventID: "e1", Attempt: 1})
	if !res.Delivered() {
		t.Fatalf("%+v", res)
	}
	h := <-got
	sig := h.Get("webhook-signature")
	if strings.Contains(sig, "v1a,") || !strings.HasPrefix(sig, "v1,billing:contacts:e1."+h.Get("webhook-timestamp")) || h.Get("webhook-timestamp") == "" {
		t.Errorf("webhook-signature %q, timestamp %q", sig, h.Get("webhook-timestamp"))
	}
}

// TestPostSecretFailureIsNotSent: a secret that cannot be read stops the
// attempt before anything is sent, not counted against the subscriber.
func TestPostSecretFailureIsNotSent(t *testing.T) {
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request was sent without its signature")
	})
	p, _ := newPoster(t)
	p.Symmetric = fakeSymmetric{err: errors.New("open secret: wrong HERALD_SECRET_KEY or damaged secret")}
	res := p.Post(context.Background(), activities.PostRequest{URL: srv.URL, Body: []byte(`{}`),
		SubscriptionID: "s", SubscriberApp: "billing", SourceApp: "contacts", EventID: "e1", Attempt: 1})
	if res.Code != activities.CodeSubscriberUnreachable || !strings.Contains(res.Message, "secrets of billing") {
		t.Fatalf("%+v", res)
	}
}

// TestPostThroughProxyForbiddenTarget: behind an egress proxy, a forbidden
// endpoint still ends endpoint_forbidden and never reaches the proxy.
func TestPostThroughProxyForbiddenTarget(t *testing.T) {
	reached := make(chan string, 1)
	proxy := server(t, func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.String()
		w.WriteHeader(http.StatusNoContent)
	})
	u, err := netguard.ParseProxy(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := &activities.Poster{Client: netguard.NewHTTPClient(netguard.New(nil), netguard.ClientOptions{Proxy: u}), Signer: &fakeSigner{}}
	res := p.Post(context.Background(), activities.PostRequest{URL: "http://10.0.0.7/hooks", Body: []byte(`{}`),
		SubscriptionID: "s", SubscriberApp: "billing", SourceApp: "contacts", EventID: "e1", Attempt: 1})
	if res.Code != activities.CodeEndpointForbidden {
		t.Fatalf("%+v, want endpoint_forbidden", res)
	}
	res = p.Post(context.Background(), activities.PostRequest{URL: "http://93.184.216.34/hooks", Body: []byte(`{}`),
		SubscriptionID: "s", SubscriberApp: "billing", SourceApp: "contacts", EventID: "e1", Attempt: 1})
	if !res.Delivered() {
		t.Fatalf("public endpoint through the proxy: %+v", res)
	}
	if got := <-reached; got != "http://93.184.216.34/hooks" {
		t.Fatalf("the proxy forwarded %q", got)
	}
}

// TestPostWebhookIDPerSourceApp: two apps' events with the same id reach a
// subscriber of both with different webhook-ids ("<source app>:<id>"), each
// signed as sent, so a receiver deduplicating on webhook-id keeps both; the
// bare id stays in Herald-Event-Id, the source in Herald-Event-Source. An
// event without a source app is not sent with a webhook-id that could
// collide.
func TestPostWebhookIDPerSourceApp(t *testing.T) {
	got := make(chan http.Header, 2)
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	})
	p, _ := newPoster(t)
	p.Webhook = fakeWebhook{}
	p.Symmetric = fakeSymmetric{}
	const id = "0b9b7d5e-4a52-4d5e-9c1a-6f1f3c2b1a00"
	ids := map[string]bool{}
	for _, source := range []string{"contacts", "mallory"} {
		res := p.Post(context.Background(), activities.PostRequest{URL: srv.URL, Body: []byte(`{}`),
			SubscriptionID: "s", SubscriberApp: "billing", SourceApp: source, EventID: id, Attempt: 1})
		if !res.Delivered() {
			t.Fatalf("%s: %+v", source, res)
		}
		h := <-got
		wid := h.Get("webhook-id")
		if wid != source+":"+id || !strings.HasPrefix(h.Get("webhook-signature"), "v1,billing:"+wid+".") {
			t.Errorf("%s: webhook-id %q signed as %q, want %q signed", source, wid, h.Get("webhook-signature"), source+":"+id)
		}
		if h.Get("Herald-Event-Id") != id || h.Get("Herald-Event-Source") != "app:"+source {
			t.Errorf("%s: Herald-Event-Id %q, Herald-Event-Source %q", source, h.Get("Herald-Event-Id"), h.Get("Herald-Event-Source"))
		}
		ids[wid] = true
	}
	if len(ids) != 2 {
		t.Errorf("webhook-ids %v: two apps' events with one id share a webhook-id", ids)
	}
	res := p.Post(context.Background(), activities.PostRequest{URL: srv.URL, Body: []byte(`{}`),
		SubscriptionID: "s", SubscriberApp: "billing", EventID: id, Attempt: 1})
	if res.Delivered() || res.Code != activities.CodeSubscriberUnreachable || !strings.Contains(res.Message, "webhook id") {
		t.Errorf("an event without a source app: %+v, want it not sent", res)
	}
	select {
	case h := <-got:
		t.Errorf("an event without a source app was sent with webhook-id %q", h.Get("webhook-id"))
	default:
	}
}
