package subscriber_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"herald/signing"
	"herald/subscriber"
)

// A receiver for the app "billing" that trusts the keys Herald publishes.
func Example() {
	// Herald's side, for the example: a signing key and the worker's JWKS.
	dir, err := os.MkdirTemp("", "herald-keys")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := signing.GenerateKey(dir); err != nil {
		log.Fatal(err)
	}
	keys, err := signing.LoadKeys(dir)
	if err != nil {
		log.Fatal(err)
	}
	// Herald's JWKS, served over TLS (a test certificate that herald.Client
	// trusts; a real receiver uses the system's CAs and no HTTPClient).
	herald := httptest.NewTLSServer(signing.JWKSHandler(keys))
	defer herald.Close()

	// The receiver: verify every delivery, then handle its event.
	receiver, err := subscriber.New(subscriber.Config{
		Audience:   "app:billing",
		JWKSURL:    herald.URL + signing.JWKSPath,
		HTTPClient: herald.Client(),
	}, func(ctx context.Context, ev subscriber.Event) error {
		var person struct {
			Name string `json:"name"`
		}
		if err := ev.DecodeData(&person); err != nil {
			return err // a Reject error: answered 422, Herald stops retrying
		}
		fmt.Printf("%s v%d for %s, attempt %d: %s\n", ev.Type, ev.DataVersion, ev.Subject, ev.Attempt, person.Name)
		return nil // answered 204
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/_internal/events/v1/deliver", receiver)
	app := httptest.NewServer(mux)
	defer app.Close()

	// One delivery, as Herald's worker sends it.
	body := []byte(`{"specversion":"1.0","id":"0b6f3c52-8a4e-4b8e-9a53-1f0d6a7c2e11","source":"app:contacts",` +
		`"type":"contacts.person.updated","subject":"person-42","time":"2025-03-01T12:00:00Z",` +
		`"datacontenttype":"application/json","dataversion":1,"data":{"name":"Ada"}}`)
	token, err := keys.Signer().SignDelivery(signing.DeliveryClaims{
		Audience:   "app:billing",
		Subject:    "billing:contacts.person.updated@1",
		EventID:    "0b6f3c52-8a4e-4b8e-9a53-1f0d6a7c2e11",
		Attempt:    1,
		BodySHA256: signing.BodyHash(body),
	})
	if err != nil {
		log.Fatal(err)
	}
	deliver := func() string {
		req, err := http.NewRequest(http.MethodPost, app.URL+"/api/_internal/events/v1/deliver", bytes.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/cloudevents+json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		return resp.Status
	}
	fmt.Println(deliver())
	fmt.Println(deliver()) // the same token again is a replay

	// Output:
	// contacts.person.updated v1 for person-42, attempt 1: Ada
	// 204 No Content
	// 401 Unauthorized
}
