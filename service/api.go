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
)

// apiServer is the publishing API's own listener (HERALD_API_ADDR), kept
// apart from the operational endpoints so that it can be exposed to apps
// without exposing /metrics, and turned off (empty address) entirely.
type apiServer struct {
	listener net.Listener
	server   *http.Server
}

// newAPI listens on the API address when one is configured.
func (s *Service) newAPI() error {
	if s.cfg.APIAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (HERALD_API_ADDR): %w", s.cfg.APIAddr, err)
	}
	h := api.New(s.Store, api.Options{Logger: s.log.Named("api"), Rejected: s.Metrics.Rejected})
	s.api = &apiServer{listener: ln, server: api.NewServer(h)}
	return nil
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

// closeAPIListener releases the listener of an API never served.
func (s *Service) closeAPIListener() {
	if s.api != nil {
		_ = s.api.listener.Close()
	}
}
