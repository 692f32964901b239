package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"herald/api"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
)

// TestPublishOverHTTPDelivered: events published with POST /v1/events reach
// every subscriber, in order per key, with the ids the API answered.
func TestPublishOverHTTPDelivered(t *testing.T) {
	t.Parallel()
	s := system.Start(t, system.API())
	s.Apply()
	id, token, hash, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Svc.Store.CreateAPIToken(context.Background(), id, "contacts", "e2e", hash, "e2e"); err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	for n := 1; n <= 5; n++ {
		fmt.Fprintf(&body, `{"type":"contacts.person.updated","version":1,"subject":"person-http","data":{"name":%q,"n":%d}}`+"\n", system.DataMarker, n)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+s.Svc.APIAddr()+api.EventsPath, strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer api.AcceptedResponse
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusAccepted || len(answer.Accepted) != 5 {
		t.Fatalf("status %d, answer %+v (%v)", resp.StatusCode, answer, err)
	}
	for _, app := range []string{"billing", "audit-log"} {
		testkit.Eventually(t, 60*time.Second, app+" to receive the five events", func() bool { return s.Sub.Count(app, "person-http") >= 5 })
		got := s.Sub.Arrivals(app, "person-http")
		for i, a := range got {
			if a.N != i+1 || a.ID != answer.Accepted[i].ID {
				t.Fatalf("%s received %+v, want n=1..5 with ids %+v", app, got, answer.Accepted)
			}
		}
	}
}
