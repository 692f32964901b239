// Command orders is a small example app that stores an order in its own table
// and publishes orders.order.placed in the same PostgreSQL transaction, with
// publish.Publisher.PublishTx. The relay sees the event only when the order
// is committed; a failed transaction publishes nothing.
//
// It uses Herald's database for its own table (one of the two deployments
// docs/publishing.md describes), so HERALD_DATABASE_URL must name a role that may
// create the table (or create it beforehand) and publish. Apply its manifest
// first:
//
//	starter apps apply examples/orders/manifest.json
//	go run ./examples/orders -customer ada -total 4250 -currency EUR
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"herald/publish"
	"herald/store"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		if _, ok := publish.IsRejection(err); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	var o Order
	fs.StringVar(&o.ID, "id", "", "order id (a UUID; default: a new one)")
	fs.StringVar(&o.Customer, "customer", "", "customer name (required)")
	fs.Int64Var(&o.Total, "total", 0, "order total in minor units (cents)")
	fs.StringVar(&o.Currency, "currency", "EUR", "ISO 4217 currency code")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Customer == "" {
		return errors.New("-customer is required")
	}
	url := os.Getenv("HERALD_DATABASE_URL")
	if url == "" {
		return errors.New("HERALD_DATABASE_URL is not set")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	shop := &Shop{Pool: st.Pool, Publisher: publish.New(st, publish.Options{})}
	if err := shop.CreateTable(ctx); err != nil {
		return err
	}
	res, err := shop.PlaceOrder(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("order placed; event %s seq %d", res.ID, res.Seq)
	if res.Duplicate {
		fmt.Print(" (already published)")
	}
	fmt.Println()
	return nil
}
