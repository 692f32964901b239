package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"herald/publish"
)

// Event names of the orders app, as its manifest declares them.
const (
	App           = "orders"
	OrderPlaced   = "orders.order.placed"
	OrderPlacedV1 = 1
	subjectPrefix = "order-" // subject keys are "order-<order id>"
)

// createTable is the app's own schema: one table beside Herald's.
const createTable = `
	CREATE TABLE IF NOT EXISTS orders (
		id        uuid PRIMARY KEY,
		customer  text NOT NULL,
		total     bigint NOT NULL CHECK (total >= 0),
		currency  text NOT NULL,
		placed_at timestamptz NOT NULL DEFAULT now()
	)`

// Order is what a customer placed.
type Order struct {
	ID       string `json:"orderId"`
	Customer string `json:"customer"`
	Total    int64  `json:"total"` // minor units
	Currency string `json:"currency"`
}

// Shop stores orders and publishes them through Herald, both in one
// transaction.
type Shop struct {
	Pool      *pgxpool.Pool
	Publisher *publish.Publisher
}

// CreateTable creates the app's table if it does not exist.
func (s *Shop) CreateTable(ctx context.Context) error {
	if _, err := s.Pool.Exec(ctx, createTable); err != nil {
		return fmt.Errorf("create orders table: %w", err)
	}
	return nil
}

// PlaceOrder stores o and publishes orders.order.placed in one transaction:
// either both happen or neither does. A refused event (say, a currency the
// schema does not allow) rolls the order back too; the error then wraps a
// *publish.Rejection.
func (s *Shop) PlaceOrder(ctx context.Context, o Order) (publish.Result, error) {
	if o.ID == "" {
		o.ID = uuid.NewString()
	}
	data, err := json.Marshal(o)
	if err != nil {
		return publish.Result{}, fmt.Errorf("encode order: %w", err)
	}
	var res publish.Result
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx,
			`INSERT INTO orders (id, customer, total, currency) VALUES ($1, $2, $3, $4)`,
			o.ID, o.Customer, o.Total, o.Currency); err != nil {
			return fmt.Errorf("store order: %w", err)
		}
		out, err := s.Publisher.PublishTx(ctx, tx, publish.Request{
			App:     App,
			Type:    OrderPlaced,
			Version: OrderPlacedV1,
			Subject: subjectPrefix + o.ID,
			Data:    data,
		})
		if err != nil {
			return fmt.Errorf("publish %s: %w", OrderPlaced, err)
		}
		res = out[0]
		return nil
	})
	if err != nil {
		return publish.Result{}, fmt.Errorf("place order %s: %w", o.ID, err)
	}
	return res, nil
}
