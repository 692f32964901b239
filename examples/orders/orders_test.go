package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"herald/internal/testenv"
	"herald/manifest"
	"herald/publish"
	"herald/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newShop returns a shop on a fresh schema with Herald migrated, the orders
// manifest applied and the app's table created.
func newShop(t *testing.T) (*Shop, *store.Store, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := store.Open(ctx, testenv.NewSchema(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.ParseFile("manifest.json")
	if err != nil {
		t.Fatalf("the example manifest: %v", err)
	}
	if _, err := st.ApplyManifest(ctx, m, "test"); err != nil {
		t.Fatal(err)
	}
	shop := &Shop{Pool: st.Pool, Publisher: publish.New(st, publish.Options{})}
	if err := shop.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	return shop, st, ctx
}

func TestPlaceOrderStoresAndPublishesTogether(t *testing.T) {
	shop, st, ctx := newShop(t)
	id := uuid.NewString()
	res, err := shop.PlaceOrder(ctx, Order{ID: id, Customer: "ada", Total: 4250, Currency: "EUR"})
	if err != nil {
		t.Fatalf("PlaceOrder: %v", err)
	}
	ev, err := st.GetEvent(ctx, res.ID)
	if err != nil {
		t.Fatalf("the published event: %v", err)
	}
	if ev.Type != OrderPlaced || ev.SourceApp != App || ev.Subject != "order-"+id || ev.State != "accepted" {
		t.Errorf("event = %s from %s about %s (%s)", ev.Type, ev.SourceApp, ev.Subject, ev.State)
	}
	var env struct {
		Data Order `json:"data"`
	}
	if err := json.Unmarshal(ev.Envelope, &env); err != nil {
		t.Fatal(err)
	}
	if env.Data != (Order{ID: id, Customer: "ada", Total: 4250, Currency: "EUR"}) {
		t.Errorf("event data = %+v", env.Data)
	}
	var n int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
		t.Errorf("order rows = %d, %v; want 1", n, err)
	}
}

func TestPlaceOrderRefusedEventKeepsNoOrder(t *testing.T) {
	shop, st, ctx := newShop(t)
	_, err := shop.PlaceOrder(ctx, Order{Customer: "ada", Total: 100, Currency: "euro"})
	rej, ok := publish.IsRejection(err)
	if !ok || rej.Code != publish.CodeDataInvalid {
		t.Fatalf("PlaceOrder = %v, want data_invalid", err)
	}
	var orders, events int
	if err := st.Pool.QueryRow(ctx,
		`SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM events WHERE state <> 'rejected')`).
		Scan(&orders, &events); err != nil {
		t.Fatal(err)
	}
	if orders != 0 || events != 0 {
		t.Errorf("%d orders and %d events after a refused event, want none", orders, events)
	}
}
