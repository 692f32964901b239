// Command workers is Herald's worker process: the Delivery workflow and its
// activities, the outbox relay and the HTTP endpoints (/healthz, /readyz,
// /metrics, /.well-known/jwks.json). Configuration comes from the environment
// (see config.Worker); SIGINT or SIGTERM stop it gracefully.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"herald/config"
	"herald/internal/tracing"
	"herald/internal/zaplog"
	"herald/service"
)

// Exit codes of the worker (docs/design.md#command-line, checked by
// main_test.go).
const (
	// exitStopped: the worker stopped gracefully.
	exitStopped = 0
	// exitFailed: the worker could not start or failed while running.
	exitFailed = 1
	// exitConfig: its configuration (the environment) is invalid.
	exitConfig = 2
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := config.LoadWorker(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workers:", err)
		return exitConfig
	}
	log, err := zaplog.New(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workers: HERALD_LOG_LEVEL:", err)
		return exitConfig
	}
	defer func() { _ = log.Sync() }()
	setGCPercent(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Tracing first: the service's Temporal client takes its interceptor only
	// when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT).
	shutdownTracing, err := tracing.Setup(ctx)
	if err != nil {
		log.Error("tracing", zap.Error(err))
		return exitConfig
	}
	tracing.SetTrustIncoming(cfg.TrustIncomingTrace)
	defer func() {
		// Flush the spans still buffered; ctx has ended by now.
		fctx, cancel := context.WithTimeout(context.Background(), tracing.FlushTimeout)
		defer cancel()
		if err := shutdownTracing(fctx); err != nil {
			log.Warn("flush traces", zap.Error(err))
		}
	}()
	svc, err := service.New(ctx, cfg, log)
	if err != nil {
		log.Error("start", zap.Error(err))
		return exitFailed
	}
	if err := svc.Run(ctx); err != nil {
		log.Error("run", zap.Error(err))
		return exitFailed
	}
	return exitStopped
}
