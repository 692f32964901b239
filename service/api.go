package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"go.uber.org/zap"

	"herald/api"
	"herald/signing"
	"herald/store"
)

// apiServer is the publishing API's own listener (HERALD_API_ADDR), kept
// apart from the operational endpoints so that it can be exposed to apps
// without exposing /metrics, and turned off (empty address) entirely.
type apiServer struct {
	listener net.Listener
	server   *http.Server
	// store is the API's own small pool (HERALD_API_DB_CONNS): requests,
	// however many, wait for its connections and never for those of the
	// relay and the activities; its statements wait at most
	// api.LockTimeout for a lock.
	store *store.Store
}

// newAPI listens on the API address when one is configured, and opens the
// API's connection pool. The console's sessions are signed with a key
// derived from the secret key, the same on every replica.
func (s *Service) newAPI(ctx context.Context, box *signing.SecretBox) error {
	if s.cfg.APIAddr == "" {
		return nil
	}
	// Every statement of the API waits at most api.LockTimeout for a lock,
	// so an app's open transaction cannot hold the API's connections
	// (docs/design.md#the-publishing-api).
	st, err := store.Open(ctx, s.cfg.DatabaseURL, store.Options{MaxConns: int32(s.cfg.APIDBConns), LockTimeout: api.LockTimeout})
	if err != nil {
		return fmt.Errorf("publishing API: %w", err)
	}
	ln, err := net.Listen("tcp", s.cfg.APIAddr)
	if err != nil {
		st.Close()
		return fmt.Errorf("listen on %s (HERALD_API_ADDR): %w", s.cfg.APIAddr, err)
	}
	h := api.New(st, api.Options{Logger: s.log.Named("api"), Rejected: s.Metrics.Rejected,
		TokenConcurrency: s.cfg.APITokenConcurrency, AppConcurrency: s.cfg.APIAppConcurrency, Temporal: s.Temporal, Namespace: s.cfg.TemporalNamespace,
		ConsoleSessionKey: box.DeriveKey("herald console sessions"), TemporalUIURL: s.cfg.TemporalUIURL})
	s.api = &apiServer{listener: ln, server: api.NewServer(h), store: st}
	return nil
}

// APIStore is the publishing API's own connection pool, or nil when the
// API is off.
func (s *Service) APIStore() *store.Store {
	if s.api == nil {
		return nil
	}
	return s.api.store
}

// APIAddr is the address the publishing API listens on, or "" when it is off.
func (s *Service) APIAddr() string {
	if s.api == nil {
		return ""
	}
	return s.api.listener.Addr().String()
}

// serveAPI serves the API until stopAPI; a failure to serve goes to errs.
func (s *Service) serveAPI(wg *sync.WaitGroup, errs chan<- error) {
	if s.api == nil {
		return
	}
	s.log.Info("publishing API running", zap.String("addr", s.APIAddr()))
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.api.server.Serve(s.api.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case errs <- fmt.Errorf("publishing API: %w", err):
			default:
			}
		}
	}()
}

// stopAPI stops taking requests and waits for those in flight, within ctx.
func (s *Service) stopAPI(ctx context.Context) {
	if s.api != nil {
		_ = s.api.server.Shutdown(ctx)
	}
}

// closeAPI releases the listener of an API never served, and the API's
// connection pool.
func (s *Service) closeAPI() {
	if s.api != nil {
		_ = s.api.listener.Close()
		s.api.store.Close()
	}
}
