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
	"time"

	"go.uber.org/zap"

	"herald/config"
	"herald/internal/tracing"
	"herald/internal/zaplog"
	"herald/service"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := config.LoadWorker(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workers:", err)
		return 2
	}
	log, err := zaplog.New(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workers: HERALD_LOG_LEVEL:", err)
		return 2
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
		return 2
	}
	tracing.SetTrustIncoming(cfg.TrustIncomingTrace)
	defer func() {
		// Flush the spans still buffered; ctx has ended by now.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(fctx); err != nil {
			log.Warn("flush traces", zap.Error(err))
		}
	}()
	svc, err := service.New(ctx, cfg, log)
	if err != nil {
		log.Error("start", zap.Error(err))
		return 1
	}
	if err := svc.Run(ctx); err != nil {
		log.Error("run", zap.Error(err))
		return 1
	}
	return 0
}
